"""Flow-control policies, chosen by one string: ``nak``, ``ack`` or ``none``.

A sender-side policy (``SenderFlow``) answers "how many of these n messages may go now,
and if not all, how long until asking again"; a receiver-side policy (``ReceiverFlow``)
turns what the receiver sees into the feedback frames it should send. Each mode
registers its pair under its name (``SENDER_POLICIES``, ``RECEIVER_POLICIES``,
``register``), as aioquic registers congestion controllers; the protocol cores build
them with ``make_sender_flow`` / ``make_receiver_flow`` and talk to them only through
the base classes. A documented module: simulators drive the policies directly.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any, ClassVar, TypeGuard

from ..config import AckConfig, NakConfig, check_mode
from ..wire import SenderKey
from ..wire.codec import SIGNAL_CODES, SIGNALS, Credit, Frame, Hello, Nak, Progress
from .attribution import CutLog
from .bucket import TokenBucket
from .credit import WAITING_FRESH_S, CreditGranter, CreditLedger
from .fill import (
    BACKOFF_LAMBDA,
    MAX_BACKOFF_WINDOWS,
    DelayMonitor,
    FillMonitor,
    LossMonitor,
    Uniform,
    backoff_delay,
)
from .mode_tables import RECEIVER_POLICIES, SENDER_POLICIES
from .rate import NakRateController, recovery_bound_s
from .signals import NEWS, NOT_NEWS, PAUSE
from .startup import RESTART_WINDOW_MSGS, STALL_S, SlowStart

PAUSED = SIGNAL_CODES["paused"]
QUEUE_SIGNAL = SIGNAL_CODES["queue"]
#: NAK signals about the path rather than the receiver's queue.
PATH_SIGNALS = frozenset({"delay", "loss", "silence"})
#: Other senders' ends a NAK sender remembers, at most (one RECEIPT from each receiver).
MAX_ENDED_PEERS = 64

#: Asked at ``now``: is a NAK news (NEWS), is the receiver catching up (NOT_NEWS), or has
#: its consumer paused (PAUSE)?
Judge = Callable[[float], int]

#: The building blocks, for simulators that drive them directly.
__all__ = ["BACKOFF_LAMBDA", "MAX_BACKOFF_WINDOWS", "RECEIVER_POLICIES", "SENDER_POLICIES",
           "WAITING_FRESH_S", "AckFeedback", "AckFlow", "CreditGranter", "CreditLedger",
           "DelayMonitor", "FillMonitor", "LossMonitor", "NakFeedback", "NakFlow",
           "NakRateController", "NoFeedback", "NoFlow", "ReceiverFlow", "SenderFlow",
           "SenderKey", "TokenBucket", "backoff_delay", "is_other_modes_feedback",
           "make_receiver_flow", "make_sender_flow", "recovery_bound_s", "register"]


class SenderFlow(ABC):
    """Sender-side policy."""

    mode: ClassVar[str]
    #: The clock reading that snapshot times count from (the core sets its start).
    t0: float = 0.0

    @abstractmethod
    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        """Ask to send ``n`` messages at ``now``.

        Returns (granted, wait): ``granted`` of them may go now and are counted
        as sent; if ``granted < n``, ask again in ``wait`` seconds (``inf``: not
        before feedback arrives or ``next_deadline()``).
        """

    @abstractmethod
    def admit_up_to(self, n: int, *, now: float) -> int:
        """Take permission for as many of ``n`` messages as may go at ``now`` (counted as
        sent); for drivers that send what they may each tick (the simulator)."""

    def refund(self, n: int) -> None:  # noqa: B027 (nothing to give back by default)
        """``n`` messages admitted (by ``admit_up_to``) were not sent after all."""

    def on_feedback(self, frame: Frame, *, now: float) -> None:  # noqa: B027 (optional hook)
        """A feedback frame for this sender's stream arrived at ``now``."""

    def next_deadline(self) -> float | None:
        """When the policy's state next changes by itself (None: only on feedback)."""
        return None

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        """(rate limit msgs/s, credit left msgs) at ``now``; None where not applicable."""
        return None, None

    def set_rtt(self, rtt_s: float) -> None:  # noqa: B027 (optional hook)
        """The group's round-trip time, measured from receivers' HELLO answers, s."""

    def on_receiver_bye(self, receiver: str) -> None:  # noqa: B027 (optional hook)
        """``receiver`` left on purpose (BYE)."""

    def on_timer(self, *, now: float) -> list[tuple[str, str]]:
        """Time passed: receivers the policy gave up on at ``now``, with why
        (``evicted``: silent; ``disconnected``: silent after a closed connection)."""
        return []

    def on_connection_lost(self, *, now: float) -> None:  # noqa: B027 (optional hook)
        """The transport says a receiver's connection closed (which one it does not say)."""

    def ready(self, answered: Collection[str]) -> int:
        """How many of the receivers that ``answered`` HELLO may be sent to now (``ack``:
        only those that also granted credit)."""
        return len(answered)

    def validated_rate(self, *, now: float) -> float | None:
        """A rate this sender has shown the path takes, for the next sender on it (None:
        nothing to hand on)."""
        return None

    @property
    def starting(self) -> bool:
        """In its start: DATA asks receivers for PROGRESS (``policy.startup``)."""
        return False

    @property
    def report_us(self) -> int:
        """While ``starting``: how often DATA asks each receiver for PROGRESS, µs (0: the
        receivers' default, ``progress.REPORT_S``)."""
        return 0

    def use_startup(self) -> None:  # noqa: B027 (optional hook)
        """Begin with the start (``policy.startup``), if the mode has one: only a driver
        whose receivers answer PROGRESS asks for it (the protocol cores do)."""

    def size_hint(self, msg_bytes: int) -> None:  # noqa: B027 (optional hook)
        """The size of the first message offered, bytes, before it is admitted (a start's
        first window may be counted in bytes)."""

    def frame_msgs(self, most: int) -> int:
        """How many messages a DATA frame may hold now, of the configured ``most``."""
        return most

    def on_peer_ended(self, peer: tuple[str, int], seq: int, *, now: float) -> None:  # noqa: B027
        """Another sender of this stream ended (``peer``: its id and epoch; a receiver's
        RECEIPT for it was heard); ``seq``: what this one admitted so far."""

    def on_progress(self, frame: Progress, *, now: float) -> None:  # noqa: B027
        """A receiver's PROGRESS for this sender, during the start."""

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready."""


class NoFlow(SenderFlow):
    """``none``: no flow control (at most a fixed rate cap); receivers' queues overflow
    and their drops are counted."""

    mode = "none"

    def __init__(self, max_rate_msgs: float | None = None, burst_s: float = 0.005) -> None:
        self.bucket = None if max_rate_msgs is None else TokenBucket(max_rate_msgs,
                                                                     burst_s=burst_s)

    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        if self.bucket is not None:
            wait = self.bucket.request(n, now=now)
            if wait:
                return 0, wait
        return n, 0.0

    def admit_up_to(self, n: int, *, now: float) -> int:
        return n if self.bucket is None else self.bucket.take_up_to(n, now=now)

    def refund(self, n: int) -> None:
        if self.bucket is not None:
            self.bucket.refund(n)

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        return (None if self.bucket is None else self.bucket.rate), None

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, "rate_limit": None if self.bucket is None else self.bucket.rate}


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
                                   else None)

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
                               ramp=(rate, cfg.ramp_factor, cfg.step_s), base=seq)
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
        (CI, under load), and its path's next sender began at slow start's first rate."""
        bw = st.delivery_rate if st.rounds.measured else 0.0
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

    def snapshot(self) -> dict[str, Any]:
        st = self.start
        return {"mode": self.mode, **self.controller.snapshot(),
                **self.attribution.snapshot(t0=self.t0),
                "start": (st.snapshot(self.t0) if st is not None and not self.restarts
                          else self.start_report),
                "restarts": self.restarts, "restart": self.restart_report}


