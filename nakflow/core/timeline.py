"""A bounded time series of metrics, for plots and post-mortems.

Sans-I/O: the caller passes ``now``. At most one sample per ``interval_s`` is
kept; when ``max_samples`` is reached, every other sample is discarded and the
interval doubles, so memory stays bounded on runs of any length while the
series still spans the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError


class Timeline:
    """Samples named numeric columns over time: ``sample(now, *values)``."""

    def __init__(self, columns: Sequence[str], *, interval_s: float = 0.05,
                 max_samples: int = 4096) -> None:
        if not interval_s > 0 or max_samples < 2:
            raise ConfigError("interval_s must be > 0 and max_samples >= 2")
        self.columns = ("t", *columns)
        self.interval_s = interval_s
        self.max_samples = max_samples
        self._rows: list[tuple[float | None, ...]] = []
        self._next = -math.inf

    def due(self, now: float) -> bool:
        """True if a sample taken at ``now`` would be kept."""
        return now >= self._next

    def sample(self, now: float, *values: float | None) -> None:
        if now < self._next:
            return
        if len(values) != len(self.columns) - 1:
            raise ValueError(f"expected {len(self.columns) - 1} values, got {len(values)}")
        self._rows.append((now, *values))
        if len(self._rows) >= self.max_samples:
            self._rows = self._rows[::2]
            self.interval_s *= 2
        self._next = now + self.interval_s

    def __len__(self) -> int:
        return len(self._rows)

    def as_dict(self, *, t0: float = 0.0) -> dict[str, list[Any]]:
        """Column name -> values; times relative to ``t0``, rounded to 0.1 ms."""
        out: dict[str, list[Any]] = {c: [] for c in self.columns}
        for row in self._rows:
            out["t"].append(round(float(row[0] or 0.0) - t0, 4))
            for c, v in zip(self.columns[1:], row[1:], strict=True):
                out[c].append(v if v is None or isinstance(v, int) else round(v, 3))
        return out


def rate_series(t: Sequence[float], cumulative: Sequence[float | None],
                window_s: float = 0.1) -> tuple[list[float], list[float]]:
    """(times, rates): a cumulative count's rate over windows of about ``window_s``."""
    if len(t) < 2:
        return [], []
    w = max(1, round(window_s / max(t[1] - t[0], 1e-9)))
    ts, rates = [], []
    for i in range(w, len(t), w):
        a, b = cumulative[i - w], cumulative[i]
        if a is None or b is None or t[i] <= t[i - w]:
            continue
        ts.append(t[i])
        rates.append((b - a) / (t[i] - t[i - w]))
    return ts, rates
