"""One sender's whole protocol, sans-I/O (as h11's ``Connection``): frames and ``now`` in,
frames out.

Admission (the mode's policy), framing and sequence numbers, the history and
repairs, presence (HELLO/END/BYE), feedback handling and sealing all live here.
The live ``Sender`` only moves the bytes this object produces and consumes over
ZeroMQ and waits as told; the simulator can drive the same object.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from ._auth import FrameAuth, SharedKey
from ._codec import (
    T_DATA,
    T_RDATA,
    VERSION,
    Bye,
    End,
    Gone,
    Hello,
    Repair,
    decode,
    encode,
    pack_frame,
)
from ._config import AckConfig, NakConfig, RepairConfig
from ._frame_checks import InboundChecks
from ._history import SendHistory, Slice
from ._timeline import Timeline
from .policies import AckFlow, NakFlow, is_other_modes_feedback, make_sender_flow

log = logging.getLogger("nakflow.sender")

#: Receivers remembered by id for presence (HELLO); past it the least recently heard is
#: forgotten, so made-up ids cannot grow memory.
MAX_PEERS = 4096
REPAIR_CHUNK_MSGS = 256  # repairs admitted per call, at most
MAX_RTT_S = 10.0  # a longer "round trip" is a wrong or forged echo
RTT_PEERS = 64  # the group RTT is the largest sample of this many receivers, at most


def remember(peers: dict[Any, None], key: Any, cap: int = MAX_PEERS) -> None:
    """Insert ``key`` as the most recent; past ``cap`` forget the least recent."""
    peers.pop(key, None)
    peers[key] = None
    if len(peers) > cap:
        del peers[next(iter(peers))]


class SenderCore(InboundChecks):
    """Sender protocol state. Every frame it returns is ready to go (sealed if keyed)."""

    def __init__(self, *, mode: str, stream: str, sender_id: str, epoch: int,
                 nak: NakConfig | None = None, ack: AckConfig | None = None,
                 repair: RepairConfig | None = None, max_rate_msgs: float | None = None,
                 shared_key: SharedKey | None = None, max_frame_bytes: int,
                 wall_offset: float = 0.0, timeline_interval_s: float = 0.05) -> None:
        self.mode, self.stream, self.sender_id, self.epoch = mode, stream, sender_id, epoch
        self.flow = make_sender_flow(mode, stream=stream, sender=sender_id, epoch=epoch,
                                     nak=nak, ack=ack, max_rate_msgs=max_rate_msgs)
        rcfg = repair or RepairConfig()
        self.history = SendHistory(rcfg) if mode == "nak" and rcfg.enabled else None
        self._repairs: deque[Slice] = deque()
        self._repair_msgs = 0
        self._gone: list[bytes] = []
        self.last_repair_request = -1e300
        self.mac = None if shared_key is None else FrameAuth(shared_key)
        self.max_frame_bytes = max_frame_bytes
        self.wall_offset = wall_offset
        self.seq = 0
        self.frames = 0
        self.bytes = 0
        self.repair_frames = 0
        self.receivers_heard: dict[str, None] = {}  # present now (left: BYE)
        self.receivers_seen = 0  # distinct receivers ever heard (up to MAX_PEERS)
        self._seen: dict[str, None] = {}
        self.echoed: dict[str, None] = {}
        self.said_hello = False
        self._rtt_of: dict[str, float] = {}  # receiver -> latest RTT sample, oldest first
        self.rtt_s: float | None = None
        self.grtt_us = 0  # rtt_s in µs, as DATA frames advertise it (0: not measured)
        self.node_desc, self._log = f"sender {sender_id}", log
        self._init_checks()
        self.feedback_frames = self.feedback_bytes = 0
        self.repair_requests = 0
        self.timeline = Timeline(("sent", "rate_limit", "credit", "blocked_s"),
                                 interval_s=timeline_interval_s)

    # -- frames out ------------------------------------------------------------
    def _seal(self, buf: bytes, now: float) -> bytes:
        return buf if self.mac is None else self.mac.seal(buf, now=now + self.wall_offset)

    def data(self, payloads: Sequence[bytes], *, now: float) -> bytes:
        """The DATA frame for ``payloads`` (admitted before), numbered from ``self.seq``.

        Raises ValueError if it exceeds ``max_frame_bytes`` (nothing is counted then).
        """
        seq, ts = self.seq, now + self.wall_offset
        buf = pack_frame([VERSION, T_DATA, self.stream, self.sender_id, self.epoch, seq, ts,
                          payloads, self.grtt_us])
        size = len(buf)
        if size > self.max_frame_bytes:
            raise ValueError(f"message of {size} bytes exceeds max_frame_bytes")
        if self.history is not None:
            self.history.add(seq, ts, payloads, size, now=now)
        self.seq = seq + len(payloads)
        self.frames += 1
        self.bytes += size
        return buf if self.mac is None else self.mac.seal(buf, now=ts)

    def repairs_due(self, *, now: float) -> list[bytes]:
        """GONE for what was asked and is no longer held, and RDATA for as many pending
        repairs as the policy admits at ``now`` (repairs obey the same rate limit)."""
        out, self._gone = self._gone, []
        if not self._repairs:
            return out
        k = self.flow.admit_up_to(min(self._repair_msgs, REPAIR_CHUNK_MSGS), now=now)
        while k and self._repairs:
            sl = self._repairs.popleft()
            n = len(sl.payloads)
            if n > k:  # send part now, the rest when admitted
                self._repairs.appendleft(Slice(sl.seq + k, sl.ts, sl.payloads[k:]))
                sl, n = Slice(sl.seq, sl.ts, sl.payloads[:k]), k
            k -= n
            self._repair_msgs -= n
            if self.history is not None:
                self.history.mark_sent(sl.seq, now=now)
            buf = pack_frame([VERSION, T_RDATA, self.stream, self.sender_id, self.epoch,
                              sl.seq, sl.ts, list(sl.payloads)])
            self.repair_frames += 1
            self.bytes += len(buf)
            out.append(self._seal(buf, now))
        return out

    @property
    def repairs_pending(self) -> int:
        """Messages asked for and not yet re-sent."""
        return self._repair_msgs

    def hello(self, *, now: float) -> bytes:
        self.said_hello = True
        return self._seal(encode(Hello(self.stream, self.sender_id, "sender", self.mode,
                                       self.epoch, self.seq, "", now + self.wall_offset)), now)

    def end(self, *, now: float) -> bytes:
        """END: every seq below ``self.seq`` was sent."""
        return self._seal(encode(End(self.stream, self.sender_id, self.epoch, self.seq,
                                     now + self.wall_offset)), now)

    def bye(self, *, now: float) -> bytes:
        return self._seal(encode(Bye(self.stream, self.sender_id, "sender", self.epoch,
                                     now + self.wall_offset)), now)

    def linger_wait(self, start: float, *, now: float) -> float | None:
        """After END (sent at ``start``): how long from ``now`` to go on answering repair
        requests, or None when done: receivers ask for a lost tail only once END shows
        it, so wait until none came for ``linger_quiet_s`` (three ``retry_s`` if one came
        within the last second), at most ``linger_max_s``."""
        if self.history is None or self.seq == 0:
            return None
        cfg = self.history.config
        end = start + cfg.linger_max_s
        quiet = (cfg.linger_quiet_s if now - self.last_repair_request > 1.0
                 else max(cfg.linger_quiet_s, 3 * cfg.retry_s))
        quiet_until = max(start, self.last_repair_request) + quiet
        if now >= end or (now >= quiet_until and not self.repairs_pending):
            return None
        return max(0.0, min(quiet_until, end) - now)

    # -- frames in -------------------------------------------------------------
    def on_feedback(self, buf: bytes, *, now: float) -> None:
        """A frame from the feedback channel; bad ones are counted and dropped."""
        self.feedback_bytes += len(buf)
        frame = self._open(buf, now, decode)
        if frame is None:
            return
        self.feedback_frames += 1
        if isinstance(frame, Hello):
            if frame.role == "receiver":
                remember(self.receivers_heard, frame.node)
                if frame.node not in self._seen:
                    remember(self._seen, frame.node)
                    self.receivers_seen += 1
                if frame.echo == self.sender_id:
                    remember(self.echoed, frame.node)
                    self._on_rtt_sample(frame.node, now + self.wall_offset - frame.ts)
                if frame.mode != self.mode:
                    self._mismatch(f"receiver {frame.node} runs mode {frame.mode!r}")
        elif isinstance(frame, Bye):
            if frame.role == "receiver":
                self.receivers_heard.pop(frame.node, None)
                if isinstance(self.flow, AckFlow):
                    self.flow.on_receiver_bye(frame.node)
        elif isinstance(frame, Repair):
            if (frame.sender, frame.epoch) == (self.sender_id, self.epoch):
                self._on_repair(frame, now)
            return
        elif is_other_modes_feedback(frame, self.mode):
            self._mismatch(f"{type(frame).__name__} feedback heard by a {self.mode!r} sender")
        self.flow.on_feedback(frame, now=now)

    def _on_rtt_sample(self, node: str, rtt_s: float) -> None:
        """A receiver answered our HELLO after ``rtt_s``: the group RTT is the largest of
        the latest samples of the RTT_PEERS receivers heard last (implausible ones, e.g.
        a forged echo, are left out)."""
        if not 0.0 <= rtt_s <= MAX_RTT_S:
            return
        rtts = self._rtt_of
        rtts.pop(node, None)
        rtts[node] = rtt_s
        if len(rtts) > RTT_PEERS:
            del rtts[next(iter(rtts))]
        self.rtt_s = max(rtts.values())
        self.grtt_us = round(self.rtt_s * 1e6)
        if isinstance(self.flow, NakFlow):
            self.flow.controller.set_rtt(self.rtt_s)

    def _on_repair(self, frame: Repair, now: float) -> None:
        self.repair_requests += 1
        self.last_repair_request = now
        if self.history is None:
            return
        slices, gone = self.history.lookup(frame.ranges, now=now)
        pending_cap = self.history.config.history_msgs
        for sl in slices:
            if self._repair_msgs + len(sl.payloads) > pending_cap:
                break  # asked for more than the history holds: the rest is asked again
            self._repairs.append(sl)
            self._repair_msgs += len(sl.payloads)
        self._gone += [self._seal(encode(Gone(self.stream, self.sender_id, self.epoch, lo, hi,
                                              now + self.wall_offset)), now)
                       for lo, hi in gone]

    # -- metrics ---------------------------------------------------------------
    def sample(self, now: float, blocked_s: float) -> None:
        if self.timeline.due(now):
            rate, credit = self.flow.limits(now=now)
            self.timeline.sample(now, self.seq, rate, credit, blocked_s)

    def snapshot(self) -> dict[str, Any]:
        flow = self.flow.snapshot()
        return {
            "rate_limit": flow.get("rate_limit"),
            "naks_received": flow.get("naks_received", {}),
            "cuts": flow.get("cuts", 0),
            "receivers": flow.get("receivers") if self.mode == "ack"
            else len(self.receivers_heard),
            "receivers_seen": self.receivers_seen,
            "rtt_ms": None if self.rtt_s is None else round(self.rtt_s * 1000, 3),
            "feedback_frames": self.feedback_frames,
            "feedback_bytes": self.feedback_bytes,
            "feedback_malformed": self.malformed,
            "feedback_foreign": self.foreign,
            "mode_mismatch": self.mode_mismatch, "key_mismatch": self.key_mismatch,
            "repair": None if self.history is None else {
                "requests": self.repair_requests, "frames": self.repair_frames,
                "pending": self._repair_msgs, **self.history.snapshot()},
            "auth": None if self.mac is None else self.mac.snapshot(),
            "policy": flow,
        }


from ._speedups import use_compiled  # noqa: E402

use_compiled(globals())
