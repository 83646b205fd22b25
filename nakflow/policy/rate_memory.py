"""What senders on one path (stream and data endpoints) learnt about its rate, kept for
the next sender on it in this process: ``Sender(remember_rate=True)``.

Process-wide state, kept out of the compiled hot modules (whose module-level objects
would exist twice: once in the source module, once in its twin).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..config import NakConfig


class RateMemory:
    """The rate senders reached on a path, remembered for the next sender on it.

    A sender that ends hands in its validated rate (``NakFlow.validated_rate``: the
    limit, but no more than it really sent at; if its stream ended inside its start,
    what the start measured, or nothing); a sender starting on the same path
    (stream and data endpoints) within ``max_age_s`` starts from there instead of slow
    start's ``initial_rate_msgs``. That is TCP's temporal sharing (RFC 9040; Linux keeps
    such per-destination metrics in ``tcp_metrics``): a Spark job's tasks run one after
    another in the same Python worker, and each would climb from 5,000 msgs/s again.
    If the path got slower since, the first NAK cuts as usual. No clock: ``now`` in.
    """

    def __init__(self, max_age_s: float = 10.0, max_paths: int = 256) -> None:
        self.max_age_s, self.max_paths = max_age_s, max_paths
        self._paths: dict[Any, tuple[float, float]] = {}  # key -> (rate, when)

    def recall(self, key: Any, *, now: float) -> float | None:
        got = self._paths.get(key)
        if got is None or now - got[1] > self.max_age_s:
            return None
        return got[0]

    def remember(self, key: Any, rate: float, *, now: float) -> None:
        self._paths.pop(key, None)
        self._paths[key] = (rate, now)
        while len(self._paths) > self.max_paths:
            del self._paths[next(iter(self._paths))]


class PathRate:
    """One path's place in a ``RateMemory``: the rate a sender on it starts from
    (``recall``), and where it leaves its validated rate after an exact close (``leave``).
    The path is the stream and its data endpoints (in any order)."""

    def __init__(self, memory: RateMemory, stream: str, endpoints: Sequence[str]) -> None:
        self.memory, self.key = memory, (stream, tuple(sorted(endpoints)))

    def recall(self, *, now: float) -> float | None:
        return self.memory.recall(self.key, now=now)

    def leave(self, rate: float | None, *, now: float) -> None:
        """Leave ``rate`` for the next sender (None: nothing to hand on)."""
        if rate is not None:
            self.memory.remember(self.key, rate, now=now)


def starting_at(nak: NakConfig, rate: float) -> NakConfig:
    """``nak`` with a sender starting at a remembered ``rate`` (within its bounds)."""
    return replace(nak, initial_rate_msgs=min(max(rate, nak.min_rate_msgs), nak.max_rate_msgs))


#: Where ``Sender(remember_rate=True)`` senders leave and find their path's rate.
RATE_MEMORY = RateMemory()
