"""One sender's whole protocol, sans-I/O (h11's ``Connection``, aioquic's driver contract).

Admission (the mode's policy, taken ahead in allowances: ``Admission``), natural
batching (``FrameBatcher``), framing and sequence numbers (``Framer``), history and
repair (``RepairServer``), presence (``ReceiverRoster``), feedback, timers and the
lifecycle (``Lifecycle``) all hang off this one object. A driver (the threaded
``Sender``, ``AsyncSender``, the simulator's ``SimLink``) only moves bytes, waits and
locks::

    wait = core.offer(payload, now)         # 0.0: admitted; else ask again after wait s
    core.receive_feedback(buf, now)         # every frame from the feedback channel
    core.handle_timer(now)                  # when now >= core.get_timer()
    for buf in core.frames_to_send(): pub.send(buf)
    event = core.next_event()               # events.ReceiverJoined, Closed, ...

``timer_changed`` turns True when a call set an earlier timer (a frame began to linger,
repairs were asked for): a driver that sleeps on the timer clears it and re-reads it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..config import SenderConfig, check_count
from ..errors import ConfigError, LocalProtocolError, PeerMismatch
from ..events import BeyondHistory, Closed, Confirmed, ReceiverJoined, ReceiverLeft
from ..policy.bucket import TokenBucket
from ..policy.rate_memory import PathRate, RateMemory, starting_at
from ..policy.registry import is_other_modes_feedback, make_sender_flow
from ..wire.auth import FrameAuth
from ..wire.codec import SIGNAL_CODES, Bye, Hello, Nak, Progress, Receipt, Repair, decode
from ..wire.endpoint import Endpoint
from .admission import ALLOWANCE_MSGS, ALLOWANCE_S, Admission
from .batch import PER_PAYLOAD_OVERHEAD, FrameBatcher, frozen
from .close import CloseTally, SenderClose, receiver_of
from .framer import Framer
from .lifecycle import CLOSED, CLOSING, OPEN, Lifecycle
from .repair_server import RepairServer
from .roster import ReceiverRoster
from .tail import TailAnnouncer
from .timeline import Timeline
from .wait import ReceiverWait

__all__ = ["ALLOWANCE_MSGS", "BatchOffer", "SenderCore", "sender_snapshot"]

log = logging.getLogger("nakflow.live.sender")
MAX_BATCH_MSGS = 1024  # payloads per DATA frame in offer_batch
MAX_BATCH_BYTES = 256 * 1024

#: NAK signals that, after END, say a receiver still reads frames sent long ago (a socket
#: backlog): it has not reached END and may yet find drops to ask for. Not its queue's
#: fill: a slow consumer's full queue holds what it received (its drops it asks for), and
#: lingering for it held every Spark task of the eval open (0.934 of ACK, 0.972 before).
BEHIND = frozenset((SIGNAL_CODES["delay"], SIGNAL_CODES["silence"]))


#: Two receivers answered one HELLO under one id (``ReceiverRoster.on_answer``).
CLASH = ("two receivers answer as {!r}: each receiver needs an id of its own (--id, "
         "receiver_id); this sender counts them as one (in ack, one credit for both)")


class SenderCore(Endpoint):
    """Sender protocol state. ``config`` must carry its ``sender_id`` and ``epoch``
    (``SenderConfig.named``). Every frame it hands out is ready to go (sealed if keyed).
    ``multicast``: the data goes to a group. ``local``: the data endpoints lead to
    processes on this host (``SenderConfig.host_local`` overrides). ``path`` (the data
    endpoints) and ``rate_memory``: with ``remember_rate`` (nak) it starts from the rate
    the memory holds for its path, and leaves its validated rate there once an exact
    close is over."""

    def __init__(self, config: SenderConfig, *, now: float, wall_offset: float = 0.0,
                 multicast: bool = False, local: bool = False, path: Sequence[str] = (),
                 rate_memory: RateMemory | None = None) -> None:
        sender_id, epoch = config.sender_id, config.epoch
        if sender_id is None or epoch is None:
            raise ConfigError("SenderCore needs a sender_id and epoch (SenderConfig.named)")
        self.config = cfg = config
        self.mode, self.stream, self.sender_id, self.epoch = cfg.mode, cfg.stream, sender_id, epoch
        self.path = tuple(path)  # the data endpoints, named where no receiver answered
        #: where a ``remember_rate`` sender (nak) finds and leaves its path's rate (its
        #: stream and data endpoints, ``path``)
        self._memory = (None if rate_memory is None or not cfg.remember_rate
                        or cfg.mode != "nak" else PathRate(rate_memory, cfg.stream, path))
        start_rate_msgs = None if self._memory is None else self._memory.recall(now=now)
        nak = cfg.nak if start_rate_msgs is None else starting_at(cfg.nak, start_rate_msgs)
        self.start_rate_msgs = start_rate_msgs
        self.policy = make_sender_flow(cfg.mode, stream=cfg.stream, sender=sender_id,
                                       epoch=epoch, nak=nak, ack=cfg.ack,
                                       max_rate_msgs=cfg.max_rate_msgs)
        self.policy.t0 = now
        self.policy.host_local = local if cfg.host_local is None else cfg.host_local
        if start_rate_msgs is None:  # nothing known of this path: the start finds out
            self.policy.use_startup()
        self.admission = Admission(self.policy)
        self._floor = TokenBucket(cfg.nak.min_rate_msgs, burst_s=0.05)
        self.repairs = (RepairServer(cfg.repair, multicast=multicast)
                        if cfg.mode == "nak" and cfg.repair.enabled else None)
        self.mac = None if cfg.shared_key is None else FrameAuth(cfg.shared_key)
        self.framer = Framer(stream=cfg.stream, sender_id=sender_id, epoch=epoch, mode=cfg.mode,
                             mac=self.mac, wall_offset=wall_offset,
                             max_frame_bytes=cfg.max_frame_bytes,
                             history=None if self.repairs is None else self.repairs.history)
        self._frame_msgs = cfg.frame_msgs  # the policy may hold frames smaller (its start)
        self._sized = False  # the policy heard the first message's size (``size_hint``)
        self.batch = FrameBatcher(linger_s=cfg.linger_s, max_msgs=cfg.frame_msgs,
                                  max_bytes=cfg.frame_bytes, max_frame_bytes=cfg.max_frame_bytes,
                                  names_bytes=len(cfg.stream.encode()) + len(sender_id.encode()))
        self.roster = ReceiverRoster()
        self.tally = CloseTally(self.roster, gone_after_s=cfg.receiver_gone_s)
        self.multicast = multicast
        self.max_frame_bytes, self.wall_offset = cfg.max_frame_bytes, wall_offset
        self.node_desc, self._log = f"sender {sender_id}", log
        self._init_endpoint()
        self.life = Lifecycle()
        self._t0 = now
        self.first_data_t: float | None = None  # when the first DATA frame went out
        self.receiver_wait = ReceiverWait(cfg.mode, cfg.hello_interval_s, now)
        self.tail = TailAnnouncer(now)
        self.closing = SenderClose(self.tally, self.tail, cfg.repair.linger_max_s)
        self.timer_changed = False
        self.feedback_frames = self.feedback_bytes = 0
        self.timeline = Timeline(("sent", "rate_limit", "credit", "blocked_s"),
                                 interval_s=cfg.timeline_interval_s)

    # -- the application's side --------------------------------------------------------
    def offer(self, payload: bytes, now: float) -> float:
        """Admit one message: 0.0 if it is admitted (it leaves with the frame being built),
        else the seconds to wait before offering it again (inf: until feedback or the
        timer). Raises ValueError for a payload no frame can hold, LocalProtocolError
        after END."""
        adm = self.admission
        if adm.allow and now < adm.until:
            r = self.batch.offer(payload, now)
            if r:
                self._settle(r, payload, now)
            adm.allow -= 1
            return 0.0
        return self._offer_slow(payload, now, wait=True)

    def try_offer(self, payload: bytes, now: float) -> bool:
        """Admit one message if the policy allows it now; never asks to wait."""
        adm = self.admission
        if adm.allow and now < adm.until:
            return self.offer(payload, now) == 0.0
        return self._offer_slow(payload, now, wait=False) == 0.0

    def _offer_slow(self, payload: bytes, now: float, *, wait: bool) -> float:
        self._may_send()
        self.batch.check(payload)
        if not self._sized:
            self._size_hint(payload)
        adm = self.admission
        adm.give_back()
        self._serve_repairs(now)  # repairs asked for go ahead of new data
        if self._owed_in_full(now):  # the history holds only what receivers are owed
            pause = self._floor.request(1, now=now)
            if pause:
                if not wait:
                    adm.refused += 1
                    return math.inf
                self.flush(now)
                adm.block(now, pause)
                return pause
            adm.unblock(now)
            r = self.batch.offer(payload, now)
            if r:
                self._settle(r, payload, now)
            return 0.0
        if not adm.take(now):
            if not wait:
                adm.refused += 1
                return math.inf
            self.flush(now)  # what waits goes out before the sender waits
            granted, delay = self.policy.admit(1, now=now)
            if not granted:
                if adm.block(now, delay):  # waiting for credit: new receivers must learn
                    self.receiver_wait.hurry(now)  # of us (HELLO)
                    self.timer_changed = True
                return delay
            adm.allow, adm.until = 1, now + ALLOWANCE_S
        self.batch.max_msgs = self.policy.frame_msgs(self._frame_msgs)
        if adm.blocked_since is not None:  # it waited: held back, not idle, so the first
            self.batch.last_out = now  # of what may go now waits for the rest (one frame)
        adm.unblock(now)
        return self.offer(payload, now)

    def offer_batch(self, payloads: Sequence[bytes], start: int, now: float) -> tuple[int, float]:
        """Admit ``payloads[start:]`` as frames of up to MAX_BATCH_MSGS, paced as a whole:
        (how many were admitted and framed now, the wait before offering the rest)."""
        self._may_send()
        self.admission.give_back()
        self.flush(now)
        self._serve_repairs(now)
        i, n, size = start, len(payloads), 0
        if not self._sized and start < n:
            self._size_hint(payloads[start])
        most = self.policy.frame_msgs(MAX_BATCH_MSGS)
        room = min(MAX_BATCH_BYTES, self.batch.room)  # a frame every receiver takes
        while i < n and i - start < most:
            size += len(payloads[i]) + PER_PAYLOAD_OVERHEAD
            if size > room and i > start:
                break
            i += 1
        if self._owed_in_full(now):
            i = start + 1  # one at a time, at the floor rate
            pause = self._floor.request(1, now=now)
            if pause:
                self.admission.block(now, pause)
                return 0, pause
            self.admission.unblock(now)
            self._data_frame(payloads[start:i], now, now)
            return 1, 0.0
        granted, wait = self.policy.admit(i - start, now=now)
        if not granted:
            if self.admission.block(now, wait):
                self.receiver_wait.hurry(now)
                self.timer_changed = True
            return 0, wait
        self.admission.unblock(now)
        self._data_frame(payloads[start:start + granted], now, now)
        return granted, 0.0

    def batch_offer(self, payloads: Iterable[bytes]) -> BatchOffer:
        """``payloads`` (any iterable: a generator is taken whole first) to offer as a
        batch (``offer_batch``), a part at a time. Raises TypeError or ValueError for any
        payload ``offer`` would refuse, before any of them is sent (a bad one half way
        through used to leave the first part sent), and TypeError for one payload given
        in place of the batch; an error of the iterable's own passes through. Each such
        error has ``sent`` = 0: none of the batch went."""
        if isinstance(payloads, (bytes, bytearray, memoryview, str)):
            raise TypeError("send_batch takes a sequence of payloads, not one payload "
                            f"({type(payloads).__name__}): send(payload), or "
                            "send_batch([payload])")
        try:
            if not isinstance(payloads, (list, tuple)):  # a generator's len() was a
                # TypeError; each payload is copied as it is taken: a generator may refill
                # one buffer
                payloads = [p if type(p) is bytes else frozen(p) for p in payloads]
            check = self.batch.check
            mutable = False
            for payload in payloads:
                check(payload)
                if type(payload) is not bytes:
                    mutable = True
        except BaseException as exc:
            # a payload refused, or the iterable's own error (a generator whose source
            # broke): none of the batch went, and the error says so as a part way one does
            exc.sent = 0  # type: ignore[attr-defined]
            raise
        if mutable:  # copies, as they are now: the frames and the history keep them
            payloads = [frozen(p) for p in payloads]
        return BatchOffer(self, payloads)

    def _size_hint(self, payload: bytes) -> None:
        """The policy learns the first message's size before admitting it."""
        self._sized = True
        self.policy.size_hint(len(payload))

    def _owed_in_full(self, now: float) -> bool:
        """The history's byte bound is full of frames kept for receivers that asked to
        have them held: rather than forget what they are owed, the sender goes on at its
        floor (``NakConfig.min_rate_msgs``: no feedback can stop a sender) until those
        pins are served or end."""
        rs = self.repairs
        return rs is not None and rs.history.kept_bytes > 0 and rs.history.over(now)

    def flush(self, now: float) -> None:
        """The frame being built leaves now."""
        if self.batch.payloads:
            starting = self.policy.starting
            self.framer.data_from(self.batch, now, starting,
                                  self.policy.report_us if starting else 0, self.outbox)
            self._data_sent(now)

    def end(self, now: float) -> None:
        """END: every seq below ``seq`` was sent. Again after END: END again."""
        self.life.step("end")
        self.admission.give_back()
        self.flush(now)
        if self.framer.seq == 0 and not self.framer.said_hello:  # receivers count ENDs of
            self._hello(now)  # streams they heard
        self.outbox.append(self.framer.end(now))
        self.tally.start()

    def close(self, now: float) -> None:
        """END (if not yet), then the exact close: answer repairs and repeat END until
        every receiver heard before END has confirmed (its RECEIPT) or is gone, at most
        ``RepairConfig.linger_max_s`` (``closed`` says when it is over: BYE sent,
        ``events.Closed``; ``tally`` what each receiver ended with)."""
        if self.life.state == OPEN:
            self.end(now)
        if self.life.state == CLOSED:
            return
        if self.life.state != CLOSING:
            self.closing.begin(now, self.roster.rtt_s or 0.0)
        self.life.step("close")
        self.handle_timer(now)

    def abort(self, now: float) -> None:
        """Leave without END (receivers see the stream incomplete): what was admitted goes
        out, then BYE. During the close (END went out already) it stops the close's wait:
        the receivers still waited for are ``unconfirmed``."""
        if self.life.state == CLOSED:
            return
        if self.life.state == CLOSING:
            self.tally.finish("the close was cut short before its receipt")
            self._take_outcomes()
        self.admission.give_back()
        self.flush(now)
        self.life.step("abort")
        self._bye(now)

    def connection_lost(self, now: float, n: int = 1) -> None:
        """The transport says ``n`` receiver connections closed (ZeroMQ's socket monitor):
        the policy may evict who stays silent (ack: ``AckConfig.disconnect_probe_s``), and a
        close stops waiting for receivers that stay silent (``_close``)."""
        self.policy.on_connection_lost(now=now)
        self.tally.on_connection_lost(n, now)
        if self.life.state == CLOSING:
            self.closing.look_now(now)
        self.timer_changed = True

    @property
    def watches_connections(self) -> bool:
        """Whether ``connection_lost`` can change anything (the driver may skip watching):
        over tcp and ipc, where a closed connection is seen (the close uses it)."""
        return not self.multicast

    def usable(self, what: str) -> None:
        """Raises LocalProtocolError once the sender is closed: ``what`` (a poll, a wait
        for receivers) needs the sockets the close let go (a poll after close raised
        ZeroMQ's "Socket operation on non-socket", a wait said its receivers were ready)."""
        if self.life.state == CLOSED:
            raise LocalProtocolError(f"{what} after close")

    def want_receivers(self, n: int, now: float) -> None:
        """The driver waits until ``receivers_ready() >= n``: say HELLO meanwhile (0: done).
        Raises LocalProtocolError after close, TypeError or ValueError for an ``n`` that
        is no whole number >= 0."""
        check_count(n, "wait_for_receivers", "n")
        if n:
            self.usable("wait_for_receivers")
        if self.receiver_wait.want(n, now):
            self.timer_changed = True

    def receivers_ready(self) -> int:
        """Receivers that answered our HELLO in this mode and may be sent to (ack: have
        granted)."""
        return self.policy.ready(self.receiver_wait.ready(self.roster.answered))

    def wait_error(self, now: float, *, timed_out: bool = False) -> PeerMismatch | None:
        """Why waiting for receivers cannot succeed, to raise (None: it still can; the
        driver asks only while too few are ready): ``ReceiverWait.error``."""
        heard = (None if self.key_mismatch_detail is None
                 else f"{self.key_mismatch:,} {self.key_mismatch_detail}")
        return self.receiver_wait.error(now, timed_out=timed_out, key_mismatch=heard)

    def wait_timed_out(self, now: float, ready: int, n: int, timeout_s: float) -> Exception:
        """What a driver raises when its wait for ``n`` receivers ran ``timeout_s`` out
        with ``ready``: the cause if one is known (``wait_error``), else a TimeoutError
        that names the data endpoints the receivers were looked for on."""
        where = f" on {', '.join(self.path)}" if self.path else ""
        if self.path and not self.multicast and ready >= len(self.path) < n:
            where += (f": each data endpoint leads to one receiver, so at most "
                      f"{len(self.path)} can answer (wait for fewer, or list every "
                      "receiver's endpoints)")
        said = f"{ready} of {n} receivers answered in {timeout_s:g} s"
        cause = self.wait_error(now, timed_out=True)
        if cause is None and self.roster.clashes:  # the count is short by the clash
            cause = PeerMismatch(f"{said}: {CLASH.format(next(iter(self.roster.clashes)))}")
        return cause or TimeoutError(f"{said}{where}")

    def send_timed_out(self, now: float, timeout_s: float | None) -> Exception:
        """What a driver raises when a send waited ``timeout_s`` (a send without one never
        gives up) for admission in vain (the wait is over: ``wait_over``): with no receiver
        of this mode ready, the cause if one answered in another mode or with another key
        (``wait_error``; an ack sender that never waited for receivers said only that none
        granted credit), else a TimeoutError saying what held it."""
        self.wait_over(now)
        why = self.policy.why_held(now=now)
        mismatch = None if self.receivers_ready() else self.wait_error(now, timed_out=True)
        if mismatch is not None:  # no receiver of this mode: the other one is the cause
            return type(mismatch)(f"no permission to send within {timeout_s} s: {mismatch}")
        return TimeoutError(f"no permission to send within {timeout_s} s "
                            f"({self.mode}{': ' if why else ''}{why})")

    def wait_over(self, now: float) -> None:
        """The driver stopped waiting for admission (gave up): count the time waited."""
        self.admission.unblock(now)

    @property
    def closed(self) -> bool:
        return self.life.state == CLOSED

    @property
    def sent(self) -> int:
        """Messages sent, or admitted and waiting in the frame being built."""
        return self.framer.seq + len(self.batch)

    # -- the network's side -------------------------------------------------------------
    def receive_feedback(self, buf: bytes, now: float) -> None:
        """A frame from the feedback channel; bad ones are counted and dropped."""
        self.feedback_bytes += len(buf)
        frame = self._open(buf, now, decode)
        if frame is None:
            return
        self.feedback_frames += 1
        node = receiver_of(frame)
        if node is not None and type(frame) is not Bye:  # a BYE is no sign of life
            self.roster.heard(node, now)
        if type(frame) is Receipt:
            if (frame.sender, frame.epoch) == (self.sender_id, self.epoch):
                self._on_receipt(frame, now)
            elif frame.stream == self.stream and self.life.state == OPEN:
                self.admission.give_back()  # another sender's stream ended
                self.policy.on_peer_ended((frame.sender, frame.epoch),
                                          self.framer.seq + len(self.batch), now=now)
            return
        if type(frame) is Hello:
            if frame.role == "receiver":
                self._on_receiver_hello(frame, now)
        elif type(frame) is Bye:
            if frame.role == "receiver" and self.roster.on_bye(frame.node):
                self.policy.on_receiver_bye(frame.node)
                if self.repairs is not None:
                    self.repairs.history.release(frame.node)
                self._event(ReceiverLeft(frame.node, "bye"))
        elif type(frame) is Repair:
            if (frame.sender, frame.epoch) == (self.sender_id, self.epoch):
                self._on_repair(frame, now)
            return
        elif type(frame) is Progress:
            if (frame.sender, frame.epoch) == (self.sender_id, self.epoch):
                self.policy.on_progress(frame, now=now)
            return
        elif is_other_modes_feedback(frame, self.mode):
            self._mismatch(f"{type(frame).__name__} feedback heard by a {self.mode!r} sender")
        elif (type(frame) is Nak and frame.signal in BEHIND and self.repairs is not None
              and frame.stream == self.stream and self.life.state == CLOSING):
            self.repairs.on_behind(now)  # after END: a receiver still reads old frames
        self.policy.on_feedback(frame, now=now)

    def _on_receipt(self, frame: Receipt, now: float) -> None:
        self.tally.on_receipt(frame)
        self._take_outcomes()
        if self.life.state == CLOSING:  # the close may be over: look now
            self.closing.look_now(now)
            self.timer_changed = True

    def _take_outcomes(self) -> None:
        for receiver, outcome in self.tally.take_new():
            self._event(Confirmed(receiver, outcome.status, outcome.why))

    def _on_receiver_hello(self, frame: Hello, now: float) -> None:
        # an answer to this incarnation's HELLO: its id and one of its stamps (framer)
        me = frame.echo == self.sender_id and frame.ts in self.framer.hello_stamps
        if self.roster.on_hello(frame.node, echoes_us=me,
                                rtt_s=now + self.wall_offset - frame.ts,
                                receipts=frame.receipts):
            self._event(ReceiverJoined(frame.node))
        if me and self.roster.rtt_s is not None:
            self.framer.grtt_us = round(self.roster.rtt_s * 1e6)
            self.policy.set_rtt(self.roster.rtt_s)
        if frame.mode != self.mode:
            self._mismatch(f"receiver {frame.node} runs mode {frame.mode!r}")
        if me:
            if frame.max_frame:  # no frame is built bigger than this receiver takes
                self.batch.narrow(frame.max_frame, frame.node)
            if self.roster.on_answer(frame.node, frame.ts, frame.epoch):
                self._warn(f"clash {frame.node}", CLASH.format(frame.node))
        self.receiver_wait.on_hello(frame.node, frame.mode, now, echoes_us=me)

    def _on_repair(self, frame: Repair, now: float) -> None:
        if self.repairs is None:
            return
        for lo, hi in self.repairs.on_request(frame, now=now):
            self.outbox.append(self.framer.gone(lo, hi, now))
            self._event(BeyondHistory(lo, hi))
        self.timer_changed = True

    def get_timer(self) -> float | None:
        """When ``handle_timer`` should next run (None: nothing pending). The policy's own
        deadline (the rate's next step, an eviction) counts only while admission waits."""
        t = math.inf if self.repairs is None else self.repairs.due_at
        waiting = self.admission.blocked_since is not None
        for d in (self.batch.deadline(), self.policy.next_deadline() if waiting else None):
            if d is not None and d < t:
                t = d
        if self.receiver_wait.wanted or self.admission.on_credit:
            t = min(t, self.receiver_wait.due_at)
        if self.life.state == CLOSING:
            t = min(t, self.closing.due_at)
        elif self.life.state == OPEN:
            t = min(t, self.tail.announce_at(self.framer.seq))
        return None if math.isinf(t) else t

    def handle_timer(self, now: float) -> None:
        """Do what is due at ``now``: a frame whose linger is over leaves, repairs the
        policy admits, HELLO while waiting, evictions, the last seq announced while idle,
        END repeated and the end of the linger after END."""
        due = self.batch.deadline()
        if due is not None and due <= now:
            self.flush(now)
        self._serve_repairs(now)
        for receiver, why in self.policy.on_timer(now=now):
            self._event(ReceiverLeft(receiver, why))
        rw = self.receiver_wait
        if (rw.wanted or self.admission.on_credit) and now >= rw.due_at:
            self._hello(now)
        state = self.life.state
        tail, seq = self.tail, self.framer.seq
        if state == OPEN and now >= tail.announce_at(seq):  # idle: say where it stands
            tail.announced(seq, now)
            self.outbox.append(self.framer.hello(now, announce=True))
        elif state == CLOSING:
            closing = self.closing
            if closing.end_due(now):
                self.outbox.append(self.framer.end(now))
            if now >= closing.next_look:
                self._linger(now)

    def _serve_repairs(self, now: float) -> None:
        rs = self.repairs
        if rs is not None and now >= rs.due_at:
            self.outbox += rs.serve(self.policy, self.framer, now)

    def _linger(self, now: float) -> None:
        """After END: BYE once the close is over (``SenderClose.over``); an exact close
        leaves the path's validated rate in the rate memory."""
        over = self.closing.over(now, self.repairs, sent_any=self.framer.seq > 0)
        self._take_outcomes()
        if over:
            self.life.step("done")
            if self._memory is not None:  # an exact close: what the path took is known
                self._memory.leave(self.policy.validated_rate(now=now), now=now)
            self._bye(now)

    # -- frames out, bookkeeping --------------------------------------------------------
    def _may_send(self) -> None:
        if self.life.state != OPEN:
            self.life.step("data")  # raises: the table has no such step

    def _data_frame(self, payloads: Sequence[bytes], first: float, now: float) -> None:
        starting = self.policy.starting
        self.framer.data(payloads, first, now, starting,
                         self.policy.report_us if starting else 0, self.outbox)
        self._data_sent(now)

    def _data_sent(self, now: float) -> None:
        """A DATA frame was handed out at ``now`` (``Framer.data`` counts and hands it out
        in one step: what follows may be cut short by a signal's exception, nothing of it
        loses a message)."""
        if self.first_data_t is None:
            self.first_data_t = now
        self.tail.last_data_t = now
        if self.timeline.due(now):
            rate, credit = self.policy.limits(now=now)
            self.timeline.sample(now, self.framer.seq, rate, credit, self.admission.blocked_s)

    def _settle(self, r: int, payload: bytes, now: float) -> None:
        if self.batch.settle(r, payload, now, self.flush):
            self.timer_changed = True  # a frame began to linger

    def _hello(self, now: float) -> None:
        self.receiver_wait.said_hello(now)
        self.outbox.append(self.framer.hello(now))

    def _bye(self, now: float) -> None:
        self.outbox.append(self.framer.bye(now))
        self._event(Closed())

    def snapshot(self, now: float) -> dict[str, Any]:
        """Metrics, JSON-ready."""
        return sender_snapshot(self, now)


