"""One receiver's whole protocol, sans-I/O (as h11's ``Connection``): frames and ``now``
in; deliveries and feedback frames out.

Sequence accounting, repair requests, fill and NAK timing (or credit), presence and
frame checking (size, codec, seal, replay) live here. The live ``Receiver`` owns the
sockets, the I/O thread and the bounded queue: it hands every frame in, queues what
comes out as deliveries, and tells this object what its queue did (``on_enqueued``,
``on_released``, ``on_dropped``) and how full it is (``poll``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ._auth import FrameAuth, SharedKey
from ._codec import Bye, Data, End, Frame, Gone, Hello, RData, Repair, decode, decode_data, encode
from ._config import AckConfig, NakConfig, RepairConfig
from ._errors import ConfigError
from ._fill import DelayMonitor, LossMonitor, Uniform
from ._frame_checks import InboundChecks
from ._repair import RepairRequester
from ._sender_core import remember
from ._seqtrack import SequenceTracker
from .policies import is_other_modes_feedback, make_receiver_flow

log = logging.getLogger("nakflow.receiver")

#: Socket backlog is part of the inbound queue but ZeroMQ cannot report its size. When
#: every read finds a full chunk waiting, the I/O thread is behind; after being behind for
#: these multiples of the NAK window, the queue counts as 50/75/87/100 % full.
#: An advertised group RTT is followed down only after this long, s (up at once).
GRTT_HOLD_S = 5.0
#: RTTs above this are taken as this (a forged or absurd advertisement), s.
MAX_GRTT_S = 2.0

SATURATION_FILL = ((4.0, 1.0), (2.0, 0.87), (1.0, 0.75), (0.2, 0.5))

Key = tuple[str, int]


class Message(NamedTuple):
    """One delivered message."""

    sender: str
    epoch: int
    seq: int
    ts: float
    payload: bytes


Deliver = Callable[[tuple[Key, Message]], None]


def saturation_fill(behind_s: float, window_s: float) -> float:
    """The fill an I/O thread behind for ``behind_s`` stands for (SATURATION_FILL; 0: none)."""
    return next((fill for windows, fill in SATURATION_FILL if behind_s / window_s >= windows),
                0.0)


class ReceiverCore(InboundChecks):
    """Receiver protocol state. ``on_data`` / ``on_overheard`` take raw frames;
    ``poll`` returns the feedback frames to send (sealed if keyed)."""

    def __init__(self, *, mode: str, stream: str, receiver_id: str, capacity_msgs: int,
                 nak: NakConfig | None = None, ack: AckConfig | None = None,
                 repair: RepairConfig | None = None, rng: Uniform | None = None,
                 drop_duplicates: bool = False, max_streams: int,
                 shared_key: SharedKey | None = None, max_frame_bytes: int,
                 wall_offset: float = 0.0, test_data_loss: float = 0.0) -> None:
        self.mode, self.stream, self.receiver_id = mode, stream, receiver_id
        self.capacity_msgs = capacity_msgs
        self.grtt_s, self._grtt_t = 0.0, -math.inf  # the senders' advertised group RTT
        self.flow = make_receiver_flow(mode, stream=stream, receiver=receiver_id,
                                       capacity_msgs=capacity_msgs, nak=nak, ack=ack, rng=rng)
        rcfg = repair or RepairConfig()
        repairing = mode == "nak" and rcfg.enabled
        self.tracker = SequenceTracker(drop_duplicates=drop_duplicates, max_streams=max_streams,
                                       repair=repairing, late_join=rcfg.late_join)
        self.requester = (RepairRequester(self.tracker, stream, receiver_id, rcfg, rng=rng,
                                          capacity_msgs=capacity_msgs)
                          if repairing else None)
        self.mac = None if shared_key is None else FrameAuth(shared_key)
        if not 0 <= test_data_loss < 1 or (test_data_loss and rng is None):
            raise ConfigError("test_data_loss must lie in [0, 1) and needs an rng")
        self._test_loss = test_data_loss
        self._rng = rng
        self.test_dropped = 0
        self.max_frame_bytes = max_frame_bytes
        self.wall_offset = wall_offset
        ncfg = nak or NakConfig()
        self.window_s = ncfg.window_s
        self.loss = LossMonitor(ncfg.loss_fill if mode == "nak" else (), ncfg.window_s,
                                ncfg.loss_min_msgs, ncfg.loss_min_frames)
        self.delay = DelayMonitor(ncfg.delay_fill if mode == "nak" else (), ncfg.window_s)
        self.ends: dict[Key, int] = {}
        self.left: dict[Key, None] = {}  # heard senders that left without END (aborted)
        self.ends_changed = 0
        self._hellos: dict[Key, None] = {}  # senders heard saying HELLO
        self.node_desc, self._log = f"receiver {receiver_id}", log
        self._init_checks()
        self.frames_in = self.messages_in = 0
        self.dropped = 0
        self.feedback_sent = self.feedback_bytes = 0
        self.saturated_polls = 0
        self.first_data_at: float | None = None
        self._dropped_seen = 0

    # -- frames in -------------------------------------------------------------
    def on_data(self, buf: bytes, deliver: Deliver, *, now: float) -> list[bytes]:
        """A frame from the data channel: new messages go to ``deliver`` as
        ``(key, Message)``; returns frames to send at once (HELLO answers)."""
        self.frames_in += 1
        got = self._open(buf, now, decode_data)
        if got is None:
            return []
        if self._test_loss and (type(got) is tuple or isinstance(got, (Data, RData))):
            assert self._rng is not None
            if self._rng.random() < self._test_loss:
                self.test_dropped += 1
                return []
        if type(got) is tuple:  # DATA, the hot path
            _, sender, epoch, seq, ts, payloads, grtt_us = got
            if grtt_us:
                self._on_grtt(grtt_us, now)
            self._data(sender, epoch, seq, ts, payloads, deliver, now)
            return []
        frame: Frame = got
        if isinstance(frame, Data):  # DATA that the hot path left to the full decoder
            if frame.grtt_us:
                self._on_grtt(frame.grtt_us, now)
            self._data(frame.sender, frame.epoch, frame.seq, frame.ts,
                       frame.payloads, deliver, now)
        elif isinstance(frame, RData):
            self._rdata(frame, deliver)
        elif isinstance(frame, Gone):
            self.tracker.on_gone(frame.sender, frame.epoch, frame.lo, frame.hi)
        elif isinstance(frame, Hello) and frame.role == "sender":
            return [self._on_sender_hello(frame, now)]
        elif isinstance(frame, End):
            self._on_end(frame)
        elif isinstance(frame, Bye) and frame.role == "sender":
            # after END this changes nothing; without END (an aborted sender) its stream
            # stays incomplete and its credit window is freed for the others
            key = (frame.node, frame.epoch)
            self.flow.on_sender_gone(key)
            self.delay.forget(frame.node)
            if key not in self.ends and key not in self.left and (
                    key in self._hellos or key in self.tracker.streams):
                remember(self.left, key, self.tracker.max_streams)
                self.ends_changed += 1
        else:
            self.foreign += 1  # feedback-type frames do not belong on the data channel
        return []

    def _on_grtt(self, grtt_us: int, now: float) -> None:
        """A sender advertised its group RTT: the receiver times its feedback by the
        largest one advertised within GRTT_HOLD_S (several senders: the farthest)."""
        rtt = grtt_us / 1e6
        if rtt >= self.grtt_s or now - self._grtt_t >= GRTT_HOLD_S:
            if rtt != self.grtt_s:
                self.flow.set_rtt(min(rtt, MAX_GRTT_S))
            self.grtt_s, self._grtt_t = rtt, now

    def _data(self, sender: str, epoch: int, seq: int, ts: float,
              payloads: Any, deliver: Deliver, now: float) -> None:
        key = (sender, epoch)
        count = len(payloads)
        if self.first_data_at is None:
            self.first_data_at = now
        self.messages_in += count
        self.delay.on_delay(sender, now + self.wall_offset - ts)
        ranges = self.tracker.on_data(sender, epoch, seq, count)
        self.flow.on_sender(key, seq + count, now=now)
        if len(ranges) == 1 and ranges[0] == (0, count):  # all new: the usual case
            for i, p in enumerate(payloads):
                deliver((key, Message(sender, epoch, seq + i, ts, p)))
            return
        for lo, hi in ranges:
            for i in range(lo, hi):
                deliver((key, Message(sender, epoch, seq + i, ts, payloads[i])))

    def _rdata(self, frame: RData, deliver: Deliver) -> None:
        key = (frame.sender, frame.epoch)
        for lo, hi in self.tracker.on_repair(frame.sender, frame.epoch, frame.seq,
                                             len(frame.payloads)):
            for i in range(lo, hi):
                deliver((key, Message(frame.sender, frame.epoch, frame.seq + i, frame.ts,
                                      frame.payloads[i])))

    def _on_sender_hello(self, frame: Hello, now: float) -> bytes:
        if frame.mode != self.mode:
            self._mismatch(f"sender {frame.node} runs mode {frame.mode!r}")
        # a sender repeats HELLO while it waits (for receivers, or for credit)
        key = (frame.node, frame.epoch)
        self.flow.on_sender(key, frame.next_seq, now=now, waiting=True)
        self.tracker.on_hello(frame.node, frame.epoch, frame.next_seq)
        if key not in self._hellos:
            remember(self._hellos, key, self.tracker.max_streams)
        # the answer echoes the sender's stamp: the sender measures the round trip on
        # its own clock
        return self._frame(Hello(self.stream, self.receiver_id, "receiver", self.mode, 0, 0,
                                 frame.node, frame.ts), now)

    def _on_end(self, frame: End) -> None:
        key = (frame.sender, frame.epoch)
        heard = key in self._hellos or key in self.tracker.streams
        self.tracker.on_end(frame.sender, frame.epoch, frame.final_seq)
        self.flow.on_sender_gone(key)
        self.delay.forget(frame.sender)
        if heard:
            self.ends[key] = frame.final_seq
            if len(self.ends) > self.tracker.max_streams:  # bounded, like the tracker
                del self.ends[next(iter(self.ends))]
            self.ends_changed += 1

    def on_overheard(self, buf: bytes, *, now: float) -> None:
        """Another receiver's feedback frame."""
        frame = self._open(buf, now, decode)
        if frame is None:
            return
        if is_other_modes_feedback(frame, self.mode):
            self._mismatch(f"{type(frame).__name__} from receiver {frame.receiver}")
        if isinstance(frame, Repair):
            if self.requester is not None and frame.receiver != self.receiver_id:
                self.requester.on_overheard(frame, now=now)
            return
        self.flow.on_overheard(frame, now=now)

    # -- what the queue did ----------------------------------------------------
    def on_enqueued(self, key: Key, n: int) -> None:
        self.flow.on_enqueued(key, n)

    def on_released(self, key: Key, n: int) -> None:
        """``n`` messages of ``key`` left the queue (consumed, or dropped as oldest)."""
        self.flow.on_released(key, n)

    def on_dropped(self, msg: Message) -> None:
        """The full queue dropped ``msg`` (delivered by this object before)."""
        self.dropped += 1
        self.tracker.on_dropped(msg.sender, msg.epoch, msg.seq)

    def _frame(self, frame: Frame, now: float) -> bytes:
        buf = encode(frame) if self.mac is None else self.mac.seal(encode(frame),
                                                                    now=now + self.wall_offset)
        self.feedback_sent += 1
        self.feedback_bytes += len(buf)
        return buf

    def hello(self, *, now: float) -> bytes:
        return self._frame(Hello(self.stream, self.receiver_id, "receiver", self.mode, 0, 0, "",
                                 now + self.wall_offset), now)

    def bye(self, *, now: float) -> bytes:
        return self._frame(Bye(self.stream, self.receiver_id, "receiver", 0,
                               now + self.wall_offset), now)

    def seen_depth(self, depth: int, behind_since: float | None, *, now: float) -> int:
        """The fill the policy acts on: ``depth``, full if the queue dropped since the last
        look, or more while the I/O thread has been behind since ``behind_since``."""
        seen = depth
        if self.dropped > self._dropped_seen:  # overflowed since the last look: it was full
            self._dropped_seen = self.dropped
            seen = self.capacity_msgs
        tr = self.tracker  # the path queues or drops what it cannot carry, or the I/O
        fill = max(self.delay.observe(now=now), self.loss.observe(  # thread is behind:
            tr.gap_msgs, tr.arrived, now=now, gap_events=tr.gap_events, frames=tr.frames))
        if behind_since is not None and (sat := saturation_fill(now - behind_since,
                                                                  self.window_s)):
            self.saturated_polls += 1
            fill = max(fill, sat)
        return max(seen, math.ceil(fill * self.capacity_msgs)) if fill else seen  # as if full

    def poll(self, seen_depth: int, *, now: float) -> list[bytes]:
        """Feedback due at ``now`` with the queue seen ``seen_depth`` full."""
        frames: list[Frame] = list(self.flow.poll(seen_depth, now=now))
        if self.requester is not None:
            frames += self.requester.poll(seen_depth / self.capacity_msgs, now=now)
        return [self._frame(f, now) for f in frames]

    def next_deadline(self) -> float | None:
        a = self.flow.next_deadline()
        b = self.requester.next_deadline() if self.requester is not None else None
        return b if a is None else a if b is None else min(a, b)

    def snapshot(self) -> dict[str, Any]:
        """Accounting, feedback and policy figures, JSON-ready (see ``Receiver.snapshot``)."""
        flow = self.flow.snapshot()
        totals = self.tracker.totals()
        return {
            "frames": self.frames_in, "dropped": self.dropped,
            **{k: totals[k] for k in ("received", "lost", "repaired", "beyond_history",
                                      "missed_before_join", "duplicates")},
            "dropped_unrepaired": totals["dropped"], "repair_redundant": totals["redundant"],
            "streams_evicted": self.tracker.evicted,
            "malformed": self.malformed,
            "foreign": self.foreign,
            "mode_mismatch": self.mode_mismatch, "key_mismatch": self.key_mismatch,
            "policy": flow, "naks_sent": flow.get("naks_sent", {}),
            "naks_suppressed": flow.get("naks_suppressed", 0),
            "credits_sent": flow.get("credits_sent", 0),
            "repair": None if self.requester is None else self.requester.snapshot(),
            "test_dropped": self.test_dropped,
            "auth": None if self.mac is None else self.mac.snapshot(),
            "feedback_frames": self.feedback_sent, "feedback_bytes": self.feedback_bytes,
            "senders": self.tracker.per_sender(),
            "io_saturated_polls": self.saturated_polls,
            "loss_windows": self.loss.windows,
            "delay_windows": self.delay.windows,
            "delay_silent_windows": self.delay.silent_windows,
            "queueing_ms": round(self.delay.queueing_s * 1000, 3),
        }


from ._speedups import use_compiled  # noqa: E402

use_compiled(globals())
