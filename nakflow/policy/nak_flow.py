"""``nak``'s sender side (``NakFlow``): the adaptive rate limit (``NakRateController``),
paced by a token bucket, with the start (``SlowStart``) in front of it, and what the
receivers' NAKs, PROGRESS and RECEIPTs tell them.
"""

from __future__ import annotations

import math
from typing import Any

from ..config import NakConfig
from ..wire.codec import SIGNAL_CODES, SIGNALS, Frame, Hello, Nak, Progress
from .attribution import CutLog
from .bucket import TokenBucket
from .rate import NakRateController
from .sender_flows import SenderFlow
from .start_rounds import FULL_ROUNDS
from .startup import RESTART_WINDOW_MSGS, STALL_S, SlowStart

__all__ = ["MAX_ENDED_PEERS", "PATH_SIGNALS", "NakFlow"]

PAUSED = SIGNAL_CODES["paused"]
QUEUE_SIGNAL = SIGNAL_CODES["queue"]
#: NAK signals about the path rather than the receiver's queue.
PATH_SIGNALS = frozenset({"delay", "loss", "silence"})
#: Other senders' ends a NAK sender remembers, at most (one RECEIPT from each receiver).
MAX_ENDED_PEERS = 64


class NakFlow(SenderFlow):
    """``nak``: the adaptive rate limit, paced by a token bucket."""

    mode = "nak"

    def __init__(self, stream: str, config: NakConfig | None = None) -> None:
        self.stream = stream
        self.controller = NakRateController(config)
        cfg = self.controller.config
        self.bucket = TokenBucket(cfg.start_rate_msgs, burst_s=cfg.burst_s,
                                  gather_s=cfg.gather_s)
        #: the ceiling (``max_rate_msgs``, a sender's ``max_rate``) while the start's
        #: window, not the limit, admits: a window of max_rate_msgs x MAX_WINDOW_S went
        #: out at once on loopback (176,624 msgs/s under --max-rate 20000)
        self.cap = TokenBucket(cfg.max_rate_msgs, burst_s=cfg.burst_s)
        self._capped = False
        self.attribution = CutLog()
        self._top = max(cfg.levels)  # a NAK of the top level: a queue full, dropping
        self.start: SlowStart | None = None  # the start, while it lasts (use_startup)
        #: what the last start measured (``validated_rate``), kept when it ends
        self._start_measured: float | None = None
        self.start_report: dict[str, Any] | None = None
        #: starts again after another sender of the stream ended (``on_peer_ended``), the
        #: last one's report, the rate to go on at if it learnt nothing, and the peers
        #: already seen to end (each one's RECEIPTs come from every receiver)
        self.restarts = 0
        self.restart_report: dict[str, Any] | None = None
        self._restart_from: float | None = None
        self._ended_peers: dict[tuple[str, int], None] = {}

    @property
    def starting(self) -> bool:
        return self.start is not None

    @property
    def report_us(self) -> int:
        st = self.start
        return 0 if st is None else st.report_us

    def use_startup(self) -> None:
        cfg = self.controller.config
        window = cfg.start_window_msgs
        if window is not None and cfg.start_rate_msgs < cfg.max_rate_msgs:
            # the first window, sent before any receiver said what it takes, is no more
            # than the ramp's first rate sends in STALL_S (5 msgs/s: 1 message); sized in
            # bytes from the receivers' room only where that does not bound it
            bound = max(1, min(window, math.ceil(cfg.start_rate_msgs * STALL_S)))
            self.start = SlowStart(bound, max_rate_msgs=cfg.max_rate_msgs,
                                   ramp=(cfg.start_rate_msgs, cfg.ramp_factor, cfg.step_s),
                                   window_bytes=cfg.start_window_bytes if bound == window
                                   else None, local=self.host_local)

    def size_hint(self, msg_bytes: int) -> None:
        if self.start is not None:  # (a start again mid-stream sizes no first window)
            self.start.first.size_hint(msg_bytes)

    def frame_msgs(self, most: int) -> int:
        st = self.start
        return most if st is None else min(most, st.frame_msgs())

    def _end_start(self, now: float) -> None:
        """The start is over: the rate limit takes over from what it reached."""
        st = self.start
        assert st is not None
        self.start = None
        self._start_measured = self._measured(st)
        ctl = self.controller
        again, self._restart_from = self._restart_from, None
        rate, plateau, ramp = st.outcome(ctl.config.start_rate_msgs if again is None
                                         else again)
        if st.why == "nak":  # the NAK cuts next, from the rate really sent (as it would
            sent = ctl.send_rate(now=now)  # cut a ramp): the delivery rate lags a round
            if sent is not None and sent > rate:  # (a long path's: 29,657 msgs/s sent at
                # 104,100, consumers taking 50,000). Not above what a backlogged consumer
                # said it takes
                rate = plateau = min(sent, min(st.reports.take.values(), default=sent))
        if again is not None:  # not below where it was: the start looked for more
            rate, plateau = max(rate, again), max(plateau, again)
        ctl.begin(rate, plateau, now=now, ramp=ramp)
        if st.reports.most_room:  # the smallest queue bounds how fast the limit probes later
            ctl.set_probe_room(min(st.reports.most_room.values()))
        self.bucket.set_rate(ctl.rate(now=now), now=now)
        report = st.snapshot(self.t0)
        report["limit_from"], report["ramps_on"] = round(rate, 1), ramp  # what came of it
        if again is None:
            self.start_report = report
        else:
            self.restart_report = report

    def on_peer_ended(self, peer: tuple[str, int], seq: int, *, now: float) -> None:
        """Capacity another sender held may be free: a sender whose limit NAKs cut starts
        again from its rate (its window never less than an RTT of it; its first window
        ``RESTART_WINDOW_MSGS``: the queues may hold a backlog), as it started,
        so it finds that capacity in a few round trips where CUBIC's plateau took a
        second (``nakflow eval``: the last task alone at its half share for 0.4 s)."""
        ended = self._ended_peers
        if peer in ended:
            return
        ended[peer] = None
        if len(ended) > MAX_ENDED_PEERS:
            del ended[next(iter(ended))]
        ctl = self.controller
        cfg = ctl.config
        if self.start is not None or not ctl.cuts or cfg.start_window_msgs is None:
            return
        rate = ctl.rate(now=now)
        if rate >= cfg.max_rate_msgs:
            return
        self.restarts += 1
        self._restart_from = rate
        self.start = SlowStart(min(cfg.start_window_msgs, RESTART_WINDOW_MSGS),
                               max_rate_msgs=cfg.max_rate_msgs,
                               ramp=(rate, cfg.ramp_factor, cfg.step_s), base=seq,
                               local=self.host_local)
        if ctl.rtt_s is not None:
            self.start.set_rtt(ctl.rtt_s)

    def _admit_start(self, n: int, now: float) -> int:
        st = self.start
        assert st is not None
        if st.check(now):
            self._end_start(now)
            return -1
        k = min(n, st.allowance(now))
        self._capped = False
        if k:
            got = self.cap.take_up_to(k, now=now)
            self._capped, k = got < k, got
        st.on_sent(k)
        self.controller.on_sent(k, now=now)
        return k

    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        if self.start is not None:
            k = self._admit_start(n, now)
            if k >= 0:
                if k == n:
                    return k, 0.0
                if self._capped:
                    return k, self.cap.wait(n - k, now=now)
                return k, self.start.pace_wait() if not k else math.inf
        rate = self.controller.rate(now=now)
        bucket = self.bucket
        if rate != bucket.rate:
            bucket.set_rate(rate, now=now)
        wait = bucket.request(n, now=now)
        if wait:
            return 0, wait
        self.controller.on_sent(n, now=now)
        return n, 0.0

    def admit_up_to(self, n: int, *, now: float) -> int:
        if self.start is not None:
            k = self._admit_start(n, now)
            if k >= 0:
                return k
        rate = self.controller.rate(now=now)
        bucket = self.bucket
        if rate != bucket.rate:
            bucket.set_rate(rate, now=now)
        k = bucket.take_up_to(n, now=now)
        self.controller.on_sent(k, now=now)
        return k

    def refund(self, n: int) -> None:
        if self.start is not None:
            self.start.unsend(n)
            self.cap.refund(n)
        else:
            self.bucket.refund(n)
        self.controller.unsend(n)

    def on_progress(self, frame: Progress, *, now: float) -> None:
        st = self.start
        if st is not None and st.on_progress(frame.receiver, frame.next_seq, frame.room,
                                             frame.delay, now, frame.rate):
            self._end_start(now)

    def on_receiver_bye(self, receiver: str) -> None:
        if self.start is not None:
            self.start.on_gone(receiver)

    def on_timer(self, *, now: float) -> list[tuple[str, str]]:
        if self.start is not None and self.start.check(now):
            self._end_start(now)
        return []

    def on_feedback(self, frame: Frame, *, now: float) -> None:
        if type(frame) is Hello:  # a receiver's answer says its room: the first window
            if self.start is not None and frame.echo and frame.stream == self.stream:
                self.start.first.on_hello(frame.room)
            return
        if type(frame) is Nak and frame.stream == self.stream:
            if self.start is not None and frame.signal != PAUSED:
                if (frame.signal == QUEUE_SIGNAL and frame.level < self._top
                        and frame.rate <= 0 and self.start.room_holds(frame.receiver)):
                    self.controller.count_nak(frame.level)  # no rate to go on at: the
                    self.attribution.hold(SIGNALS[QUEUE_SIGNAL], frame.receiver)  # room
                    return  # that holds the start does the NAK's work
                self.start.on_nak(frame.receiver, frame.rate, now)  # the limit takes
                # over (no higher than the rate the NAK reports), and this NAK cuts it
                self._end_start(now)
            ctl = self.controller
            if frame.signal == PAUSED:  # its consumer takes nothing: a cut cannot help it
                ctl.count_nak(frame.level)
                point = self.attribution.undo_point(frame.receiver, now)
                if point is not None:
                    ctl.restore(point, now=now)
                return
            cuts, holds, before = ctl.cuts, ctl.holds, ctl.rate(now=now)
            signal = SIGNALS.get(frame.signal, "unknown")
            ctl.on_nak(frame.level, now=now, fill=frame.fill, rate=frame.rate,
                       source=frame.receiver, path=signal in PATH_SIGNALS,
                       taken=frame.signal == QUEUE_SIGNAL)
            if ctl.cuts > cuts:
                self.attribution.cut(now, signal, frame.receiver, frame.level,
                                     ctl.rate(now=now), before)
            elif ctl.holds > holds:
                self.attribution.hold(signal, frame.receiver)

    def set_rtt(self, rtt_s: float) -> None:
        self.controller.set_rtt(rtt_s)
        if self.start is not None:
            self.start.set_rtt(rtt_s)

    def validated_rate(self, *, now: float) -> float | None:
        """What the next sender on this path may start at (``Sender(remember_rate=True)``).
        A stream that ended inside its start was paced by the start's window, not by the
        limit, which still stood at ``initial_rate_msgs`` (or, in a start again, where it
        was before): that limit is no rate of the path. The start's measured delivery
        rate is (no more than was really sent at), or, if it measured none, nothing. A
        Spark task of 196 Arrow messages that fit in its start left the next task in its
        worker 39 msgs/s (5,000 rows/s, slow start's first rate), and that task, with no
        start of its own, took 0.76 s to ramp where its peers took 0.16 s."""
        st = self.start
        if st is None:  # a stream that ended within a meter period of its start's end
            rate = self.controller.validated_rate(now=now)  # has sent over no period
            return self._start_measured if rate is None else rate
        bw = self._measured(st)
        before = (None if self._restart_from is None
                  else self.controller.validated_rate(now=now))  # a start again
        if before is not None and (bw is None or before > bw):
            return before
        return bw

    def _measured(self, st: SlowStart) -> float | None:
        """What start ``st`` measured (its delivery rate, no more than was really sent
        at), None if a message or two. Handed on too where the start is over but the
        meter has no period yet: a stream of 20,000 messages on loopback whose start
        ended and whose last message went within 50 ms of its first handed on nothing
        (CI, under load), and its path's next sender began at slow start's first rate.
        A stream over before FULL_ROUNDS of its rounds closed measured no round: what its
        receivers confirmed over it, on one host (``SlowStart.confirmed_rate``)."""
        rounds = st.rounds
        bw = (st.delivery_rate if rounds.measured
              else st.confirmed_rate() if rounds.count < FULL_ROUNDS else 0.0)
        peak = self.controller.sent_peak
        if bw > 0 and peak is not None:
            bw = min(bw, peak)
        return bw if bw > 0 else None

    def next_deadline(self) -> float | None:
        if self.start is not None:
            return self.start.deadline()
        return self.controller.next_deadline()

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        st = self.start
        if st is not None:  # the window, as what may go
            return None, max(0, int(st.acked + st.cwnd) - st.sent)
        return self.controller.rate(now=now), None

    def why_held(self, *, now: float) -> str:
        st = self.start
        if st is not None:
            return (f"the start's window of {int(st.cwnd):,} messages is in flight until the "
                    "receivers report their progress")
        return f"rate limit {self.controller.rate(now=now):,.1f} msgs/s"

    def snapshot(self) -> dict[str, Any]:
        """The controller's and the attribution's figures, and the start's report. While a
        start runs (``starting``; or a start again, after another sender ended), its window
        paces the sender, not the rate limit: ``rate_limit`` is None then (a stream of
        20,000 that ended in its start reported the 5,000 msgs/s the limit would have
        begun at, beside the 520,000 it was sent at)."""
        st = self.start
        limit = {} if st is None else {"rate_limit": None}
        return {"mode": self.mode, **self.controller.snapshot(), **limit,
                "starting": st is not None,  # a start, or a start again, runs now
                **self.attribution.snapshot(t0=self.t0),
                "start": (st.snapshot(self.t0) if st is not None and not self.restarts
                          else self.start_report),
                "restarts": self.restarts, "restart": self.restart_report}

from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