class BatchOffer:
    """What is left of one ``send_batch``: calling it offers the rest at ``now`` and says
    0.0 (some were admitted) or how long to wait; ``done`` once all were admitted."""

    def __init__(self, core: SenderCore, payloads: Sequence[bytes]) -> None:
        self.core, self.payloads, self.sent = core, payloads, 0

    @property
    def done(self) -> bool:
        return self.sent >= len(self.payloads)

    def __call__(self, now: float) -> float:
        n, wait = self.core.offer_batch(self.payloads, self.sent, now)
        self.sent += n
        return wait if not n else 0.0

    def stopped(self, exc: BaseException) -> None:
        """Say on ``exc``, which ends this batch before all of it went (a timeout, a peer
        mismatch, a cancellation, a Ctrl-C), how many of its payloads were sent:
        ``exc.sent``, the first that many, which stay sent; the rest never went."""
        exc.sent = self.sent  # type: ignore[attr-defined]
        if isinstance(exc, Exception) and len(exc.args) == 1 and isinstance(exc.args[0], str):
            exc.args = (f"{exc.args[0]} (send_batch: the first {self.sent:,} of its "
                        f"{len(self.payloads):,} messages were sent, the rest not: "
                        "exc.sent)",)


def _tenth(rate: float | None) -> float | None:
    """A rate for a report, msgs/s, to a tenth (the limit's own figure, 2082.2206715919797,
    was printed whole by ``nakflow send``)."""
    return None if rate is None else round(rate, 1)


