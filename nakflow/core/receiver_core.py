"""One receiver's whole protocol, sans-I/O: frames and ``now`` in; deliveries, feedback
frames, events and a timer out (the same driver contract as ``SenderCore``).

Sequence accounting, late join and repair requests, fill and NAK timing (or credit),
presence (HELLO answers, HELLO, BYE), frame checking (size, codec, seal, replay), the
backpressure episodes and the timeline live here. A driver owns the sockets and the
bounded queue the application reads (``DeliveryQueue``)::

    core.receive_data(buf, now)             # every frame from the data channel
    core.receive_overheard(buf, now)        # other receivers' feedback
    core.exchange(queue, now)               # deliveries in, what the queue did back;
                                            # feedback decided, timer run if due
    for buf in core.frames_to_send(): feedback.send(buf)

It reads ``core.read_chunk`` frames at most per look, tells ``core.io_behind`` whether
more were waiting, and reads nothing while ``core.wants_data(queue_full)`` says no.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Container
from typing import Any, NamedTuple, Protocol

from ..config import ReceiverConfig
from ..errors import ConfigError, ProtocolError
from ..events import BeyondHistory, SenderLeft, StreamEnded
from ..policy.backpressure import BackpressureEpisodes
from ..policy.fill import Uniform
from ..policy.progress import ProgressReporter
from ..policy.registry import is_other_modes_feedback, make_receiver_flow
from ..policy.signals import PAUSE_S, FillSignals
from ..wire import SenderKey
from ..wire.auth import FrameAuth
from ..wire.codec import (
    TARGET_MAGIC,
    Bye,
    Data,
    End,
    Frame,
    Gone,
    Hello,
    RData,
    Repair,
    decode,
    decode_data,
    encode,
    target_prefix,
    untarget,
)
from ..wire.endpoint import Endpoint
from .endings import StreamEndings
from .gaps import MAX_GAPS
from .repair import RepairRequester
from .seqtrack import SequenceTracker
from .silence import SenderSilence
from .timeline import Timeline

log = logging.getLogger("nakflow.live.receiver")

#: An advertised group RTT is followed down only after this long, s (up at once).
GRTT_HOLD_S = 5.0
#: A sender in its start may fill a receiver's queue up to this share (below the first
#: NAK level, 50 %: the start ends on a full pipe there, not on an overflow).
ROOM_SHARE = 0.4
#: RTTs above this are taken as this (a forged or absurd advertisement), s.
MAX_GRTT_S = 2.0


class Message(NamedTuple):
    """One delivered message."""

    sender: str
    epoch: int
    seq: int
    ts: float
    payload: bytes


class QueueLike(Protocol):
    """What ``ReceiverCore.exchange`` needs of the driver's queue (``DeliveryQueue``)."""

    delivered: int

    @property
    def full(self) -> bool: ...

    def put(self, pending: deque[tuple[SenderKey, Message]],
            hold: bool = False) -> tuple[dict[SenderKey, int], list[Message]]: ...

    def released(self) -> tuple[dict[SenderKey, int], int]: ...

    def set_ends(self, ends: dict[SenderKey, int], finished: int = 0) -> None: ...


#: Senders fallen silent (or heard again) that a receiver names in a warning each.
SILENCE_WARNINGS = 10
#: Why a receiver gave a repair up, for its log (``RepairRequester.take_given_up``).
GIVEN_UP = {
    "unanswered": "its sender did not answer max_requests requests and fell silent",
    "max_gaps": f"more than {MAX_GAPS} separate ranges of the stream were missing at once "
                "(its queue dropped every few messages: the senders ran far above what the "
                "consumer takes), and the oldest went",
}


