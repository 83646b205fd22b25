"""What a receiver's policy acts on, sans-I/O: its queue's depth, counted as full if the
queue dropped since the last look, and raised further by the path (queueing delay, loss
in flight: ``DelayMonitor``, ``LossMonitor``). A socket backlog ZeroMQ cannot report shows
there too: one that stays (a receiver that cannot read as fast as data arrives) delays
even the freshest frame of a window; one that clears within the window (a process that
was descheduled for a moment) does not, and is not congestion."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..config import NakConfig
from ..wire import SenderKey
from ..wire.codec import SIGNAL_CODES
from .fill import DelayMonitor, LossMonitor
from .rates import ArrivalMeter, DrainMeter

if TYPE_CHECKING:  # the receiver's tracker (core), read by duck typing
    from ..core.seqtrack import SequenceTracker

QUEUE, DELAY, LOSS, SILENCE = (SIGNAL_CODES[n] for n in ("queue", "delay", "loss",
                                                          "silence"))
#: A NAK on the queue is news only while the consumer takes less than this much more
#: than arrives: a backlog it drains faster is no reason to slow anyone.
CATCH_UP = 1.1
#: Work waiting this long with nothing taken (or PAUSE_GAPS of the consumer's usual gap
#: between takes, if longer): the consumer has paused (GC, stopped, gone elsewhere). A cut
#: cannot help a consumer that takes nothing, s.
PAUSE_S = 0.1
#: What ``judge`` says.
NEWS, NOT_NEWS, PAUSE = 0, 1, 2
#: A backlog that shows within this long of a hold-up (the process stopped or the
#: consumer away) is taken for the hold-up's until the consumer's rate is measured, s.
HELD_UP_S = 1.0
#: Hold-ups of the process at least this long are remembered (``HoldUps``) ...
HOLDUP_MIN_S = 0.02
#: ... for this long, s, and at most HOLDUP_MAX of them.
HOLDUP_MEMORY_S = 10.0
HOLDUP_MAX = 64


class HoldUps:
    """When this process was held up (stopped, descheduled) and for how long: a frame
    sent before a hold-up waited through it in the socket, and that part of its delay is
    the process's, not the path's, however long after the wake-up the frame is read
    (before, only the frames read at the wake-up itself were discounted). Frames sent
    after the hold-up that wait behind its backlog get no discount: that queueing is
    real (see docs/design/history.md, "a receiver back from a stop")."""

    def __init__(self) -> None:
        self._ups: list[tuple[float, float]] = []  # (ended at, lasted), oldest first

    def add(self, lasted: float, now: float) -> None:
        if lasted < HOLDUP_MIN_S:
            return
        ups = self._ups
        ups.append((now, lasted))
        while ups and (now - ups[0][0] > HOLDUP_MEMORY_S or len(ups) > HOLDUP_MAX):
            del ups[0]

    def since(self, sent_at: float) -> float:
        """How long this process was held up after ``sent_at`` (its own clock), s."""
        held = 0.0
        for ended, lasted in reversed(self._ups):
            if ended <= sent_at:
                break
            held += min(lasted, ended - sent_at)
        return held


class FillSignals:
    """``seen_depth``: the depth the policy acts on, and ``signal``: which of them set it
    (a ``nakflow.wire.SIGNALS`` code). Path signals only in ``nak``. ``judge``: is a NAK
    news now, or is the receiver catching up, or has its consumer paused; ``rate``: what
    the receiver can take, for the NAK (0: not known)."""

    def __init__(self, config: NakConfig, *, capacity_msgs: int, on: bool) -> None:
        self.capacity_msgs, self.window_s = capacity_msgs, config.window_s
        self.loss = LossMonitor(config.loss_fill if on else (), config.window_s,
                                config.loss_min_msgs, config.loss_min_frames)
        self.delay = DelayMonitor(config.delay_fill if on else (), config.window_s)
        self._dropped_seen = 0
        self._overflowed = False  # the queue dropped since the last look
        self.signal = QUEUE
        self.arrival = ArrivalMeter(config.window_s)
        self.drain = DrainMeter(config.window_s)
        self._received: tuple[float, int] = (0.0, 0)  # (since, arrived then)
        self.receive_rate = 0.0  # messages arriving per second, this receiver's clock
        self.held_up = False  # the last judgement: catching up, or the consumer paused
        self._held_at = -math.inf  # the last hold-up: a late process, an away consumer
        self.holdups = HoldUps()

    def forget(self, sender: SenderKey) -> None:
        """The stream ended or its sender left."""
        self.delay.forget(sender)
        self.arrival.forget(sender)

    def on_consumed(self, delivered: int, depth: int, now: float) -> None:
        """The application has taken ``delivered`` messages so far; ``depth`` wait."""
        self.drain.on_consumed(delivered, depth, now)

    def was_late(self, late_s: float, now: float) -> None:
        """The process ran ``late_s`` later than it could have (``ReceiverCore.late``):
        after a hold-up the consumer is judged afresh, by how fast it drains the backlog."""
        self.holdups.add(late_s, now)
        if late_s >= PAUSE_S:
            self._held_at = now
            self.drain.restart()

    def away_briefly(self, now: float) -> bool:
        """The consumer emptied the queue the last time it took anything, and work has
        waited for it less than a pause since (``PAUSE_S``, or ``PAUSE_GAPS`` of its
        usual gap): a consumer that keeps up whenever it runs, waiting for a core."""
        drain = self.drain
        return drain.caught_up and drain.away_for(now) < max(PAUSE_S, drain.pause_after())

    def judge(self, now: float) -> int:
        """NEWS, NOT_NEWS (the queue drains faster than data arrives: a consumer, or a
        process, that was held up catching up; or a consumer that keeps up whenever it
        runs, away for a moment) or PAUSE (the consumer takes nothing)."""
        self.held_up = False
        if self.signal != QUEUE:
            return NEWS  # the path: the consumer cannot help it
        if self.drain.away_for(now) >= max(PAUSE_S, self.drain.pause_after()):
            self.held_up, self._held_at = True, now
            self.drain.restart()
            return PAUSE
        if self.away_briefly(now) and not self._overflowed:
            # it emptied the queue the last time it took anything: all that waits came
            # while it was away (its thread descheduled, or the I/O thread held the GIL)
            # for less than PAUSE_S; a consumer that keeps up when it runs is not slow
            self.held_up = True
            return NOT_NEWS
        # the consumer's rate as soon as one window of work shows it: a backlog that a
        # consumer slower than the senders only grows is news even right after a hold-up
        # (the slow-start overshoot at a slow receiver: 1,778 drops without this)
        arriving, taking = self.arrival.rate(now), self.drain.provisional(self.window_s)
        if (taking is None and now - self._held_at <= HELD_UP_S) or (
                arriving is not None and taking is not None and taking >= CATCH_UP * arriving):
            self.held_up = True
            return NOT_NEWS
        return NEWS

    def rate(self, now: float) -> float:
        """What the receiver can take from each sender, msgs/s, by the signal behind the
        fill: its consumer (queue: 0 until measured), or its path (what arrives: delay,
        loss, silence), shared among the senders heard lately. Every sender cuts no lower
        than a share of this: the total (5,000 rows/s at a slow consumer fed by two Spark
        tasks) let each settle near it, twice what the consumer took (7,960 drops)."""
        total = ((self.drain.provisional(self.window_s) or 0.0) if self.signal == QUEUE
                 else self.receive_rate)
        return total / max(1, self.arrival.senders(now))

    def seen_depth(self, depth: int, dropped: int, tracker: SequenceTracker, *,
                   now: float) -> int:
        """``depth``, full if the queue dropped since the last look (``dropped``: all it
        ever dropped), or more while the path queues or drops or the I/O thread is behind."""
        seen, signal = depth, QUEUE
        self._overflowed = dropped > self._dropped_seen
        if self._overflowed:  # overflowed since the last look: it was full
            self._dropped_seen = dropped
            seen = self.capacity_msgs
        since, arrived = self._received
        if now - since >= self.window_s:
            if since:  # smoothed over about four windows: one is noisy on a busy host
                measured = (tracker.arrived - arrived) / (now - since)
                self.receive_rate = (measured if not self.receive_rate
                                     else 0.75 * self.receive_rate + 0.25 * measured)
            self._received = (now, tracker.arrived)
        delay, loss = self.delay.observe(now=now), self.loss.observe(
            tracker.gap_msgs, tracker.arrived, now=now, gap_events=tracker.gap_events,
            frames=tracker.frames)
        fill, path = ((delay, SILENCE if self.delay.silent else DELAY) if delay >= loss
                      else (loss, LOSS))
        if fill and (as_full := math.ceil(fill * self.capacity_msgs)) > seen:
            seen, signal = as_full, path  # the path (or the I/O thread) counts as full
        self.signal = signal
        return seen
