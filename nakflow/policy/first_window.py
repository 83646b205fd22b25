"""NAK's first window (``policy.startup``), sized as the first message goes: in bytes of
that message, within the room the receivers' HELLO answers said. Sans-I/O."""

from __future__ import annotations

__all__ = ["MSG_OVERHEAD_BYTES", "FirstWindow"]

#: A message's cost on the wire beyond its payload, for the first window in bytes: its
#: msgpack header and its share of the frame's and the transport's headers.
MSG_OVERHEAD_BYTES = 16


class FirstWindow:
    """``window_bytes`` of the first message's size (``size_hint``), within half the least
    room a receiver's HELLO answer said (``on_hello``), where every receiver that answered
    said its room (0: one did not, an older receiver). ``size`` says it once, as the first
    message goes; what comes after counts no more.

    Half the least room: two senders starting together fill no queue past the share a
    start may fill. A window of 16 to four receivers on loopback took 50 ms to reach
    5,000 messages a round trip (a round trip of PROGRESS is 1-8 ms there, five processes
    on two cores) while ACK's credit let 10,000 go at once: NAK sent 15,000-17,000
    messages of 100 B in the first 0.1 s, ACK 29,000; with 16 KB (141 messages of 100 B)
    19,000-21,000. A slow link is no worse off: 16 KB is the 16 messages of 1 KB it
    took before.

    ``local``: the path stays on this host (``SenderConfig.host_local``): no link lies
    between the sender and its receivers' processes, only their sockets and queues,
    whose room bounds a window as ACK's credit does; the window is half the least room,
    whatever 16 KB would be (4 x 10,000-message queues: 2,000, where 16 KB is 16 messages
    of 1 KB)."""

    def __init__(self, window_bytes: int | None, *, local: bool = False) -> None:
        self.window_bytes = window_bytes  # None: the window in messages as given
        self.local = local
        self.room: int | None = None  # the least room said (0: one did not say)
        self.msg_bytes: int | None = None  # the first message's payload
        self.closed = False  # sized: later words count no more

    def on_hello(self, room: int) -> None:
        """A receiver answered the sender's HELLO, saying ``room`` (0: not said)."""
        if not self.closed:
            self.room = room if self.room is None else min(self.room, room)

    def size_hint(self, msg_bytes: int) -> None:
        """The first message's payload, bytes (before it is admitted)."""
        if not self.closed and self.msg_bytes is None:
            self.msg_bytes = max(0, msg_bytes)

    def size(self, most: int) -> int | None:
        """The first window, msgs, ``most`` at most (None: nothing to size it by); once."""
        self.closed = True
        room, size = self.room, self.msg_bytes
        if not self.window_bytes or size is None or not room:
            return None
        if self.local:
            return min(room // 2, most)
        return min(self.window_bytes // (size + MSG_OVERHEAD_BYTES), room // 2, most)