class ReceiverCore(Endpoint):
    """Receiver protocol state. ``config`` must carry its ``receiver_id``
    (``ReceiverConfig.named``); ``rng`` draws the NAK and repair hold-offs."""

    def __init__(self, config: ReceiverConfig, *, now: float, wall_offset: float = 0.0,
                 rng: Uniform | None = None, incarnation: int = 0) -> None:
        receiver_id = config.receiver_id
        if receiver_id is None:
            raise ConfigError("ReceiverCore needs a receiver_id (ReceiverConfig.named)")
        if config.test_data_loss and rng is None:
            raise ConfigError("test_data_loss needs an rng")
        self.config = cfg = config
        self.mode, self.stream = cfg.mode, cfg.stream
        self.receiver_id: str = receiver_id
        self.capacity_msgs = cap = cfg.capacity_msgs
        self.grtt_s, self._grtt_t = 0.0, -math.inf  # the senders' advertised group RTT
        self.flow = make_receiver_flow(cfg.mode, stream=cfg.stream, receiver=self.receiver_id,
                                       capacity_msgs=cap, nak=cfg.nak, ack=cfg.ack, rng=rng)
        repairing = cfg.mode == "nak" and cfg.repair.enabled
        self.tracker = SequenceTracker(drop_duplicates=cfg.drop_duplicates,
                                       max_streams=cfg.max_streams, repair=repairing,
                                       late_join=cfg.repair.late_join)
        self.requester = (RepairRequester(self.tracker, cfg.stream, self.receiver_id,
                                          cfg.repair, rng=rng, capacity_msgs=cap)
                          if repairing else None)
        self.mac = None if cfg.shared_key is None else FrameAuth(cfg.shared_key)
        self._rng = rng
        #: this receiver's incarnation, in its HELLO's epoch (the driver's draw; 0: none):
        #: two receivers started with one id answer a sender's HELLO with two, which the
        #: sender names (``roster``). Not drawn from ``rng`` here: a seeded run's draws (the
        #: simulator's) stay what they were
        self.incarnation = incarnation
        self.max_frame_bytes, self.wall_offset = cfg.max_frame_bytes, wall_offset
        self.signals = FillSignals(cfg.nak, capacity_msgs=cap, on=cfg.mode == "nak")
        #: PROGRESS for senders in their start (any mode answers: only nak senders ask)
        self.progress = ProgressReporter(cfg.stream, self.receiver_id,
                                         max_streams=self.tracker.max_streams,
                                         wall_offset=wall_offset)
        self.episodes = BackpressureEpisodes(cap)
        self.timeline = Timeline(("depth", "seen_depth", "received", "delivered", "dropped",
                                  "feedback", "flow_frames"),
                                 interval_s=cfg.timeline_interval_s)
        self.read_chunk = max(1, min(256, cap // 20))  # frames (and messages) per look
        self.endings = StreamEndings(cfg.stream, receiver_id, self.tracker.max_streams)
        self.silence = SenderSilence(cfg.sender_gone_s, now, retried=cfg.mode != "none")
        self._silence_said = 0  # silence warnings logged (_say_silence)
        self.node_desc, self._log = f"receiver {self.receiver_id}", log
        self._init_endpoint()
        self._t0 = now
        self._pending: deque[tuple[SenderKey, Message]] = deque()
        self._next_hello = now
        self._depth = 0
        self._late = self._woke_late = 0.0
        #: a DATA frame read since the socket was last emptied was sent before a hold-up
        #: of this process ended: what waits in the socket is a backlog of its own,
        #: already buffered for it (and what was sent after the hold-up waits behind it)
        self._backlog = False
        self._away_briefly = False  # FillSignals.away_briefly at the last exchange
        self._drained = False  # the driver's last read emptied the socket
        self._wants = False  # the last wants_data: the driver reads the data channel
        self.frames_in = self.messages_in = self.dropped = self.delivered = 0
        self.feedback_sent = self.feedback_bytes = self.test_dropped = 0
        self.flow_frames = 0  # of those, the flow policy's: NAKs (nak) or CREDITs (ack)
        self.io_behind_polls = 0
        self.late_max = 0.0  # the longest the driver's I/O thread was late, s
        self.first_data_at: float | None = None

    # -- frames in ------------------------------------------------------------------------
    def receive_data(self, buf: bytes, now: float) -> None:
        """A frame from the data channel: new messages join ``deliveries()``."""
        self.frames_in += 1
        alone = buf[:2] == TARGET_MAGIC
        if alone:  # a repair for this receiver alone (its topic)
            try:
                buf = untarget(buf)
            except ProtocolError:
                self.malformed += 1
                return
        got = self._open(buf, now, decode_data)
        if got is None:
            return
        if self.config.test_data_loss and (type(got) is tuple or type(got) is Data):
            assert self._rng is not None
            if self._rng.random() < self.config.test_data_loss:
                self.test_dropped += 1
                return
        if type(got) is tuple:  # DATA, the hot path
            _, sender, epoch, seq, ts, payloads, grtt_us = got
            self._data(sender, epoch, seq, ts, payloads, grtt_us, now)
            return
        frame: Frame = got
        if type(frame) is Data:  # DATA that the hot path left to the full decoder
            self._data(frame.sender, frame.epoch, frame.seq, frame.ts, frame.payloads,
                       frame.grtt_us, now, frame.startup, frame.report_us)
        elif type(frame) is RData:
            self._answered(frame.sender, frame.epoch)
            ranges = self.tracker.on_repair(frame.sender, frame.epoch, frame.seq,
                                            len(frame.payloads))
            if not alone:  # see ArrivalMeter.on_repaired
                self.signals.arrival.on_repaired(sum(hi - lo for lo, hi in ranges), now)
            self._deliver(frame.sender, frame.epoch, frame.seq, frame.ts, frame.payloads,
                          ranges)
        elif type(frame) is Gone:
            self._on_gone(frame)
        elif type(frame) is Hello and frame.role == "sender":
            self._on_sender_hello(frame, now)
        elif type(frame) is End:
            self._on_end(frame)
        elif type(frame) is Bye and frame.role == "sender":
            self._on_sender_bye(frame, now)
        else:
            self.foreign += 1  # feedback-type frames do not belong on the data channel

    def _data(self, sender: str, epoch: int, seq: int, ts: float, payloads: Any,
              grtt_us: int, now: float, startup: bool = False, report_us: int = 0) -> None:
        if grtt_us:
            self._on_grtt(grtt_us, now)
        count = len(payloads)
        if self.first_data_at is None:
            self.first_data_at = now
        self.messages_in += count
        sig = self.signals
        delay = now + self.wall_offset - ts
        held = sig.holdups.since(now - delay)  # this process stopped since it was sent
        if held > 0:
            self._backlog = True
        late = max(self._late, held)  # of the delay, the process's own, not the path's
        key = (sender, epoch)  # per stream: a task and its speculative copy run at once
        sig.delay.on_delay(key, delay, late)
        sig.arrival.on_frame(key, seq + count, ts, now)
        ranges = self.tracker.on_data(sender, epoch, seq, count)
        self.flow.on_sender(key, seq + count, now=now)
        progress = self.progress
        if startup:  # the sender is starting: it asks how far its stream got here
            report = progress.on_data(key, seq + count, delay, self._room(now),
                                      now, late, report_us)
            if report is not None:
                self.flow_frames += 1
                self._send(report, now)
        elif progress.reporting:  # its start is over
            progress.forget(key)
        self._deliver(sender, epoch, seq, ts, payloads, ranges)

    def _deliver(self, sender: str, epoch: int, seq: int, ts: float, payloads: Any,
                 ranges: list[tuple[int, int]]) -> None:
        key, out = (sender, epoch), self._pending.append
        if len(ranges) == 1 and ranges[0] == (0, len(payloads)):  # all new: the usual case
            for i, p in enumerate(payloads):
                out((key, Message(sender, epoch, seq + i, ts, p)))
            return
        for lo, hi in ranges:
            for i in range(lo, hi):
                out((key, Message(sender, epoch, seq + i, ts, payloads[i])))

    def _on_grtt(self, grtt_us: int, now: float) -> None:
        """A sender advertised its group RTT: the receiver times its feedback by the
        largest one advertised within GRTT_HOLD_S (several senders: the farthest)."""
        rtt = grtt_us / 1e6
        if rtt >= self.grtt_s or now - self._grtt_t >= GRTT_HOLD_S:
            if rtt != self.grtt_s:
                self.flow.set_rtt(min(rtt, MAX_GRTT_S))
                if self.requester is not None:
                    self.requester.set_rtt(min(rtt, MAX_GRTT_S))
            self.grtt_s, self._grtt_t = rtt, now

    def _on_sender_hello(self, frame: Hello, now: float) -> None:
        if frame.mode != self.mode:
            self._mismatch(f"sender {frame.node} runs mode {frame.mode!r}")
        key = (frame.node, frame.epoch)
        self.silence.on_sign(key, now)
        if frame.announce:  # idle: "every seq below next_seq was sent"; no answer
            if key not in self.endings.ends:
                self.tracker.on_announce(frame.node, frame.epoch, frame.next_seq)
                self.flow.on_sender(key, frame.next_seq, now=now)
            return
        # a sender repeats HELLO while it waits (for receivers, or for credit)
        self.flow.on_sender(key, frame.next_seq, now=now, waiting=True)
        self.tracker.on_hello(frame.node, frame.epoch, frame.next_seq)
        self.endings.on_hello(key)
        # the answer echoes the sender's stamp: the sender measures the round trip on
        # its own clock; and says the queue's room: a starting sender's first window
        self._send(Hello(self.stream, self.receiver_id, "receiver", self.mode,
                         self.incarnation, 0, frame.node, frame.ts, receipts=True,
                         room=max(1, self._room(now)[0]), max_frame=self.max_frame_bytes),
                   now)

    def _answered(self, sender: str, epoch: int) -> None:
        """The sender of a stream with gaps is there and serving it (a repair, even one
        this receiver holds already; END repeated while it waits for receipts): the
        requester's tries count only while nothing comes (``GapList.progress``). A slow
        receiver's repairs wait behind the sender's rate limit; at 39 messages/s (the
        data source's 128-row messages) ten tries 0.1 s apart ran out before they came,
        and the receiver gave up on 23 of its own drops while the sender still lingered
        for it."""
        gaps = self.tracker.with_gaps.get((sender, epoch))
        if gaps is not None:
            gaps.progress = True

    def _on_end(self, frame: End) -> None:
        key = (frame.sender, frame.epoch)
        self._answered(frame.sender, frame.epoch)
        tracked = key in self.tracker.streams
        if self.silence.heard_again(key):
            self._back(key)
        self.tracker.on_end(frame.sender, frame.epoch, frame.final_seq)
        self.flow.on_sender_gone(key)
        self.progress.forget(key)
        self.signals.forget(key)
        if self.endings.on_end(key, frame.final_seq, tracked=tracked):
            self._event(StreamEnded(frame.sender, frame.epoch, frame.final_seq))

    def _on_gone(self, frame: Gone) -> None:
        """What the sender's history no longer holds is missing here for good: said once
        a stream in the log, as an event, and counted (``beyond_history``)."""
        missing = self.tracker.on_gone(frame.sender, frame.epoch, frame.lo, frame.hi)
        if missing:
            self._event(BeyondHistory(frame.lo, frame.hi, frame.sender, frame.epoch, missing))
            self._warn(f"beyond {frame.sender}/{frame.epoch}",
                       f"{missing} messages of sender {frame.sender} epoch {frame.epoch} are "
                       "no longer in its history: this receiver fell further behind than the "
                       "history reaches (counted as beyond_history; a longer history, "
                       "RepairConfig.history_*, or a faster consumer would have caught up)")

    def _on_sender_bye(self, frame: Bye, now: float) -> None:
        self._sender_left((frame.node, frame.epoch), "bye", now)

    def _sender_left(self, key: SenderKey, why: str, now: float) -> bool:
        """The sender of ``key`` left (``why``: ``bye``, or ``silent``: nothing heard for
        ``sender_gone_s``). After END this changes nothing; without END (an aborted or a
        killed sender) its stream stays incomplete and its credit window is freed for the
        others. True if it left without END."""
        self.flow.on_sender_gone(key)
        self.progress.forget(key)
        self.signals.forget(key)
        if why == "silent":  # counted as finished by the silence's own rule (its look)
            left = key not in self.endings
        else:
            left = self.endings.on_bye(key, now, tracked=key in self.tracker.streams)
        if left:
            self._event(SenderLeft(key[0], key[1], why))
        return left

    def _look_for_silence(self, now: float) -> None:
        """Streams whose sender fell silent leave without END; those heard again are back
        (``core.silence``)."""
        silence = self.silence
        if now < silence.next_look:
            return
        if not (self._wants and self._drained and not self._pending
                and self._woke_late < PAUSE_S):  # not listening: see core.silence
            silence.deaf(now)
        gone, back = silence.look(self.tracker.streams, self.endings, now)
        for key in gone:
            if self._sender_left(key, "silent", now):
                self._say_silence(key, "fell silent without END: nothing heard for "
                                  f"{silence.gone_s:g} s (killed, or cut off), so its stream "
                                  "ends here incomplete (ReceiverConfig.sender_gone_s, "
                                  "receive --sender-gone)")
        for key in back:
            self._back(key)

    def live_streams(self) -> list[SenderKey]:
        """Streams still going (``SenderSilence.live_streams``)."""
        return self.silence.live_streams(self.tracker.streams, self.endings)

    def _back(self, key: SenderKey) -> None:
        self._say_silence(key, f"taken as gone after {self.silence.gone_s:g} s of silence, "
                               "is heard again: it was paused, not killed (a longer "
                               "sender_gone_s covers such pauses)")

    def _say_silence(self, key: SenderKey, what: str) -> None:
        """A warning per sender, for the first SILENCE_WARNINGS; then one saying that the
        rest are counted, not logged. A flood of made-up DATA frames is as many streams that
        fall silent: a line each filled the stderr pipe of the memory test's receiver, and
        its I/O thread blocked on the write for 5 s (CI, 2026-12-06)."""
        said = self._silence_said = self._silence_said + 1
        if said <= SILENCE_WARNINGS:
            self._warn(f"silence {key[0]}/{key[1]}", f"sender {key[0]} epoch {key[1]} {what}")
        elif said == SILENCE_WARNINGS + 1:
            self._warn("silence", "more senders fell silent or were heard again: counted "
                                  "(snapshot's senders_silent), no longer logged")

    def receive_overheard(self, buf: bytes, now: float) -> None:
        """Another receiver's feedback frame."""
        frame = self._open(buf, now, decode)
        if frame is None:
            return
        if is_other_modes_feedback(frame, self.mode):
            self._mismatch(f"{type(frame).__name__} from receiver {frame.receiver}")
        if type(frame) is Repair:
            if self.requester is not None and frame.receiver != self.receiver_id:
                self.requester.on_overheard(frame, now=now)
            return
        self.flow.on_overheard(frame, now=now)

    # -- the queue and the application --------------------------------------------------
    def exchange(self, queue: QueueLike, now: float) -> None:
        """One step with the driver's queue: hand it the new messages, learn what it kept,
        dropped and released, decide the feedback that calls for, run the timer if due, and
        tell the queue which senders finished."""
        if self._pending:
            self.queued(*queue.put(self._pending, self._holding_back()))
        if self._backlog and self._drained and not self._pending:
            self._backlog = False  # the socket was emptied and all of it queued: caught up
        released, depth = queue.released()
        self.consumed(released, depth, queue.delivered, now)
        if now >= self._next_hello or self._due(now):
            self.handle_timer(now)
        endings, silence = self.endings, self.silence
        if endings.changed or silence.changed:  # senders that finished: END, BYE, silent
            endings.changed = silence.changed = False
            queue.set_ends(endings.ends, silence.finished(endings.complete_ids))

    def deliveries(self) -> deque[tuple[SenderKey, Message]]:
        """New messages, oldest first, as ``(stream key, Message)``: the driver's queue
        takes them out of this deque (what it leaves is handed out next time)."""
        return self._pending

    def queued(self, enqueued: dict[SenderKey, int], dropped: list[Message]) -> None:
        """The queue took ``enqueued`` messages per stream and dropped ``dropped`` (its
        own trouble if this receiver was held up: the repair may then come to it alone)."""
        flow, tracker = self.flow, self.tracker
        for key, n in enqueued.items():
            flow.on_enqueued(key, n)
        own = self._late >= PAUSE_S or self.signals.held_up
        for msg in dropped:
            self.dropped += 1
            tracker.on_dropped(msg.sender, msg.epoch, msg.seq, own)

    def consumed(self, released: dict[SenderKey, int], depth: int, delivered: int,
                 now: float) -> None:
        """``released`` messages per stream left the queue (taken, or dropped as the
        oldest), ``depth`` are in it, the application took ``delivered`` so far: the
        feedback this calls for is decided now."""
        for key, n in released.items():
            self.flow.on_released(key, n)
        if released:
            self.progress.on_released()
        self._depth, self.delivered = depth, delivered
        self.signals.on_consumed(delivered, depth, now)
        self._away_briefly = self.signals.away_briefly(now)
        self._feedback(now)

    def late(self, seconds: float, now: float) -> None:
        """The driver's I/O thread ran ``seconds`` later than it could have before the
        reads that follow, at ``now`` (``nakflow.live.lateness``): their frames' queueing
        delay is the process's, not the path's, and is discounted."""
        self._late = self._woke_late = seconds
        if seconds > self.late_max:
            self.late_max = seconds
        self.signals.was_late(seconds, now)

    def reading_for(self, seconds: float) -> None:
        """The driver has been reading for ``seconds`` since it woke (``late``): the
        frames it reads now waited that much more for the process, not the path (each is
        stamped with the time it was read; one stamp for a chunk made those that came
        while it was read look younger than they were, below 0 s, and lowered the least
        delay that queueing is measured from)."""
        self._late = self._woke_late + seconds

    def io_behind(self, behind: bool, now: float) -> None:
        """The driver read a whole chunk and more was waiting (``behind``): counted; or its
        read emptied the socket (not ``behind``): a backlog is over once all of it is
        queued. A driver that never says keeps a backlog held back until ``block``
        would let it in."""
        self.io_behind_polls += behind
        self._drained = not behind

    def subscriptions(self) -> list[bytes]:
        """The prefixes the data channel's SUB must subscribe to: everything but the
        repairs meant for other receivers alone (any first byte but 0xC1; after 0xC1 any
        second but the target mark; and this receiver's own target prefix)."""
        magic, mark = TARGET_MAGIC[0], TARGET_MAGIC[1]
        return ([bytes((b,)) for b in range(256) if b != magic]
                + [bytes((magic, b)) for b in range(256) if b != mark]
                + [target_prefix(self.receiver_id)])

    def wants_data(self, queue_full: bool) -> bool:
        """Read the data channel now? Not while the queue is full under ``block``, nor
        while it is full and this receiver holds back (its own backlog, a consumer away
        for a moment, or in ``ack``: ``_holding_back``)."""
        self._wants = wants = not (queue_full and (self.config.overflow == "block"
                                                   or self._holding_back()))
        return wants

    def _holding_back(self) -> bool:
        """In ``nak`` with repair, what waits in the socket is this receiver's own backlog
        (the process was stopped or descheduled since those frames were sent, and it has
        not emptied its socket since): a full queue then keeps what does not fit and reads
        no more, as ``block`` does, instead of dropping it. Dropped, it would be fetched
        back by repair, though it is already buffered here: a receiver back from a 3 s
        stop dropped 50,000-58,000 of its backlog, in more pieces than the gap list holds,
        and asked for each ten times. Until the socket is emptied, not only the frames
        sent before the hold-up ended: those sent after it waited behind them, and once
        they were dropped (the flag followed each frame's send time) the history, 0.8 s
        of a 1 KB fan-out, no longer held them: 80-1,853 beyond history in 4 of 16 stops.

        The same while its consumer is away a moment (``FillSignals.away_briefly``): its
        overflow is the socket's for that moment, not repair's (docs/design/history.md).

        In ``ack`` always: credit keeps a known sender within the queue, so a full queue
        means one that has not heard this receiver yet (a receiver restarted under its
        id: data comes as soon as ZeroMQ reconnects, before the sender hears its HELLO;
        one CI run dropped 50 so) or credit lent away; no repair would bring a drop back,
        and what waits in the socket is delivered once the consumer makes room."""
        held = self._backlog or self._away_briefly
        return (held and self.requester is not None) or self.mode == "ack"

    # -- feedback and timers --------------------------------------------------------------
    def _feedback(self, now: float) -> None:
        depth = self._depth
        self.episodes.observe(depth, now=now)
        seen = self.seen_depth(depth, now=now)
        sig = self.signals
        for frame in self.flow.poll(seen, now=now, signal=sig.signal, rate=sig.rate(now),
                                    judge=sig.judge):
            self.flow_frames += 1
            self._send(frame, now)
        if self.requester is not None:
            for frame in self.requester.poll(seen / self.capacity_msgs, now=now):
                self._send(frame, now)
            for key, n, why in self.requester.take_given_up():
                self._warn(f"given up {why}", f"gave up repairing {n} messages of sender "
                           f"{key[0]} epoch {key[1]}: {GIVEN_UP[why]} (the stream ends "
                           "incomplete; later give-ups are counted in the snapshot's "
                           f"repair.given_up{'_max_gaps' if why == 'max_gaps' else ''})")
        if self.endings.receipts_due:
            self._receipts(now)
        if self.timeline.due(now):
            self.timeline.sample(now, depth, seen, self.messages_in, self.delivered,
                                 self.dropped, self.feedback_sent, self.flow_frames)

    def _receipts(self, now: float) -> None:
        """The RECEIPTs due (``StreamEndings.receipts``)."""
        tracker = self.tracker
        entering = {key for key, _msg in self._pending} if self._pending else ()
        for receipt in self.endings.receipts(tracker.streams, tracker.with_gaps, entering,
                                             now, now + self.wall_offset):
            self._send(receipt, now)

    def _room(self, now: float) -> tuple[int, float]:
        """For PROGRESS: the room left below ROOM_SHARE of the queue, messages (a start
        fills no queue to its first NAK level; like ACK's window, it caps the start at
        that many messages a round trip where the queue is shorter than the path's rate x
        RTT), and, once a quarter of the queue is full, what its consumer takes from each
        sender, msgs/s (0: it keeps up)."""
        depth, cap = self._depth + len(self._pending), self.capacity_msgs
        room = max(0, int(cap * ROOM_SHARE) - depth)
        if depth * 4 < cap:
            return room, 0.0
        sig = self.signals
        rate = (sig.drain.provisional(sig.window_s) or 0.0) / max(1, sig.arrival.senders(now))
        return room, rate

    def seen_depth(self, depth: int, *, now: float) -> int:
        """The fill the policy acts on (``FillSignals.seen_depth``)."""
        return self.signals.seen_depth(depth, self.dropped, self.tracker, now=now)

    def get_timer(self) -> float | None:
        t = self._next_hello
        for d in (self.flow.next_deadline(), self.progress.next_deadline(),
                  None if self.requester is None else self.requester.next_deadline()):
            if d is not None and d < t:
                t = d
        return t

    def _due(self, now: float) -> bool:
        t = self.get_timer()
        return t is not None and now >= t

    def handle_timer(self, now: float) -> None:
        """HELLO when due (presence, every ``hello_interval_s``) and with it a look for
        senders that fell silent, PROGRESS held back, and the feedback due."""
        if self.progress.reporting:  # the room is measured only for a sender starting
            for report in self.progress.poll(self._room(now), now):
                self.flow_frames += 1
                self._send(report, now)
        if now >= self._next_hello:
            self._next_hello = now + self.config.hello_interval_s
            self._send(Hello(self.stream, self.receiver_id, "receiver", self.mode,
                             self.incarnation, 0, "", now + self.wall_offset, receipts=True),
                       now)
            self._look_for_silence(now)
        self._feedback(now)

    def close(self, now: float) -> None:
        """BYE: this receiver leaves on purpose."""
        self._send(Bye(self.stream, self.receiver_id, "receiver", 0, now + self.wall_offset),
                   now)

    def _send(self, frame: Frame, now: float) -> None:
        buf = encode(frame) if self.mac is None else self.mac.seal(encode(frame),
                                                                    now=now + self.wall_offset)
        self.feedback_sent += 1
        self.feedback_bytes += len(buf)
        self.outbox.append(buf)

    def snapshot(self, now: float) -> dict[str, Any]:
        """Accounting, feedback and policy figures, JSON-ready (``Receiver.snapshot``)."""
        return receiver_snapshot(self, now)


def receiver_snapshot(core: ReceiverCore, now: float) -> dict[str, Any]:
    flow, sig = core.flow.snapshot(), core.signals
    totals = core.tracker.totals()
    return {
        "receiver_id": core.receiver_id, "stream": core.stream, "mode": core.mode,
        "capacity_msgs": core.capacity_msgs, "overflow": core.config.overflow,
        "drop_duplicates": core.config.drop_duplicates,
        "elapsed_s": round(now - core._t0, 6),
        "frames": core.frames_in, "dropped": core.dropped,
        **{k: totals[k] for k in ("received", "lost", "repaired", "beyond_history",
                                  "missed_before_join", "duplicates")},
        "dropped_unrepaired": totals["dropped"], "repair_redundant": totals["redundant"],
        "streams_evicted": core.tracker.evicted,
        "malformed": core.malformed, "foreign": core.foreign,
        "foreign_stream": core.foreign_stream,
        "mode_mismatch": core.mode_mismatch, "key_mismatch": core.key_mismatch,
        "policy": flow, "naks_sent": flow.get("naks_sent", {}),
        "naks_by_signal": flow.get("naks_by_signal", {}),
        "naks_suppressed": flow.get("naks_suppressed", 0),
        "credits_sent": flow.get("credits_sent", 0),
        "repair": None if core.requester is None else core.requester.snapshot(),
        "test_dropped": core.test_dropped,
        "auth": None if core.mac is None else core.mac.snapshot(),
        "feedback_frames": core.feedback_sent, "feedback_bytes": core.feedback_bytes,
        "flow_frames": core.flow_frames, "progress_sent": core.progress.sent,
        "receipts_sent": core.endings.receipts_sent,
        "senders": _with_left(core.tracker.per_sender(), core.endings.left),
        # streams whose sender fell silent without END (core.silence), and the limit
        "senders_silent": len(core.silence.silent), "sender_gone_s": core.silence.gone_s,
        "io_behind_polls": core.io_behind_polls,
        "late_max_ms": round(core.late_max * 1000, 3),
        "naks_not_news": flow.get("naks_not_news", 0),
        "naks_while_paused": flow.get("naks_while_paused", 0),
        "loss_windows": sig.loss.windows, "delay_windows": sig.delay.windows,
        "delay_silent_windows": sig.delay.silent_windows,
        "queueing_ms": round(sig.delay.queueing_s * 1000, 3),
        **core.episodes.snapshot(now=now),
        "timeline": core.timeline.as_dict(t0=core._t0),
    }


def _with_left(rows: list[dict[str, Any]], left: Container[SenderKey]
               ) -> list[dict[str, Any]]:
    """Each stream's row says whether its sender left by BYE without END (``left``)."""
    for row in rows:
        row["left"] = (row["sender"], row["epoch"]) in left
    return rows


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
