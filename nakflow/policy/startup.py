"""NAK's start (issue 35): a window for the first round trips, the rate limit after.

A sender cannot tell a fast path from a slow one from its RTT, and a NAK comes only once
a queue or a delay has built up: a rate ramp either takes a second to reach loopback's
rate or overshoots a slow link by a second of its traffic. So, for its first round
trips only, a NAK sender asks its receivers how far they got (DATA says ``startup``;
each answers with PROGRESS, at most one a ``REPORT_S`` per sender, or the longer
interval a sender with many receivers asks for, ``SlowStart.report_us``) and keeps no more in
flight than a window over the slowest of them, as Aeron keeps a sender within a receiver
window and TCP's slow start within its congestion window, and never more than a
receiver's queue has room for (ACK's credit):

- the window starts at ``NakConfig.start_window_msgs`` (``RESTART_WINDOW_MSGS`` when it
  starts again mid-stream, into queues that may hold a backlog), or where every receiver
  that answered the sender's HELLO said its room, at ``NakConfig.start_window_bytes`` of
  the first message's size within half the least room, if that is more (``FirstWindow``;
  on a path that stays on this host, ``local``, half the least room: no link to
  overshoot, only the receivers' queues); it grows by what the
  slowest receiver confirms: it doubles each round trip (a round ends when the slowest
  receiver has everything sent when it began, and lasts ``ROUND_MIN_S`` and an RTT at
  least); it is never less than an RTT of the ramp it replaces (unless a receiver's queue
  fills: its room below half the most it reported, or none, or a backlog it reports),
  and is paced at ``PACE_GAIN``
  x window / RTT on paths of ``PACE_MIN_RTT_S`` or more; a confirmation whose report's
  delay is up (below) grows it a quarter as fast; a DATA frame holds an eighth of it at
  most (``frame_msgs``: a receiver behind a slow link reads a frame whole, and reports
  DELAY_SAMPLES times a round so);
- the start ends on the first of:

  - a receiver's least one-way delay over ``DELAY_SAMPLES`` samples (a report is as
    many as the messages it confirms; or ``DELAY_MIN_SAMPLES`` over a round) up by
    clamp(RTT/8, 4 ms, 16 ms) on the least it showed, and still up after
    ``CSS_ROUNDS`` rounds (``CSS_MAX_S`` at most) of growing a quarter as fast
    (HyStart++, RFC 9406 4.2-4.3: a rise that falls back below the threshold was
    spurious, a process descheduled, and the start goes on);
  - three window-limited rounds whose delivery rate grew less than 1.25x (BBR's full
    pipe);
  - three rounds the application did not fill the window (nothing in the path limits
    it);
  - a NAK, but for a queue's below its top level that says no rate (its consumer not
    measured yet) from a receiver whose room holds the window (``room_holds``: the room
    does what it asks already);
  - no confirmation for ``STALL_S`` or ``STALL_RTTS`` round trips, whichever is longer
    (``SILENT_S`` before any answer): a receiver died, or none answers (an older one);
  - ``MAX_S``;

- the rate limit then starts at the delivery rate of the last rounds (after a delay
  rise, of those begun since it), no more than the slowest queue took in them once one
  is a quarter full (``SlowStart.outcome``): below it by ``DRAIN`` after a delay rise,
  a full pipe or a stall (the queue the last rounds built drains), at the rate really
  sent after a NAK, no higher than the rate it reports (the NAK then cuts it), or
  ramping on from it (from ``UNFILLED_GAIN`` times it where the rounds measured the
  sender itself: ``unfilled``) where nothing limited the sender, or only the receivers' room
  while their queues kept up (``room_held``: a long path over short queues, none of
  them filling), or a full pipe showed no queue (``nothing_queued``: no delay rise
  standing, no queue filling, no backlog: the CPU the sender and its receivers get),
  or, after a delay rise or a full pipe, the last rounds confirmed fewer
  than ``start_rounds.FULL_MIN_MSGS`` (``measured``: no rate, a guess), or on a path
  that stays on this host (``local``) showed no queue filling and no backlog (from
  ``UNFILLED_GAIN`` times it: the receivers' processes fell behind on the CPU they
  share with the sender; no link queued).

Receivers say nothing after the start: a healthy receiver's feedback is its first round
trips' PROGRESS and nothing more. Sans-I/O: every call takes ``now``.
"""

