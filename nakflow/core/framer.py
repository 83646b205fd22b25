"""A sender's frames, sans-I/O: DATA numbered by sequence, RDATA, HELLO, END, BYE and GONE,
each sealed when a shared key is set. The sequence numbers and frame counts live here."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ..wire.auth import FrameAuth
from ..wire.codec import (
    T_DATA,
    T_RDATA,
    VERSION,
    Bye,
    End,
    Frame,
    Gone,
    Hello,
    encode,
    pack_frame,
    target_prefix,
)
from .batch import FrameBatcher
from .history import SendHistory, Slice

#: HELLOs whose answers a sender still takes for its own: 6.4 s of them at the 0.1 s a
#: waiting sender repeats them (answers come within milliseconds).
HELLO_STAMPS = 64


class Framer:
    """Builds one sender's frames; ``seq`` is the next sequence number."""

    def __init__(self, *, stream: str, sender_id: str, epoch: int, mode: str,
                 mac: FrameAuth | None, wall_offset: float, max_frame_bytes: int,
                 history: SendHistory | None) -> None:
        self.stream, self.sender_id, self.epoch, self.mode = stream, sender_id, epoch, mode
        self.mac, self.wall_offset, self.max_frame_bytes = mac, wall_offset, max_frame_bytes
        self.history = history
        self.seq = self.frames = self.bytes = 0
        self.grtt_us = 0  # the group RTT in µs, as DATA frames advertise it (0: unknown)
        self.said_hello = False
        #: the stamps of the last HELLOs that ask for an answer: an answer echoes one, and
        #: only such an answer is this incarnation's (another with the same sender id, a
        #: Spark task's speculative copy, has stamps of its own, maybe another clock's)
        self.hello_stamps: deque[float] = deque(maxlen=HELLO_STAMPS)

    def data(self, payloads: Sequence[bytes], first: float, now: float,
             startup: bool = False, report_us: int = 0,
             outbox: list[bytes] | None = None) -> bytes:
        """The DATA frame for admitted ``payloads``, stamped ``first`` (its first message's
        time), numbered from ``seq`` and kept in the history (``startup``: it asks for
        PROGRESS, every ``report_us`` µs if not 0); appended to ``outbox`` if given. Raises
        ValueError past ``max_frame_bytes`` (nothing is counted then).

        With ``outbox``, the frame is counted (``seq`` moves on) and handed out in one
        step that nothing can interrupt: a signal's exception (Python runs handlers as a
        call returns) between ``data`` returning and its caller's append lost the frame
        with its seqs, and the next frame, or an idle sender's announcement, made them
        ``lost`` at every receiver. Every call that can raise comes before the first
        change; the append is the last."""
        seq, ts = self.seq, first + self.wall_offset
        fields = [VERSION, T_DATA, self.stream, self.sender_id, self.epoch, seq, ts, payloads,
                  self.grtt_us]
        if startup:
            fields.append(True)
            if report_us:
                fields.append(report_us)
        buf = pack_frame(fields)
        size = len(buf)
        if size > self.max_frame_bytes:
            raise ValueError(f"message of {size} bytes exceeds max_frame_bytes")
        sealed = buf if self.mac is None else self.mac.seal(buf, now=ts)
        if self.history is not None:
            self.history.add(seq, ts, payloads, size, now=now)
        self.seq = seq + len(payloads)
        self.frames += 1
        self.bytes += size
        if outbox is not None:
            outbox.append(sealed)
        return sealed

    def data_from(self, batch: FrameBatcher, now: float, startup: bool, report_us: int,
                  outbox: list[bytes]) -> None:
        """The frame ``batch`` built so far, taken from it, as ``data`` makes it, into
        ``outbox``: taken and handed out in one step (compiled, one call; an exception
        between the take and the frame lost the messages taken)."""
        payloads, first = batch.take(now)
        self.data(payloads, first, now, startup, report_us, outbox)

    def rdata(self, sl: Slice, now: float, *, to: str | None = None) -> bytes:
        """RDATA for ``sl``; ``to``: for that receiver alone (behind its target prefix)."""
        buf = pack_frame([VERSION, T_RDATA, self.stream, self.sender_id, self.epoch, sl.seq,
                          sl.ts, list(sl.payloads)])
        self.bytes += len(buf)
        buf = self._seal(buf, now)
        return buf if to is None else target_prefix(to) + buf

    def hello(self, now: float, *, announce: bool = False) -> bytes:
        """HELLO (``announce``: only to say that every seq below ``seq`` was sent)."""
        self.said_hello = True
        ts = now + self.wall_offset
        if not announce:  # receivers do not answer an announcement
            self.hello_stamps.append(ts)
        return self._frame(Hello(self.stream, self.sender_id, "sender", self.mode, self.epoch,
                                 self.seq, "", ts, announce), now)

    def end(self, now: float) -> bytes:
        """END: every seq below ``seq`` was sent."""
        return self._frame(End(self.stream, self.sender_id, self.epoch, self.seq,
                               now + self.wall_offset), now)

    def bye(self, now: float) -> bytes:
        return self._frame(Bye(self.stream, self.sender_id, "sender", self.epoch,
                               now + self.wall_offset), now)

    def gone(self, lo: int, hi: int, now: float) -> bytes:
        return self._frame(Gone(self.stream, self.sender_id, self.epoch, lo, hi,
                                now + self.wall_offset), now)

    def _frame(self, frame: Frame, now: float) -> bytes:
        return self._seal(encode(frame), now)

    def _seal(self, buf: bytes, now: float) -> bytes:
        return buf if self.mac is None else self.mac.seal(buf, now=now + self.wall_offset)


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
