"""Rates a receiver measures to tell congestion from a backlog it is already draining.

A NAK is news only if the receiver cannot keep up: if what arrives exceeds what it can
take. A queue (or socket backlog) that fills while the process was descheduled, or the
consumer paused, and then drains faster than data arrives is not. So a receiver knows:

* ``ArrivalMeter``: the senders' send rate, from their DATA frames' seqs and stamps (the
  sender's clock): a backlog read late still shows the rate it was sent at;
* ``DrainMeter``: what the consumer takes per second while its process runs, and how
  long work has waited with nothing taken.

Sans-I/O: every call takes ``now``.
"""

from __future__ import annotations

from ..wire import SenderKey

#: The consumer counts as away after this long without taking anything while work waits, s.
ABSENT_S = 0.02
#: A consumer whose takes are this many of its usual gaps apart (``DrainMeter.gap_s``)
#: while work waits has paused, not slowed (``FillSignals.judge``).
PAUSE_GAPS = 3.0
#: A sender not heard for this long no longer counts in the arrival rate, s.
ARRIVAL_FRESH_S = 1.0
MAX_SENDERS = 1024


class ArrivalMeter:
    """The senders' total send rate, msgs/s (None until one sender spanned a window), and
    the repairs arriving on top of it (this receiver's clock, smoothed over windows)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        # stream (sender, epoch: a task and its speculative copy are two senders) ->
        # [span start seq, span start ts, rate, last heard (local)]
        self._of: dict[SenderKey, list[float]] = {}
        self._repairs = 0
        self._repair_span: tuple[float, int] = (0.0, 0)
        self.repair_rate = 0.0

    def on_repaired(self, n: int, now: float) -> None:
        """``n`` repaired messages for every receiver arrived (RDATA: load on the queue
        like new data). Repairs for this receiver alone are not counted: it asked for them
        only as far as its queue had room, the sender paces them in a budget of their own,
        and a group cut cannot help with them (counted, a receiver back from a 300 ms pause
        cut the group to a quarter of its rate for its own catch-up: simulated gc-pauses,
        ten receivers, goodput 15,278 against ACK's 17,917 msgs/s)."""
        self._repairs += n
        t0, r0 = self._repair_span
        if now - t0 >= self.window_s:
            measured = (self._repairs - r0) / (now - t0) if t0 else 0.0
            self.repair_rate = 0.75 * self.repair_rate + 0.25 * measured
            self._repair_span = (now, self._repairs)

    def on_frame(self, sender: SenderKey, next_seq: int, ts: float, now: float) -> None:
        """A DATA frame of stream ``sender`` ending at ``next_seq``, stamped ``ts`` (its
        clock)."""
        row = self._of.get(sender)
        if row is None:
            if len(self._of) >= MAX_SENDERS:
                del self._of[next(iter(self._of))]
            self._of[sender] = [next_seq, ts, -1.0, now]
            return
        row[3] = now
        span = ts - row[1]
        if span >= self.window_s:
            if next_seq >= row[0]:
                row[2] = (next_seq - row[0]) / span
            row[0], row[1] = next_seq, ts
        elif span < 0:  # a restarted sender's clock, or reordering: start over
            row[0], row[1] = next_seq, ts

    def rate(self, now: float) -> float | None:
        total, known = 0.0, False
        for _seq0, _ts0, rate, heard in self._of.values():
            if rate >= 0 and now - heard <= ARRIVAL_FRESH_S:
                total += rate
                known = True
        if now - self._repair_span[0] > ARRIVAL_FRESH_S:
            self.repair_rate = 0.0  # no repairs for a while
        return total + self.repair_rate if known else None

    def senders(self, now: float) -> int:
        """Senders heard within ARRIVAL_FRESH_S."""
        return sum(1 for row in self._of.values() if now - row[3] <= ARRIVAL_FRESH_S)

    def forget(self, sender: SenderKey) -> None:
        self._of.pop(sender, None)


class DrainMeter:
    """The consumer's drain rate (``rate``; None: not measured yet) and how long work has
    waited with nothing taken (``away_for``). Time between two looks of the I/O thread
    counts toward the rate while the consumer was behind: work waited at the first look
    and it had not taken all of it by the second, or it had been behind and now took the
    last of it (that look counts too, with what it took); and this process ran: the looks
    at most ABSENT_S apart. A longer gap means the whole process was descheduled (or
    stopped): its consumer was no slower for it, and the gap is left out. A consumer that
    takes all there is at every look shows only the arrival rate, not what it could take:
    no measure.

    On cores it shares, a consumer that keeps up whenever it runs alternates looks where
    it took nothing (its thread waited for a core) with looks where it took everything.
    Counting only the first kind measured it at 0-15,000 msgs/s where it took 150,000
    (1 -> 4 fan-outs, 2026-11-29), and a queue NAK carried that. The look where it caught
    up may include a moment it had nothing to do: the rate is at most what it can take."""

    def __init__(self, window_s: float) -> None:
        self.span_s = 4 * window_s  # the rate covers about this long
        self._last: tuple[float, int, int] | None = None  # (now, delivered, depth)
        self._took_at = 0.0  # when it last took something
        #: the usual time between two takes while work waited, s (0: not seen yet): a
        #: consumer of 100 KB Arrow messages takes one every 0.2 s and is not paused for it
        self.gap_s = 0.0
        self.caught_up = False  # the last time it took something, it took all there was
        self._busy_s = 0.0
        self._busy_msgs = 0
        self._behind = False  # it left work behind at the last look
        self.rate: float | None = None

    def on_consumed(self, delivered: int, depth: int, now: float) -> None:
        last = self._last
        self._last = (now, delivered, depth)
        if last is None:
            self._took_at = now
            return
        t0, d0, depth0 = last
        took = delivered - d0
        if took:
            if depth0 and now - t0 <= ABSENT_S:  # work waited and the process ran: the
                # gap is the consumer's own; clipped, one pause moves it at most 1.75x
                g, gap = self.gap_s, now - self._took_at
                self.gap_s = gap if not g else 0.75 * g + 0.25 * min(gap, 4.0 * g)
            self._took_at = now
            self.caught_up = took >= depth0  # the I/O thread puts only at its looks
        behind = depth0 > took
        if (behind or self._behind) and depth0 and now - t0 <= ABSENT_S:  # work waited
            self._busy_s += now - t0  # and it was behind (or caught up now); it ran
            self._busy_msgs += took
        self._behind = behind
        if self._busy_s >= self.span_s:
            measured = self._busy_msgs / self._busy_s
            self.rate = measured if self.rate is None else (self.rate + measured) / 2
            self._busy_s, self._busy_msgs = 0.0, 0

    def provisional(self, min_busy_s: float) -> float | None:
        """What the consumer took while work waited, before ``rate`` is measured: None
        until it was busy ``min_busy_s``. A first look, not a rate to give away."""
        if self.rate is not None or self._busy_s < min_busy_s:
            return self.rate
        return self._busy_msgs / self._busy_s

    def restart(self) -> None:
        """Forget the rate: judge the consumer afresh (after a hold-up)."""
        self.rate, self._busy_s, self._busy_msgs = None, 0.0, 0

    def pause_after(self) -> float:
        """How long work may wait with nothing taken before the consumer counts as
        paused, s: PAUSE_GAPS of its usual gap between takes (``FillSignals.judge``
        takes the longer of this and PAUSE_S)."""
        return PAUSE_GAPS * self.gap_s

    def away_for(self, now: float) -> float:
        """How long work has waited with nothing taken, s (0: the consumer is there)."""
        last = self._last
        if last is None or not last[2]:
            return 0.0
        return max(0.0, now - self._took_at)