class AckFlow(SenderFlow):
    """``ack``: send only what the slowest live receiver granted."""

    mode = "ack"

    def __init__(self, stream: str, sender: str, epoch: int,
                 config: AckConfig | None = None, *, next_seq: int = 0,
                 max_rate_msgs: float | None = None) -> None:
        self.stream = stream
        self.key: SenderKey = (sender, epoch)
        self.ledger = CreditLedger(config, next_seq=next_seq)
        self.cap = NoFlow(max_rate_msgs)
        self.stalls = 0

    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        ledger = self.ledger
        k = min(n, ledger.sendable(now=now))
        if k and self.cap.bucket is not None:
            capped, wait = self.cap.admit(k, now=now)
            if not capped:
                return 0, wait
        if k:
            ledger.on_sent(k, now=now)
        if k < n:
            self.stalls += 1
            return k, math.inf
        return k, 0.0

    def admit_up_to(self, n: int, *, now: float) -> int:
        ledger = self.ledger
        k = min(n, ledger.sendable(now=now))
        if k and self.cap.bucket is not None:
            k = self.cap.bucket.take_up_to(k, now=now)
        if k:
            ledger.on_sent(k, now=now)
        elif n:
            self.stalls += 1
        return k

    def refund(self, n: int) -> None:
        self.ledger.unsend(n)
        self.cap.refund(n)

    def on_feedback(self, frame: Frame, *, now: float) -> None:
        if (type(frame) is Credit and frame.stream == self.stream
                and (frame.sender, frame.epoch) == self.key):
            self.ledger.on_credit(frame.receiver, frame.limit, now=now)
        elif (type(frame) is Hello and frame.role == "receiver" and frame.mode == "ack"
              and frame.stream == self.stream):
            self.ledger.on_presence(frame.node, now=now)
            self.ledger.on_alive(frame.node)

    def on_receiver_bye(self, receiver: str) -> None:
        self.ledger.on_bye(receiver)

    def on_timer(self, *, now: float) -> list[tuple[str, str]]:
        return self.ledger.expire(now=now)

    def on_connection_lost(self, *, now: float) -> None:
        within = self.ledger.config.disconnect_probe_s
        if within is not None:
            self.ledger.suspect(now=now, within=within)

    def ready(self, answered: Collection[str]) -> int:
        granted = self.ledger.has_granted
        return sum(1 for r in answered if granted(r))

    def next_deadline(self) -> float | None:
        return self.ledger.next_deadline()

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        return self.cap.limits(now=now)[0], self.ledger.sendable(now=now)

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, "credit_stalls": self.stalls, **self.ledger.snapshot()}


