"""What both protocol cores share: checking an inbound frame (size, seal, codec, stream,
replay: a frame that fails is counted as ``malformed``, ``foreign`` or by the MAC, and
dropped; the first problem of each kind is logged once), the outbox of frames to send,
and the queue of events for the driver."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import ProtocolError
from ..events import Event, Mismatch
from .auth import AuthError, FrameAuth, looks_sealed, origin, unseal
from .codec import decode

MAX_EVENTS = 1024  # events kept for the driver; older ones are dropped


def _is_frame(buf: bytes) -> bool:
    """True if unsealed ``buf`` is a well-formed frame (a peer without a key, not junk)."""
    try:
        decode(buf)
    except ProtocolError:
        return False
    return True


class Endpoint:
    """Base of SenderCore and ReceiverCore: ``_open(buf, now, decoder)`` checks a frame;
    ``outbox`` and ``frames_to_send``; ``_event`` and ``next_event``."""

    stream: str
    mode: str
    mac: FrameAuth | None
    max_frame_bytes: int
    wall_offset: float
    node_desc: str  # "sender" or "receiver", for the log
    _log: logging.Logger

    def _init_endpoint(self) -> None:
        self.outbox: list[bytes] = []
        self._events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.malformed = 0
        self.foreign = 0
        #: the first other stream a frame was heard of (a peer with another --stream)
        self.foreign_stream: str | None = None
        #: frames from a peer configured differently: another mode, or another key (or
        #: none where this node has one, or one where it has none)
        self.mode_mismatch = 0
        self.key_mismatch = 0
        #: the first frame refused for its shared key, in words (None: none yet): a peer
        #: with another key, or none, or a forger (it cannot be told which)
        self.key_mismatch_detail: str | None = None
        self._warned: set[str] = set()

    def _open(self, buf: bytes, now: float, decoder: Callable[..., Any]) -> Any:
        """The decoded frame (DATA from ``decode_data``'s fast path as its tuple), or
        None for a frame to drop."""
        auth = self.mac
        try:
            body, counter = unseal(auth, buf)
            got = decoder(body, self.max_frame_bytes)
        except AuthError as exc:
            if exc.reason == "unknown_key" or (exc.reason == "unsigned" and _is_frame(buf)):
                self.key_mismatch += 1  # a real peer with another key, or with none
                self.key_mismatch_detail = self.key_mismatch_detail or (
                    "frames sealed with another shared key" if exc.reason == "unknown_key"
                    else "unsealed frames (from a peer without a shared key)")
            self._warn("auth", f"frame refused: {exc} (counted in snapshot()['auth'])")
            return None
        except ProtocolError:
            self.malformed += 1
            if auth is None and looks_sealed(buf):
                self.key_mismatch += 1
                self.key_mismatch_detail = self.key_mismatch_detail or (
                    f"frames sealed with a shared key, and this {self.node_desc.split()[0]} "
                    "has none")
                self._warn("auth", f"frames are sealed with a shared key, but this "
                           f"{self.node_desc} has none (shared_key=)")
            return None
        if type(got) is tuple:  # DATA from decode_data's fast path
            stream, node = got[0], (got[1], got[2])
        else:
            stream, node = got.stream, None
        if stream != self.stream:
            self.foreign += 1
            if self.foreign_stream is None:  # a name the codec checked (1..256 chars)
                self.foreign_stream = stream
            return None
        if auth is not None and not auth.admit(node or origin(got), counter,
                                               now=now + self.wall_offset):
            return None  # a replay, or too old: counted by the MAC
        return got

    def frames_to_send(self) -> list[bytes]:
        """The frames due, in order; the core forgets them."""
        out, self.outbox = self.outbox, []
        return out

    def unsent(self, frames: list[bytes]) -> None:
        """Frames of ``frames_to_send`` the driver did not send (an exception stopped it
        part way): they are due again, first."""
        if frames:
            self.outbox[:0] = frames

    def next_event(self) -> Event | None:
        """The oldest event not yet taken (None: none)."""
        return self._events.popleft() if self._events else None

    def _event(self, event: Event) -> None:
        self._events.append(event)

    def _mismatch(self, what: str) -> None:
        """A peer runs another mode: counted, an event the first time, logged once."""
        if not self.mode_mismatch:
            self._event(Mismatch("mode", what))
        self.mode_mismatch += 1
        self._warn("mode", what)

    def _warn(self, kind: str, what: str) -> None:
        """Log ``what`` the first time a ``kind`` of problem shows (at most 256 kinds)."""
        if kind not in self._warned and len(self._warned) < 256:
            self._warned.add(kind)
            self._log.warning("stream %r (%s): %s%s", self.stream, self.node_desc, what,
                              "; check every side's mode" if kind == "mode" else "")
