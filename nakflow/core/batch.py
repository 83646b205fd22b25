"""Natural batching, sans-I/O: messages admitted one by one are coalesced into DATA frames.

``send(msg)`` in a loop is how people use a messaging API; one DATA frame per message
makes every layer below (framing, the ZeroMQ pipe, the receiver's per-frame work) pay per
message. Like Kafka's producer (``linger.ms``, ``batch.size``) and Aeron's "smart
batching", the sender appends each admitted message to the frame being built and the
frame goes out when

* it holds ``max_msgs`` messages or ``max_bytes`` payload bytes (the bounds),
* its first message has waited ``linger_s`` (the linger bound), checked on every call
  and by the live sender's timer,
* the sender is about to wait (for rate or credit), flushes, polls or closes,
* or the sender was idle: a message that finds the last frame sent at least ``linger_s``
  ago goes out at once, so a trickle pays no linger at all.

Admission by the rate limit or credit stays per message and happens before ``add``:
the batcher only decides when admitted messages leave. ``linger_s`` 0 switches it off
(one message a frame). The frame's timestamp is its first message's, so measured
latency includes the linger.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError

#: What ``FrameBatcher.offer`` says.
ADDED, FIRST, SEND, NO_ROOM = 0, 1, 2, 3
#: msgpack's cost of one payload inside a DATA frame's list (bin 32 header), bytes.
PER_PAYLOAD_OVERHEAD = 5
#: A DATA frame's fixed fields besides the stream and sender names, at most, bytes.
FRAME_OVERHEAD = 64


def check_payload(payload: object) -> None:
    """Raises TypeError unless ``payload`` is bytes, bytearray or memoryview: msgpack
    would put a str (or an int) into the frame as it is, every receiver would count the
    frame malformed and drop it with the messages it shares it with, and its repairs too
    (one str among 2,000 sends cost 231 messages, ``beyond_history``)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        hint = ": encode it first, e.g. text.encode()" if isinstance(payload, str) else ""
        raise TypeError("a payload must be bytes, bytearray or memoryview, not "
                        f"{type(payload).__name__}{hint}")