def is_other_modes_feedback(frame: Frame, mode: str) -> TypeGuard[Nak | Credit]:
    """A NAK heard outside ``nak`` mode, or a CREDIT outside ``ack``: a misconfiguration."""
    return (type(frame) is Nak and mode != "nak") or (type(frame) is Credit and mode != "ack")


def _nak_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
                ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    cfg = nak or NakConfig()
    if max_rate_msgs is not None:  # the cap is nak's ceiling
        cfg = replace(cfg, max_rate_msgs=max_rate_msgs,
                      min_rate_msgs=min(cfg.min_rate_msgs, max_rate_msgs))
    return NakFlow(stream, cfg)


def _ack_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
                ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    return AckFlow(stream, sender, epoch, ack, next_seq=next_seq, max_rate_msgs=max_rate_msgs)


def _no_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
               ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    return NoFlow(max_rate_msgs)


SenderFactory = Callable[..., SenderFlow]
ReceiverFactory = Callable[..., "ReceiverFlow"]
SENDER_POLICIES.update({"nak": _nak_sender, "ack": _ack_sender, "none": _no_sender})


def make_sender_flow(mode: str, *, stream: str, sender: str, epoch: int,
                     nak: NakConfig | None = None, ack: AckConfig | None = None,
                     next_seq: int = 0, max_rate_msgs: float | None = None) -> SenderFlow:
    """Build the sender-side policy registered under ``mode``.

    ``max_rate_msgs`` caps every mode: it is ``nak``'s ceiling, and a fixed rate for
    ``none`` and ``ack``.
    """
    return SENDER_POLICIES[check_mode(mode)](stream=stream, sender=sender, epoch=epoch, nak=nak,
                                             ack=ack, next_seq=next_seq,
                                             max_rate_msgs=max_rate_msgs)


class ReceiverFlow(ABC):
    """Receiver-side policy: what a receiver says back, and when."""

    mode: ClassVar[str]

    def __init__(self, stream: str, receiver: str) -> None:
        self.stream = stream
        self.receiver = receiver

    def on_sender(self, sender: SenderKey, next_seq: int, *, now: float,  # noqa: B027
                  waiting: bool = False) -> None:
        """``sender`` was heard (DATA or HELLO), next seq ``next_seq``; ``waiting``: its
        HELLO says it waits for credit."""

    def on_enqueued(self, sender: SenderKey, n: int) -> None:  # noqa: B027
        """``n`` messages of ``sender`` entered the queue."""

    def on_released(self, sender: SenderKey, n: int) -> None:  # noqa: B027
        """``n`` messages of ``sender`` left the queue (consumed or dropped)."""

    def on_sender_gone(self, sender: SenderKey) -> None:  # noqa: B027
        """``sender`` ended its stream."""

    def on_overheard(self, frame: Frame, *, now: float) -> None:  # noqa: B027
        """Another receiver's feedback frame was heard at ``now``."""

    def set_rtt(self, rtt_s: float) -> None:  # noqa: B027
        """The senders advertise a group RTT of ``rtt_s``."""

    @abstractmethod
    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        """The queue counts as ``depth`` messages at ``now`` (``signal``: what set it, a
        ``wire.SIGNALS`` code; ``rate``: what the receiver can take, msgs/s; ``judge``:
        whether a NAK would be news now): feedback frames to send."""

    def next_deadline(self) -> float | None:
        return None

    @abstractmethod
    def snapshot(self) -> dict[str, Any]: ...


class NoFeedback(ReceiverFlow):
    """``none``: receivers say nothing."""

    mode = "none"

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        return []

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode}


