"""Token bucket pacing messages to a rate with a bounded burst (no clock)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

#: A held sender gathers no more than this many messages: past that, a frame's headers
#: are a small share (the lab's 8 Mbit/s link carried a 1 KB message in 1,119 bytes
#: alone, 1,074 in frames of 3.6, 1,061 in frames of 8.5, 1,058 in frames of 14, ACK's
#: frames of 60 in 1,052); at high rates a driver's millisecond wait gathers more.
GATHER_MSGS = 16.0


class TokenBucket:
    """Paces a count (messages, or bytes) to ``rate`` per second.

    ``request(n, now=)`` answers 0.0 ("go": the tokens are taken) or the number of
    seconds to wait before asking again (nothing is taken). A request larger
    than the burst is let through once the bucket is full and leaves a debt, so
    a big batch is paced, not refused forever. ``set_rate`` takes effect at once.
    ``gather_s``: a request that must wait waits until ``gather_s`` of the rate (at
    most GATHER_MSGS) may go, so what then goes can leave together (0: until the
    request may go); the bucket holds that on top of the burst, so a wait that runs
    over (a driver's poll counts in whole milliseconds) loses nothing.
    """

    __slots__ = ("_capacity", "_last", "_min_burst", "_rate", "_tokens", "burst_s",
                 "gather_s", "waits")

    def __init__(self, rate: float, *, burst_s: float = 0.005, min_burst: float = 1.0,
                 gather_s: float = 0.0) -> None:
        if not rate > 0:
            raise ConfigError("rate must be > 0")
        if not burst_s > 0 or not min_burst > 0:
            raise ConfigError("burst_s and min_burst must be > 0")
        if not gather_s >= 0:
            raise ConfigError("gather_s must be >= 0")
        self.burst_s = burst_s
        self.gather_s = gather_s
        self._min_burst = min_burst
        self._rate = float(rate)
        self._capacity = max(min_burst, rate * burst_s) + self._gather()
        self._tokens = self._capacity
        self._last: float | None = None
        self.waits = 0

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def capacity(self) -> float:
        return self._capacity

    def _refill(self, now: float) -> None:
        last = self._last
        if last is None:
            self._last = now
        elif now > last:
            tokens = self._tokens + (now - last) * self._rate
            self._tokens = tokens if tokens < self._capacity else self._capacity
            self._last = now

    def request(self, n: float, *, now: float) -> float:
        """Take ``n`` tokens at ``now`` and return 0.0, or return the wait in seconds."""
        self._refill(now)
        need = n if n < self._capacity else self._capacity
        if self._tokens >= need - 1e-9:  # a wait of what it said suffices, rounding aside
            self._tokens -= n
            return 0.0
        self.waits += 1
        gather = self._gather()
        if gather > need:
            need = gather
        return (need - self._tokens) / self._rate

    def _gather(self) -> float:
        """Tokens a held sender waits for, at least (0: none beyond its request)."""
        g = self._rate * self.gather_s
        return g if g < GATHER_MSGS else GATHER_MSGS

    def wait(self, n: float, *, now: float) -> float:
        """Seconds until ``n`` tokens (at most the burst) are there, 0.0 if they are;
        takes nothing."""
        self._refill(now)
        need = n if n < self._capacity else self._capacity
        return 0.0 if self._tokens >= need - 1e-9 else (need - self._tokens) / self._rate

    def take_up_to(self, n: int, *, now: float) -> int:
        """Take as many whole tokens as are available, at most ``n``; return how many."""
        self._refill(now)
        k = int(self._tokens + 1e-9)  # as request: a wait of what it said suffices
        if k > n:
            k = n
        if k > 0:
            self._tokens -= k
        return max(k, 0)

    def refund(self, n: int) -> None:
        """Give back ``n`` tokens taken but not used (at most up to the burst)."""
        tokens = self._tokens + n
        self._tokens = tokens if tokens < self._capacity else self._capacity

    def set_rate(self, rate: float, *, now: float) -> None:
        """Change the rate at ``now``; tokens earned so far are kept (up to the new burst)."""
        if not rate > 0:
            raise ConfigError("rate must be > 0")
        self._refill(now)
        self._rate = float(rate)
        self._capacity = max(self._min_burst, rate * self.burst_s) + self._gather()
        if self._tokens > self._capacity:
            self._tokens = self._capacity

    def snapshot(self) -> dict[str, Any]:
        return {"rate": self._rate, "tokens": self._tokens, "burst": self._capacity,
                "waits": self.waits}


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