def sender_snapshot(core: SenderCore, now: float) -> dict[str, Any]:
    flow = core.policy.snapshot()
    elapsed = now - core._t0
    sent, fr, adm, rs = core.sent, core.framer, core.admission, core.repairs
    return {
        "sender_id": core.sender_id, "epoch": core.epoch, "stream": core.stream,
        "mode": core.mode, "state": core.life.state, "sent": sent, "frames": fr.frames,
        "bytes": fr.bytes, "elapsed_s": round(elapsed, 6),
        "rate_msgs": round(sent / elapsed, 1) if elapsed > 0 else 0.0,
        "first_data_s": (None if core.first_data_t is None
                         else round(core.first_data_t - core._t0, 6)),
        "blocked_s": round(adm.blocked_s, 6), "credit_stalled_s": round(adm.credit_stalled_s, 6),
        "try_refused": adm.refused, "start_rate_msgs": _tenth(core.start_rate_msgs),
        "rate_limit": _tenth(flow.get("rate_limit")),
        "naks_received": flow.get("naks_received", {}),
        "cuts": flow.get("cuts", 0), "cuts_by_signal": flow.get("cuts_by_signal", {}),
        "holds_by_signal": flow.get("holds_by_signal", {}), "limiting": flow.get("limiting"),
        "receivers": flow.get("receivers") if core.mode == "ack" else len(core.roster.present),
        "receivers_seen": core.roster.seen, "receiver_id_clashes": list(core.roster.clashes),
        "data_endpoints": list(core.path), "multicast": core.multicast,
        "rtt_ms": None if core.roster.rtt_s is None else round(core.roster.rtt_s * 1000, 3),
        "feedback_frames": core.feedback_frames, "feedback_bytes": core.feedback_bytes,
        "feedback_malformed": core.malformed, "feedback_foreign": core.foreign,
        "mode_mismatch": core.mode_mismatch, "key_mismatch": core.key_mismatch,
        "repair": None if rs is None else rs.snapshot(),
        "at_close": core.tally.report(), "at_close_counts": core.tally.counts(),
        "receipts": core.tally.receipts, "receipts_after_end": core.tally.receipts_after_end,
        "auth": None if core.mac is None else core.mac.snapshot(),
        "policy": flow,
        "timeline": core.timeline.as_dict(t0=core._t0),
    }