class NakFeedback(ReceiverFlow):
    """``nak``: a FillMonitor with suppression by overheard NAKs."""

    mode = "nak"

    def __init__(self, stream: str, receiver: str, capacity_msgs: int,
                 config: NakConfig | None = None, *, rng: Uniform | None = None) -> None:
        super().__init__(stream, receiver)
        self.monitor = FillMonitor(capacity_msgs, config, rng=rng)
        self.by_signal: dict[str, int] = {}  # NAKs sent, by what filled the receiver
        self._said_paused = False
        self.not_news = self.paused = 0  # NAKs kept back: catching up; consumer paused

    def on_overheard(self, frame: Frame, *, now: float) -> None:
        if type(frame) is Nak and frame.stream == self.stream and frame.receiver != self.receiver:
            self.monitor.on_heard(frame.level, now=now)

    def set_rtt(self, rtt_s: float) -> None:
        self.monitor.set_rtt(rtt_s)

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        """A NAK when the fill reaches a level (FillMonitor), unless ``judge`` says the
        receiver is draining its backlog faster than data arrives (not news), or that its
        consumer paused: then one NAK says so (``paused``; the sender may undo the cuts
        this receiver caused) and nothing more until it takes messages again."""
        verdict = NEWS if judge is None else judge(now)
        if verdict != PAUSE:
            self._said_paused = False
        level = self.monitor.update(depth, now=now)
        if level is None:
            return []
        if verdict == NOT_NEWS:
            self.not_news += 1
            self.monitor.kept_back(level)
            return []
        if verdict == PAUSE:
            self.paused += 1
            if self._said_paused:
                self.monitor.kept_back(level)
                return []
            self._said_paused, signal, rate = True, SIGNAL_CODES["paused"], 0.0
        fill = round(self.monitor.fill_pct(depth), 2)
        name = SIGNALS.get(signal, "unknown")
        self.by_signal[name] = self.by_signal.get(name, 0) + 1
        return [Nak(self.stream, self.receiver, level, fill, now, signal, round(rate, 1))]

    def next_deadline(self) -> float | None:
        return self.monitor.next_deadline()

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.monitor.snapshot(),
                "naks_by_signal": dict(sorted(self.by_signal.items())),
                "naks_not_news": self.not_news, "naks_while_paused": self.paused}


class AckFeedback(ReceiverFlow):
    """``ack``: a CreditGranter."""

    mode = "ack"

    def __init__(self, stream: str, receiver: str, capacity_msgs: int,
                 config: AckConfig | None = None) -> None:
        super().__init__(stream, receiver)
        self.granter = CreditGranter(capacity_msgs, config)

    def on_sender(self, sender: SenderKey, next_seq: int, *, now: float,
                  waiting: bool = False) -> None:
        self.granter.on_sender(sender, next_seq, now=now, waiting=waiting)

    def on_enqueued(self, sender: SenderKey, n: int) -> None:
        self.granter.on_enqueued(sender, n)

    def on_released(self, sender: SenderKey, n: int) -> None:
        self.granter.on_released(sender, n)

    def on_sender_gone(self, sender: SenderKey) -> None:
        self.granter.on_sender_gone(sender)

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        return [Credit(self.stream, self.receiver, sid, epoch, limit, now)
                for (sid, epoch), limit in self.granter.poll(now=now)]

    def next_deadline(self) -> float | None:
        return self.granter.next_deadline()

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.granter.snapshot()}


def _nak_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                  nak: NakConfig | None, ack: AckConfig | None,
                  rng: Uniform | None) -> ReceiverFlow:
    return NakFeedback(stream, receiver, capacity_msgs, nak, rng=rng)


def _ack_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                  nak: NakConfig | None, ack: AckConfig | None,
                  rng: Uniform | None) -> ReceiverFlow:
    return AckFeedback(stream, receiver, capacity_msgs, ack)


def _no_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                 nak: NakConfig | None, ack: AckConfig | None,
                 rng: Uniform | None) -> ReceiverFlow:
    return NoFeedback(stream, receiver)


RECEIVER_POLICIES.update({"nak": _nak_receiver, "ack": _ack_receiver, "none": _no_receiver})


def make_receiver_flow(mode: str, *, stream: str, receiver: str, capacity_msgs: int,
                       nak: NakConfig | None = None, ack: AckConfig | None = None,
                       rng: Uniform | None = None) -> ReceiverFlow:
    """Build the receiver-side policy registered under ``mode`` (``rng``: the NAK
    hold-off's draws)."""
    return RECEIVER_POLICIES[check_mode(mode)](stream=stream, receiver=receiver,
                                               capacity_msgs=capacity_msgs, nak=nak, ack=ack,
                                               rng=rng)


def register(mode: str, sender: SenderFactory, receiver: ReceiverFactory) -> None:
    """Put a policy pair under ``mode`` (one of ``MODES``: the wire carries the name)."""
    SENDER_POLICIES[check_mode(mode)] = sender
    RECEIVER_POLICIES[mode] = receiver


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