from __future__ import annotations

import math
from typing import Any

from .delay_rise import CSS_DIVISOR, DELAY_SAMPLES, ROUND_MIN_S, DelayRise
from .first_window import FirstWindow
from .progress import report_interval_us
from .start_reports import StartReports
from .start_rounds import FULL_MIN_MSGS, StartRounds

__all__ = ["DRAIN", "MAX_S", "RESTART_WINDOW_MSGS", "SILENT_S", "STALL_S", "UNFILLED_GAIN",
           "SlowStart", "StartPacer"]

#: No confirmation for this long ends the start, s (a dead receiver, or no answer).
STALL_S = 0.1
STALL_RTTS = 3.0
#: ... nor for fewer than this many of the longest interval a receiver may take between
#: two reports (twice ``report_us``, ``ProgressReporter.spread``) where many receivers
#: report less often than REPORT_S.
STALL_REPORTS = 3.0
#: ... and before any receiver answered at all, this long (at least), s: the first answer
#: takes a round trip the sender may not have measured yet.
SILENT_S = 0.25
#: The start ends after this long whatever happens, s.
MAX_S = 2.0
#: After a delay rise or a full pipe, the limit starts at this share of the delivery rate.
DRAIN = 0.9
#: Where the sender, not the path, limited the start (``unfilled``: its rounds did not
#: fill the window, no queue filling, no backlog), the limit ramps on from this multiple
#: of the delivery rate, which measured the sender (TFMCC's slow start sends at twice the
#: rate the slowest receiver got, RFC 4654 4.3): a sender still warming up measured
#: 47,646 msgs/s on loopback, and its limit held it below what it sent later (100,000-
#: 120,000) for 0.3 s of a 2.9 s run.
UNFILLED_GAIN = 2.0
#: The window is at most this many seconds of max_rate_msgs.
MAX_WINDOW_S = 1.0
#: On a path whose RTT is at least PACE_MIN_RTT_S, the window goes out paced at
#: PACE_GAIN x window / RTT (bursts of PACE_BURST_S of that), not all at once: a window
#: of a long path is more than a receiver's queue holds (TCP paces its slow start so).
PACE_MIN_RTT_S = 0.005
PACE_GAIN = 2.0
PACE_BURST_S = 0.005
#: A start again mid-stream (another sender of the stream ended) begins with this window,
#: msgs: the receivers' queues may hold a backlog already, and until a PROGRESS says how
#: much room they have, a first window of ``start_window_msgs`` went into a queue above
#: its mark (``nakflow eval``'s last task: 16 at once into a queue of 17 of 39; it then
#: waited 0.1 s for room, ended on that stall and climbed from its old half share).
RESTART_WINDOW_MSGS = 2


class StartPacer:
    """The start's pacing on a long path (``PACE_MIN_RTT_S`` or more): a token bucket
    filled at the rate ``allow`` is given (``PACE_GAIN`` x window / RTT), holding
    ``PACE_BURST_S`` of it (16 messages at least); ``tokens`` is what may go now."""

    def __init__(self, tokens: float) -> None:
        self.tokens = float(tokens)
        self._t = 0.0  # when it was last filled
        self._rate = 0.0  # msgs/s, the last rate given

    def allow(self, k: int, rate: float, now: float) -> int:
        """Fill at ``rate`` up to ``now``; ``k`` or as many whole tokens as there are."""
        self._rate = rate
        self.tokens = min(self.tokens + rate * max(0.0, now - self._t),
                          max(16.0, rate * PACE_BURST_S))
        self._t = now
        return min(k, int(self.tokens))

    def wait(self) -> float:
        """How long until a whole token is there, s (inf: one is, or no rate given)."""
        if self._rate <= 0 or self.tokens >= 1:
            return math.inf
        return (1.0 - self.tokens) / self._rate