def frozen(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` as it is now, as bytes: a bytearray or memoryview is copied (checked
    first, ``check_payload``), since the frame being built and the history keep what
    they are given, and an application that reuses its buffer changed what went out
    (a message sent, then its buffer refilled within the linger, left as the new
    content) and what a repair re-sent. bytes are kept as they are."""
    if type(payload) is bytes:
        return payload
    check_payload(payload)
    return bytes(payload)


class FrameBatcher:
    """The frame being built: payloads admitted and not yet sent, and when to send them.

    Args:
        linger_s: longest a message waits for company, s (0: no batching).
        max_msgs, max_bytes: bounds of one frame (payload bytes).
        max_frame_bytes: the receivers' frame bound; with ``names_bytes`` (stream and
            sender id) it caps ``max_bytes`` so that a frame the batcher builds always
            fits.
    """

    def __init__(self, *, linger_s: float, max_msgs: int, max_bytes: int,
                 max_frame_bytes: int, names_bytes: int) -> None:
        if linger_s < 0:
            raise ConfigError("linger_s must be >= 0")
        if max_msgs < 1 or max_bytes < 1:
            raise ConfigError("batch bounds must be >= 1")
        room = max_frame_bytes - FRAME_OVERHEAD - names_bytes
        if room <= PER_PAYLOAD_OVERHEAD:
            raise ConfigError("max_frame_bytes leaves no room for a payload")
        self.linger_s = linger_s
        self.max_msgs = max_msgs
        self.max_bytes = min(max_bytes, room)
        #: payload bytes (each with PER_PAYLOAD_OVERHEAD) a frame may hold at most
        self.room = room
        #: the largest payload that fits a frame of its own, bytes
        self.max_payload = room - PER_PAYLOAD_OVERHEAD
        self._names_bytes = names_bytes
        #: the receiver whose frame bound is below this sender's (``narrow``), and it
        self.bound_by: tuple[str, int] | None = None
        self.payloads: list[bytes] = []
        self.nbytes = 0
        self.first_at = 0.0  # when the frame's first message was added
        self.last_out = -1e300  # when the last frame left

    @property
    def enabled(self) -> bool:
        return self.linger_s > 0

    def __len__(self) -> int:
        return len(self.payloads)

    def narrow(self, max_frame_bytes: int, receiver: str) -> None:
        """``receiver`` takes frames of ``max_frame_bytes`` at most (its HELLO said so):
        no frame is built bigger, if that is below the bound so far."""
        room = max_frame_bytes - FRAME_OVERHEAD - self._names_bytes
        if room >= self.room or room <= PER_PAYLOAD_OVERHEAD:
            return
        self.room, self.max_payload = room, room - PER_PAYLOAD_OVERHEAD
        self.max_bytes = min(self.max_bytes, room)
        self.bound_by = (receiver, max_frame_bytes)

    def check(self, payload: bytes) -> None:
        """Raises TypeError for a payload that is not bytes-like (``check_payload``),
        ValueError for one no frame can hold."""
        if type(payload) is not bytes:
            check_payload(payload)
        if len(payload) > self.max_payload:
            raise ValueError(self._too_big(len(payload)))

    def _too_big(self, size: int) -> str:
        if self.bound_by is not None:
            receiver, bound = self.bound_by
            return (f"message of {size:,} bytes is more than receiver {receiver} takes: its "
                    f"frames hold at most {bound:,} bytes, {self.max_payload:,} of one "
                    "message (its ReceiverConfig.max_frame_bytes, receive --max-frame-bytes)")
        return (f"message of {size:,} bytes exceeds max_frame_bytes: a frame holds at most "
                f"{self.max_payload:,} bytes of one message (SenderConfig.max_frame_bytes, "
                "--max-frame-bytes; every receiver's must allow the frame too)")

    def offer(self, payload: bytes, now: float) -> int:
        """Offer an admitted payload. Returns ADDED; FIRST (added as the frame's first
        message: the linger starts); SEND (added, and the frame should leave now: a bound
        is reached, its linger is over, or the sender was idle); or NO_ROOM (not added:
        send the frame first, it would break the byte bound). Raises ValueError for a
        payload no frame can hold (nothing changes then). A payload that is not bytes is
        kept as a copy (``frozen``)."""
        if type(payload) is not bytes:
            payload = frozen(payload)
        size = len(payload) + PER_PAYLOAD_OVERHEAD
        p = self.payloads
        if p:
            nbytes = self.nbytes + size
            if nbytes > self.max_bytes:
                self.check(payload)
                return NO_ROOM
            p.append(payload)
            self.nbytes = nbytes
            if (len(p) >= self.max_msgs or nbytes >= self.max_bytes
                    or now - self.first_at >= self.linger_s):
                return SEND
            return ADDED
        self.check(payload)
        p.append(payload)
        self.nbytes, self.first_at = size, now
        if now - self.last_out >= self.linger_s or self.max_msgs == 1 or size >= self.max_bytes:
            return SEND
        return FIRST

    def settle(self, r: int, payload: bytes, now: float,
               send_frame: Callable[[float], None]) -> bool:
        """Act on what ``offer(payload, now)`` said (``r``, not ADDED): send the frame with
        ``send_frame`` when it should leave (NO_ROOM: send, then offer again). True when
        the payload began a new frame, whose linger timer the caller arms."""
        if r == NO_ROOM:
            send_frame(now)
            r = self.offer(payload, now)
        if r == SEND:
            send_frame(now)
        return r == FIRST

    def deadline(self) -> float | None:
        """When the frame being built must leave (None: nothing waits)."""
        return self.first_at + self.linger_s if self.payloads else None

    def take(self, now: float) -> tuple[list[bytes], float]:
        """The payloads to send and their frame's timestamp; the batcher is empty after."""
        p, first = self.payloads, self.first_at
        self.payloads, self.nbytes, self.last_out = [], 0, now
        return p, first


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
