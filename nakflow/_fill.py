"""The receiver's NAK emitter: watches queue fill, speaks only under overload."""

from __future__ import annotations

import math
from typing import Any, Protocol

from ._config import NakConfig
from ._errors import ConfigError

#: Shape of the truncated-exponential hold-off: a handful of receivers speak first,
#: most draw late and hear them (good for N up to about e**10).
BACKOFF_LAMBDA = 10.0
_BACKOFF_SPAN = math.expm1(BACKOFF_LAMBDA)


class Uniform(Protocol):
    """An injected source of uniform draws in [0, 1) (random.Random, numpy Generator)."""

    def random(self) -> float: ...


def backoff_delay(u: float, backoff_s: float) -> float:
    """The hold-off for a uniform draw ``u``: inverse CDF of the truncated exponential."""
    return backoff_s / BACKOFF_LAMBDA * math.log1p(u * _BACKOFF_SPAN)


class FillMonitor:
    """Decides which NAK a receiver emits, if any.

    * Silent while the fill is below the lowest level: no overload, no feedback.
    * Emits when the fill first reaches a level (a rise is news: at once).
    * While the fill stays at or above a level, repeats the highest level held at
      most once per ``window_s`` (repeats make a lost NAK harmless).
    * Hysteresis: a level, once reached, is held until the fill drops
      ``hysteresis_pct`` points below it, so the fill cannot flap around a mark
      (seeds 002 and 004).
    * Suppression: NAKs are multicast, so every receiver hears the others'. A
      NAK due while one of equal or higher level was heard within the last
      window is not sent — the sender would ignore it anyway.
    * Hold-off (with an ``rng``): a due NAK first waits a random delay in
      [0, ``backoff_s``) drawn from a truncated exponential, so that when N
      receivers overload together a few speak and the rest overhear them
      (SRM-style timers, Nonnenmacher & Biersack). Feedback volume then stays
      roughly flat as receivers are added. ``next_deadline`` reports the timer.
    """

    def __init__(self, capacity_msgs: int, config: NakConfig | None = None, *,
                 rng: Uniform | None = None) -> None:
        if capacity_msgs < 1:
            raise ConfigError("capacity_msgs must be >= 1")
        self.capacity_msgs = capacity_msgs
        self.config = cfg = config if config is not None else NakConfig()
        self._levels_desc = sorted(cfg.levels, reverse=True)
        self._held: int | None = None
        self._last_level: int | None = None
        self._last_t = 0.0
        self._heard_level = -1
        self._heard_t = 0.0
        self.naks_sent: dict[int, int] = {}
        self.suppressed = 0
        self._rng = rng if cfg.backoff_s > 0 else None
        self._pending_at: float | None = None
        self._pending_level = 0

    @property
    def held_level(self) -> int | None:
        """The level currently held (None: below the lowest level)."""
        return self._held

    def fill_pct(self, depth: int) -> float:
        return 100.0 * depth / self.capacity_msgs

    def update(self, depth: int, *, now: float) -> int | None:
        """Queue holds ``depth`` messages at ``now``: return the NAK level to send, or None."""
        held = self._held_at(self.fill_pct(depth))
        self._held = held
        if held is None:
            self._last_level = None
            self._pending_at = None
            return None
        last = self._last_level
        if last is not None and held <= last and now - self._last_t < self.config.window_s:
            return None
        if self._rng is not None:
            if self._pending_at is None or held > self._pending_level:
                self._pending_at = now + backoff_delay(self._rng.random(), self.config.backoff_s)
                self._pending_level = held
            if now < self._pending_at:
                return None
            self._pending_at = None
        self._last_level = held
        self._last_t = now
        if self._heard_level >= held and now - self._heard_t < self.config.window_s:
            self.suppressed += 1
            return None
        self.naks_sent[held] = self.naks_sent.get(held, 0) + 1
        return held

    def on_heard(self, level: int, *, now: float) -> None:
        """Another receiver's NAK of ``level`` for this stream was overheard at ``now``."""
        if level >= self._heard_level or now - self._heard_t >= self.config.window_s:
            self._heard_level = level
            self._heard_t = now

    def next_deadline(self) -> float | None:
        """When a held level is next due for repeat (None: nothing held)."""
        if self._held is None:
            return None
        if self._pending_at is not None:
            return self._pending_at
        return self._last_t + self.config.window_s

    def _held_at(self, fill: float) -> int | None:
        held = self._held
        hyst = self.config.hysteresis_pct
        for level in self._levels_desc:
            if fill >= level:
                return level
            if held is not None and level <= held and fill >= level - hyst:
                return level
        return None

    def snapshot(self) -> dict[str, Any]:
        return {
            "held_level": self._held,
            "naks_sent": {str(k): v for k, v in sorted(self.naks_sent.items())},
            "naks_suppressed": self.suppressed,
        }
