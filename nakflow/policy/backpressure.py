"""Backpressure episodes, counted the way seed 004 names them.

An episode starts when the queue reaches the high watermark (capacity) and
ends when it drains below the low watermark (default 50 % of capacity):
``backpressure_events`` and ``backpressure_duration_s``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


class BackpressureEpisodes:
    """Counts episodes and their total duration from (depth, now) observations."""

    def __init__(self, capacity_msgs: int, *, low_watermark_ratio: float = 0.5) -> None:
        if capacity_msgs < 1 or not 0 <= low_watermark_ratio < 1:
            raise ConfigError("capacity_msgs >= 1 and low_watermark_ratio in [0, 1) required")
        self.high = capacity_msgs
        self.low = capacity_msgs * low_watermark_ratio
        self.events = 0
        self.duration_s = 0.0
        self._since: float | None = None

    @property
    def active(self) -> bool:
        return self._since is not None

    def observe(self, depth: int, *, now: float) -> None:
        if self._since is None:
            if depth >= self.high:
                self._since = now
                self.events += 1
        elif depth < self.low:
            self.duration_s += now - self._since
            self._since = None

    def snapshot(self, *, now: float) -> dict[str, Any]:
        ongoing = 0.0 if self._since is None else now - self._since
        return {"backpressure_events": self.events,
                "backpressure_duration_s": round(self.duration_s + ongoing, 6)}
