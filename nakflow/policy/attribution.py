"""Who slows a NAK sender, and why (Aeron users ask it as "which consumer is slowing me?").

Every cut and every hold of the rate limit is put down to the receiver whose NAK did it
and the signal the NAK names (``wire.SIGNALS``: its queue, the path's delay, loss in
flight, a silent path, an I/O thread behind, repairs). Counts per signal, per receiver
(at most MAX_RECEIVERS, the fewest cuts forgotten first), the limiting receiver (the last
cut's), and the recent cuts themselves (for plots). Sans-I/O: ``now`` comes in.
"""

from __future__ import annotations

from collections import deque
from typing import Any

MAX_RECEIVERS = 64
MAX_EVENTS = 512
TOP_RECEIVERS = 10  # receivers a snapshot lists
#: A receiver whose consumer paused can have the cuts it caused within this long undone,
#: if nobody else cut meanwhile, s.
UNDO_WINDOW_S = 2.0


class CutLog:
    """``cut`` and ``hold`` record; ``snapshot`` reports."""

    def __init__(self) -> None:
        self.cuts: dict[str, int] = {}
        self.holds: dict[str, int] = {}
        self._receivers: dict[str, list[int]] = {}  # receiver -> [cuts, holds]
        self.limiting: tuple[str, str, float] | None = None  # (receiver, signal, since)
        self.events: deque[tuple[float, str, str, int, float]] = deque(maxlen=MAX_EVENTS)
        self._before: deque[float] = deque(maxlen=MAX_EVENTS)  # the limit before each cut
        self.undone = 0

    def undo_point(self, receiver: str, now: float) -> float | None:
        """The limit before the cuts ``receiver`` caused within UNDO_WINDOW_S, if all the
        cuts since then were its own (None: none, or another receiver cut too). Those
        cuts are then counted as undone."""
        point = None
        for (t, _s, r, _lv, _rate), before in zip(reversed(self.events),
                                                   reversed(self._before), strict=True):
            if now - t > UNDO_WINDOW_S:
                break
            if r != receiver:
                return None
            point = before
        if point is not None:
            self.undone += 1
        return point

    def cut(self, now: float, signal: str, receiver: str, level: int, rate: float,
            before: float = 0.0) -> None:
        """A NAK of ``level`` from ``receiver`` on ``signal`` cut the limit from
        ``before`` to ``rate``."""
        self.cuts[signal] = self.cuts.get(signal, 0) + 1
        self._count(receiver, 0)
        if self.limiting is None or self.limiting[0] != receiver:
            self.limiting = (receiver, signal, now)
        else:
            self.limiting = (receiver, signal, self.limiting[2])
        self.events.append((now, signal, receiver, level, rate))
        self._before.append(before)

    def hold(self, signal: str, receiver: str) -> None:
        """A NAK kept the limit from rising (no cut)."""
        self.holds[signal] = self.holds.get(signal, 0) + 1
        self._count(receiver, 1)

    def _count(self, receiver: str, i: int) -> None:
        row = self._receivers.get(receiver)
        if row is None:
            if len(self._receivers) >= MAX_RECEIVERS:  # bounded: forget the least cutting
                del self._receivers[min(self._receivers, key=lambda r: self._receivers[r])]
            row = self._receivers[receiver] = [0, 0]
        row[i] += 1

    def snapshot(self, *, t0: float = 0.0) -> dict[str, Any]:
        top = sorted(self._receivers.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))
        lim = self.limiting
        return {
            "cuts_by_signal": dict(sorted(self.cuts.items())),
            "holds_by_signal": dict(sorted(self.holds.items())),
            "by_receiver": {r: {"cuts": c, "holds": h} for r, (c, h) in top[:TOP_RECEIVERS]},
            "limiting": None if lim is None else {"receiver": lim[0], "signal": lim[1],
                                                  "since_s": round(lim[2] - t0, 4)},
            "cuts_undone": self.undone,
            "cut_events": [{"t": round(t - t0, 4), "signal": s, "receiver": r, "level": lv,
                            "rate": round(rate, 1)} for t, s, r, lv, rate in self.events],
        }
