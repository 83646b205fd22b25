"""What a receiver's policy acts on, sans-I/O: its queue's depth, counted as full if the
queue dropped since the last look, and raised further by the path (queueing delay, loss
in flight: ``DelayMonitor``, ``LossMonitor``) or by an I/O thread that is behind (socket
backlog ZeroMQ cannot report)."""

from __future__ import annotations

import math

from ._config import NakConfig
from ._fill import DelayMonitor, LossMonitor
from ._seqtrack import SequenceTracker

#: When every read finds a full chunk waiting, the I/O thread is behind; after being
#: behind for these multiples of the NAK window, the queue counts as 50/75/87/100 % full.
SATURATION_FILL = ((4.0, 1.0), (2.0, 0.87), (1.0, 0.75), (0.2, 0.5))


def saturation_fill(behind_s: float, window_s: float) -> float:
    """The fill an I/O thread behind for ``behind_s`` stands for (SATURATION_FILL; 0: none)."""
    return next((fill for windows, fill in SATURATION_FILL if behind_s / window_s >= windows),
                0.0)


class FillSignals:
    """``seen_depth``: the depth the policy acts on. Path signals only in ``nak``."""

    def __init__(self, config: NakConfig, *, capacity_msgs: int, on: bool) -> None:
        self.capacity_msgs, self.window_s = capacity_msgs, config.window_s
        self.loss = LossMonitor(config.loss_fill if on else (), config.window_s,
                                config.loss_min_msgs, config.loss_min_frames)
        self.delay = DelayMonitor(config.delay_fill if on else (), config.window_s)
        self._behind_since: float | None = None
        self._dropped_seen = 0
        self.saturated_polls = 0

    def io_behind(self, behind: bool, now: float) -> None:
        """The driver read a whole chunk and more was waiting (``behind``), or not."""
        if not behind:
            self._behind_since = None
        elif self._behind_since is None:
            self._behind_since = now

    def seen_depth(self, depth: int, dropped: int, tracker: SequenceTracker, *,
                   now: float) -> int:
        """``depth``, full if the queue dropped since the last look (``dropped``: all it
        ever dropped), or more while the path queues or drops or the I/O thread is behind."""
        seen = depth
        if dropped > self._dropped_seen:  # overflowed since the last look: it was full
            self._dropped_seen = dropped
            seen = self.capacity_msgs
        fill = max(self.delay.observe(now=now), self.loss.observe(
            tracker.gap_msgs, tracker.arrived, now=now, gap_events=tracker.gap_events,
            frames=tracker.frames))
        if self._behind_since is not None and (sat := saturation_fill(
                now - self._behind_since, self.window_s)):
            self.saturated_polls += 1
            fill = max(fill, sat)
        return max(seen, math.ceil(fill * self.capacity_msgs)) if fill else seen  # as if full