class SlowStart:
    """The sender's side: ``allowance`` says how many more may go now; ``on_sent`` /
    ``unsend`` count what went; ``on_progress`` takes a receiver's PROGRESS; ``check``
    ends it on time. ``done`` once over, ``why`` says why, ``outcome`` what the rate limit
    starts at. What the receivers said is in ``reports`` (``StartReports``), what each
    round confirmed in ``rounds`` (``StartRounds``), the delay exit in ``rise``."""

    def __init__(self, window_msgs: int, *, max_rate_msgs: float,
                 ramp: tuple[float, float, float] | None = None, base: int = 0,
                 window_bytes: int | None = None, local: bool = False) -> None:
        self.cwnd = float(window_msgs)
        #: the path stays on this host (``SenderConfig.host_local``): see ``outcome``
        self.local = local
        #: sizes the first window in bytes before the first message (``FirstWindow``)
        self.first = FirstWindow(window_bytes, local=local)
        self.first_window = window_msgs  # what it began with
        #: the seq the start begins at (0; a start again mid-stream: what was admitted)
        self.base = base
        #: (rate, factor, step s): the ramp this start replaces; the window is never less
        #: than an RTT of it (a long path's round trips must not make the start slower)
        self.ramp = ramp
        self.max_window = max(float(window_msgs), max_rate_msgs * MAX_WINDOW_S)
        self.sent = base  # admitted so far (data and repairs for everyone)
        self.pacer = StartPacer(window_msgs)
        self.reports = StartReports()
        self.acked = base  # the least reported position (base before any report)
        self.rounds = StartRounds(base)
        self.done = False
        self.why: str | None = None
        self.t0: float | None = None  # first admission
        self.ended_at: float | None = None
        self.ended_sent: int | None = None  # what was sent (admitted) by its end
        self.rtt_s: float | None = None
        self._last_move: float | None = None  # when ``acked`` last moved (or t0)
        self.acked_at: float | None = None  # when ``acked`` last moved (None: never)
        self.rise = DelayRise()
        #: when a delay rise was first seen (the start's first signal of a queue on the
        #: path: its growth slows from then, CSS), what had been sent by then, and what
        #: the slowest receiver had confirmed (the rest was in flight: on the path, or in
        #: its queue)
        self.rise_at: float | None = None
        self.rise_sent: int | None = None
        self.rise_acked: int | None = None
        #: in CSS: (rounds, now, acked) when it began (the rounds since measure the path
        #: with a queue on it: its bottleneck's rate)
        self._css_from: tuple[int, float, int] | None = None

    def _begin(self, now: float) -> None:
        if self.t0 is None:
            self.t0 = self._last_move = now
            self.rounds.begin(now)
            w = self.first.size(int(self.max_window))
            if w is not None and w > self.cwnd:  # never less than the window given
                self.cwnd = self.pacer.tokens = float(w)
                self.first_window = w

    # -- the sender's questions -----------------------------------------------------------
    def allowance(self, now: float) -> int:
        """How many more may be admitted at ``now`` (within the window)."""
        self._begin(now)
        assert self.t0 is not None
        cwnd, floor = self.cwnd, 0.0
        if self.ramp is not None and self.rtt_s:
            rate, factor, step = self.ramp
            floor = min(rate * factor ** min((now - self.t0) / step, 200.0) * self.rtt_s,
                        self.max_window)
            if floor > cwnd:
                cwnd = self.cwnd = floor
        # the receivers' room bounds the window, but not below the ramp's round trip: the
        # ramp this start replaces did not wait for room either (its NAKs protect queues).
        # Not past a queue that fills: the floor went out each time a message arrived, at
        # the path's rate, not its consumer's (a queue of 39 dropped 142 of 198); nor past
        # one another sender filled first: the most room it ever reported is 0 or 1 (none
        # is below half of that), and once its consumer is measured it reports a backlog
        # (two fresh senders to that queue and two more after them: 183 and 247 dropped
        # in two traced runs)
        if floor and self.reports.short():
            floor = 0.0  # a backlog, no room, or room below half the most it reported
        credit = self.reports.credit
        k = int(max(min(self.acked + cwnd, credit), self.acked + floor)) - self.sent
        if k <= 0:
            self.rounds.held(roomed=credit < self.acked + cwnd)
            return 0
        rtt = self.rtt_s
        if rtt is not None and rtt >= PACE_MIN_RTT_S:
            k = self.pacer.allow(k, PACE_GAIN * cwnd / rtt, now)
        return k

    def frame_msgs(self) -> int:
        """The most messages a DATA frame holds in the start: a window goes out as
        DELAY_SAMPLES frames at least, so a receiver behind a slow link reports as often
        in a round (a frame is read whole: the lab's 8 Mbit/s link took 42 ms for a frame
        of 40 KB, and the receiver said nothing meanwhile)."""
        return max(1, int(self.cwnd) // DELAY_SAMPLES)

    def pace_wait(self) -> float:
        """After ``allowance`` said 0 for want of pacing (not of the window): how long until
        one more may go, s (inf: the window, not the pace, holds it back)."""
        return math.inf if self.rounds.limited else self.pacer.wait()

    def on_sent(self, n: int) -> None:
        self.sent += n
        self.pacer.tokens -= n

    def unsend(self, n: int) -> None:
        self.sent = max(self.acked, self.sent - n)
        self.pacer.tokens += n

    def deadline(self) -> float | None:
        """When ``check`` should next run (None: not started, or over)."""
        if self.done or self._last_move is None or self.t0 is None:
            return None
        return min(self._last_move + self.stall_s, self.t0 + MAX_S,
                   self.rise.deadline())

    @property
    def stall_s(self) -> float:
        """How long without a confirmation ends the start, s."""
        return max(STALL_S if self.reports.pos else SILENT_S, STALL_RTTS * (self.rtt_s or 0.0),
                   STALL_REPORTS * 2e-6 * self.report_us)

    @property
    def report_us(self) -> int:
        """How often its DATA asks each receiver for PROGRESS, µs (0: REPORT_S): at most
        ``progress.PROGRESS_RATE`` frames a second from all those that reported so far."""
        return report_interval_us(len(self.reports.pos))

    def check(self, now: float) -> bool:
        """End the start if it stalled or ran out of time; True if it ended now."""
        if self.done or self._last_move is None or self.t0 is None:
            return False
        if now >= self.t0 + MAX_S:
            return self.end("time", now)
        if now >= self.rise.deadline():
            return self.end("delay", now)
        if now >= self._last_move + self.stall_s:
            return self.end("stall" if self.reports.pos else "silent", now)
        return False

    # -- the receivers' word ---------------------------------------------------------------
    def on_progress(self, receiver: str, next_seq: int, room: int, delay: float,
                    now: float, rate: float = 0.0) -> bool:
        """A receiver's PROGRESS; True if it ended the start."""
        if self.done:
            return False
        self._begin(now)
        reports = self.reports
        credit = reports.credit
        said = reports.report(receiver, next_seq, room, rate, self.sent)
        if said is None:
            return False
        moved, covered = said
        suspect = moved and self.rise.suspect(receiver, delay)
        least = reports.least()
        assert least is not None
        if least > self.acked:
            grow: float = least - self.acked
            if self.rise.css_rounds is not None or suspect:
                grow /= CSS_DIVISOR
            self.cwnd = min(self.cwnd + grow, self.max_window)
            self.acked = least
            self._last_move = self.acked_at = now
        elif reports.credit > credit:
            self._last_move = now  # a queue made room: no stall
        if moved:
            ended = self.rise.sample(receiver, delay, now, covered)
            if self.rise.css_rounds is None:
                self._css_from = None  # spurious: it fell back
            elif self._css_from is None:
                self._css_from = (self.rounds.count, now, self.acked)
                if self.rise_at is None:
                    self.rise_at, self.rise_sent, self.rise_acked = now, self.sent, self.acked
            if ended:
                return self.end("delay", now)
        if self.rounds.due(self.acked, now, max(ROUND_MIN_S, self.rtt_s or 0.0)):
            return self._round_over(now)
        return False

    def room_holds(self, receiver: str) -> bool:
        """``receiver``'s room, not the window, holds the sender back, and no more than a
        frame went past it (not the ramp's floor: a long path's round trip in flight past
        short queues): a NAK of its first levels (its queue past 50 %, two senders'
        windows in it) that has no rate to say (its consumer not measured yet) asks for
        nothing its room does not do already, and the start goes on. Ended there, two
        fresh senders to a queue of 39 whose consumer took 156 msgs/s went on at the
        866-1,871 msgs/s their first 16-19 messages arrived at, and it dropped 55-137 of
        their 400 (all repaired)."""
        room = self.reports.room.get(receiver)
        return (room is not None and room < self.acked + self.cwnd
                and self.sent <= room + self.frame_msgs())  # what its room let through

    def on_nak(self, receiver: str, rate: float, now: float) -> bool:
        """A NAK ends the start; the rate it reports (what ``receiver`` takes from each
        sender, msgs/s; 0: not measured) bounds what the limit starts at, as a backlog's
        PROGRESS does. A sender whose start another's traffic ended before it had sent a
        message measured nothing, and went on at ``start_rate_msgs``: 5,000 msgs/s into a
        queue of 39 whose consumer took 78 from each sender, 172 dropped in 0.1 s."""
        if rate > 0 and not self.done:
            self.reports.said_rate(receiver, rate)
        return self.end("nak", now)

    def on_gone(self, receiver: str) -> None:
        """``receiver`` left (BYE): the window no longer waits for it."""
        self.reports.gone(receiver)
        self.rise.forget(receiver)
        least = self.reports.least()
        if least is not None:
            self.acked = max(self.acked, least)

    def set_rtt(self, rtt_s: float) -> None:
        """An RTT measured (HELLO answers): the least is kept, the path's own; a later one
        waited in the queue the start may be building."""
        if rtt_s >= 0 and (self.rtt_s is None or rtt_s < self.rtt_s):
            self.rtt_s = self.rise.rtt_s = rtt_s

    def _round_over(self, now: float) -> bool:
        self.rounds.close(now, acked=self.acked, sent=self.sent, credit=self.reports.credit)
        if self.rise.on_round():
            return self.end("delay", now)
        if self.rounds.pipe_full:
            return self.end("full", now)
        if self.rounds.unfilled:
            return self.end("unfilled", now)
        return False

    def end(self, why: str, now: float) -> bool:
        """End the start (``why``); True."""
        if self.done:
            return False
        self.done, self.why, self.ended_at = True, why, now
        self.ended_sent = self.sent
        return True

    def confirmed_rate(self) -> float:
        """On a path that stays on this host, what the slowest receiver confirmed over the
        whole start so far, msgs/s: the rate of a stream that ended before its rounds could
        measure one (0: another path, where a first burst may be a token bucket's; fewer
        than ``start_rounds.FULL_MIN_MSGS`` confirmed; no time). 20,000 messages of 50 B
        from an asyncio sender to a receiver in its process went in 22 ms, inside the
        start's first rounds, and handed the next sender of the path nothing."""
        t0, at, n = self.t0, self.acked_at, self.acked - self.base
        if not self.local or t0 is None or at is None or at <= t0 or n < FULL_MIN_MSGS:
            return 0.0
        return n / (at - t0)

    @property
    def delivery_rate(self) -> float:
        """The delivery rate the start ends with, msgs/s (0: not measured): after a full
        pipe the mean of the last FULL_ROUNDS rounds (the plateau), else the highest of
        them (it was still growing), else what was confirmed over the whole start. After
        a delay rise, only the rounds begun since it, or else what was confirmed since it:
        with a queue on the path they measure its bottleneck, where a round before may
        have carried a token bucket's burst (the lab's link passes 32 KB at once: 2,073
        msgs/s measured over an 8 Mbit/s link, and the limit started at 2,000). While
        a queue is ``filling``, no more than the slowest queue took in those rounds (what
        arrived in a queue with room is no rate its consumer keeps up with); nor than its
        consumer with a backlog takes."""
        rounds, take = self.rounds, self.reports.take
        css = self._css_from if self.why == "delay" else None
        bws = rounds.recent(None if css is None else css[0])  # after a rise: since it
        bw = 0.0
        if bws:  # flat after a full pipe: their mean; else still growing: the last
            bw = sum(bws) / len(bws) if self.why == "full" else max(bws)
            took = rounds.recent_took()
            if took and self.filling:
                bw = min(bw, max(took))
        elif (css is not None and self.ended_at is not None and self.ended_at > css[1]
              and self.acked > css[2]):
            bw = (self.acked - css[2]) / (self.ended_at - css[1])
        elif self.t0 is not None and self.ended_at is not None and self.ended_at > self.t0:
            # nothing confirmed since the rise (a queue another sender holds at its mark:
            # no room, so nothing sent): what the whole start confirmed, not 0, whose
            # limit went on at start_rate_msgs (5,000 msgs/s into a queue of 39: 68 dropped)
            bw = (self.acked - self.base) / (self.ended_at - self.t0)
        if take:
            bw = min(bw, min(take.values())) if bw else min(take.values())
        return bw

    @property
    def filling(self) -> bool:
        """A receiver's queue is a quarter full (of the room it reported at most): what
        its room's edge moved is its consumer's rate, not a frame read and not yet taken
        (the lab's 8 Mbit/s link brings 44 at once; a start that ended a round later
        took 132 msgs/s for that consumer's rate, and the run went at 722)."""
        return self.reports.filling

    @property
    def room_held(self) -> bool:
        """The last FULL_ROUNDS rounds, the receivers' room held the window back, not the
        path, and the slowest queue took what arrived (KEPT_UP of it) without ``filling``:
        a long path's round trip over a short queue, not a full pipe or a slow consumer.
        A slow consumer's queue held at its mark takes what arrives too, the window being
        its room (a consumer of 5,000 msgs/s, its queue 10-15 short of its mark of 800:
        the limit ramped on from 4,951 and three NAKs cut it back)."""
        return self.rounds.kept_up() and not self.filling

    @property
    def nothing_queued(self) -> bool:
        """At a full pipe, nothing shows a queue: no delay rise stands (a receiver's own
        lateness left out of its delay, what stands is the path's queue), no receiver's
        queue is ``filling`` and none reports a backlog. What stopped growing is then what
        the sender and its receivers get of the machine's CPU (five processes on two
        cores), and the limit ramps on from it: settled at ``DRAIN`` below it, W8's starts
        that ended so ran at 0.78-0.98 of ACK's pairs, the probe taking 0.2-0.5 s to reach
        what the receivers took. A slow link's queue shows as a delay rise, a slow
        consumer's as a filling queue."""
        return self.rise.css_rounds is None and not self.filling and not self.reports.take

    def outcome(self, start_rate: float) -> tuple[float, float, bool]:
        """(the rate the limit starts at, the plateau it heads for, whether it ramps on
        from there), once ``done``: the delivery rate, ``DRAIN`` below it after a delay
        rise, a full pipe or a stall (the last rounds' queue drains; after a NAK the rate
        itself: the NAK cuts it next); ``UNFILLED_GAIN`` times it, ramping on, where the
        sender did not fill its window and no queue filled (the start measured the sender,
        not the path), and on a path on this host (``local``) after a delay rise or a full
        pipe with no queue filling and no backlog (no link queued: the receivers'
        processes shared the CPU with the sender); where no receiver answered, the ramp
        from ``start_rate`` as without a start."""
        bw = self.delivery_rate
        if self.why == "silent" or bw <= 0:
            return start_rate, start_rate, True
        if self.why == "nak":  # the NAK cuts it next
            return bw, bw, False
        if self.why in ("delay", "full") and not self.rounds.measured:  # a message or two
            return bw, bw, True  # a round is no rate: ramp on from it, as before the start
        if self.why == "full" and (self.room_held or self.nothing_queued):  # no pipe was
            return bw, bw, True  # full, or none that queues: ramp on as before the start
        # the rounds measured no capacity where no queue filled and no consumer has a
        # backlog, and either the sender limited them, or the path stays on this host (no
        # link queued: the receivers' processes fell behind on the CPU they share with
        # the sender): ramp on from twice their rate, its NAKs guard from there
        sender_limited = self.why == "unfilled"
        cpu_limited = self.local and self.why in ("delay", "full")
        if (sender_limited or cpu_limited) and not self.reports.take and not self.filling:
            return bw * UNFILLED_GAIN, bw * UNFILLED_GAIN, True
        if self.why in ("delay", "full", "stall"):
            return bw * DRAIN, bw, False
        return bw, bw, True  # time, or unfilled at a consumer's rate (a backlog, a filling queue)

    def snapshot(self, t0: float) -> dict[str, Any]:
        return {"ended": self.why, "rounds": self.rounds.count, "window": int(self.cwnd),
                "first_window": self.first_window, "host_local": self.local,
                "delivery_rate": round(self.delivery_rate, 1),
                "filling": self.filling,
                "take": round(min(self.reports.take.values()), 1) if self.reports.take else None,
                "receivers": len(self.reports.pos), "sent": self.ended_sent,
                "spurious_delay_rises": self.rise.spurious,
                "max_delay_rise_ms": round(self.rise.max_rise * 1000, 3),
                "ended_s": None if self.ended_at is None else round(self.ended_at - t0, 6),
                "rise_s": None if self.rise_at is None else round(self.rise_at - t0, 6),
                "sent_at_rise": self.rise_sent,
                "in_flight_at_rise": (None if self.rise_sent is None or self.rise_acked is None
                                      else self.rise_sent - self.rise_acked)}
