"""Shared-key frame authentication (HMAC-SHA256), for where CURVE cannot go.

CURVE secures tcp and ipc, but not multicast (epgm/pgm): anyone who can reach the
groups can publish a NAK that throttles every sender, a CREDIT that lets one
overrun a receiver, or DATA that receivers deliver. With a ``SharedKey`` every
frame on both channels is sealed, and checked before it is decoded or acted on:

    sealed = 0xC1 | 0x01 | key id (4) | counter (8, big-endian) | frame | tag (16)

``0xC1`` is the one byte msgpack never uses, so a node without the key counts a
sealed frame as malformed instead of misreading it. ``tag`` is HMAC-SHA256 over
everything before it, truncated to 128 bits. ``key id`` names the key (so keys can
be rotated: a verifier accepts the current key and any listed as ``accept``).

Replays: ``counter`` is the sealing node's wall clock in microseconds, bumped to
stay strictly above the last one it used (so it rises with every frame, and a
restarted node starts above its last life). A verifier accepts a frame only if its
counter is above the last one it accepted from that node (and, for senders, that
epoch), and only if the counter, read as a time, is within ``max_age_s`` of the
verifier's own clock. A frame recorded and played back later is therefore refused,
and counted.

What it does not do: it does not encrypt, and every holder of the key can speak
for any node. Sans-I/O: no clock, no sockets; ``now`` comes in as an argument.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, ProtocolError
from .codec import (
    Bye,
    Credit,
    Data,
    End,
    Frame,
    Gone,
    Hello,
    Nak,
    Progress,
    RData,
    Receipt,
    Repair,
)

MAGIC = 0xC1  # "never used" in msgpack
SCHEME = 0x01  # HMAC-SHA256/128 with a 64-bit counter
KEY_ID_BYTES = 4
COUNTER_BYTES = 8
TAG_BYTES = 16
HEADER_BYTES = 2 + KEY_ID_BYTES + COUNTER_BYTES
OVERHEAD_BYTES = HEADER_BYTES + TAG_BYTES
MIN_KEY_BYTES = 16
#: Nodes whose last counter a verifier remembers; past this the least recently heard
#: is forgotten (it could then be replayed once, within ``max_age_s``).
MAX_NODES = 4096


class AuthError(ProtocolError):
    """A frame is not sealed with a key this node accepts, or its tag is wrong.

    ``reason``: ``unsigned``, ``unknown_key`` or ``bad_tag``."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


def unseal(auth: FrameAuth | None, buf: bytes) -> tuple[bytes, int]:
    """(frame bytes, counter) to decode: ``buf`` itself (counter 0) on a node without a
    key, else ``auth.open(buf)`` (AuthError if it is not sealed with a key we hold)."""
    return (buf, 0) if auth is None else auth.open(buf)


def looks_sealed(buf: bytes) -> bool:
    """True if ``buf`` starts like a sealed frame (a hint for a node that has no key)."""
    return buf[:1] == bytes((MAGIC,))


def origin(frame: Frame) -> tuple[str, int]:
    """The node that sent ``frame``, as the replay check keys it: (node id, epoch).

    A sender's incarnations (epochs) count apart, so two attempts of one Spark task
    running at once do not refuse each other's frames; receivers use epoch 0.
    """
    if isinstance(frame, (Data, End, RData, Gone)):
        return frame.sender, frame.epoch
    if isinstance(frame, (Hello, Bye)):
        return frame.node, frame.epoch
    if isinstance(frame, (Nak, Credit, Repair, Receipt, Progress)):
        return frame.receiver, 0
    raise TypeError(f"not a frame: {frame!r}")


def _hmac_states(key: bytes) -> tuple[Any, Any]:
    """SHA-256 states after the HMAC inner and outer pads of ``key`` (RFC 2104): copying
    them per frame gives HMAC-SHA256 at a third of ``hmac.digest``'s cost."""
    block = hashlib.sha256(key).digest() if len(key) > 64 else key
    block = block.ljust(64, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in block)),
            hashlib.sha256(bytes(b ^ 0x5C for b in block)))


def _tag(states: tuple[Any, Any], msg: bytes) -> bytes:
    inner, outer = states[0].copy(), states[1].copy()
    inner.update(msg)
    outer.update(inner.digest())
    return outer.digest()[:TAG_BYTES]  # type: ignore[no-any-return]


def key_id(key: bytes) -> bytes:
    """The 4-byte public name of a key (a hash of it; says nothing about the key)."""
    return hashlib.sha256(b"nakflow key id\x00" + key).digest()[:KEY_ID_BYTES]


@dataclass(frozen=True)
class SharedKey:
    """A secret every node of a stream holds (``nakflow keygen --shared`` makes one).

    Args:
        secret: the key, at least 16 bytes (keygen writes 32 random ones).
        accept: older keys still accepted on input while a new one is rolled out.
        max_age_s: refuse frames whose timestamp is further than this from the
            verifier's clock (hosts' clocks must agree this well), s. None: no check.
    """

    secret: bytes = field(repr=False)
    accept: tuple[bytes, ...] = field(default=(), repr=False)
    max_age_s: float | None = 300.0

    def __post_init__(self) -> None:
        for k in (self.secret, *self.accept):
            if not isinstance(k, bytes) or len(k) < MIN_KEY_BYTES:
                raise ConfigError(f"a shared key must be at least {MIN_KEY_BYTES} bytes")
        age = self.max_age_s
        if age is not None and not (age > 0 and math.isfinite(age)):
            raise ConfigError("max_age_s must be > 0 (or None)")
        object.__setattr__(self, "accept", tuple(self.accept))

    @classmethod
    def parse(cls, text: str, **kwargs: object) -> SharedKey:
        """A key from the hex text ``nakflow keygen --shared`` writes."""
        try:
            secret = bytes.fromhex(text.strip())
        except ValueError:
            raise ConfigError("a shared key file holds the key as hex digits") from None
        return cls(secret, **kwargs)  # type: ignore[arg-type]


class FrameAuth:
    """Seals this node's frames and opens other nodes' (one per node and channel set).

    Counts what it refuses: ``unsigned``, ``unknown_key``, ``bad_tag`` (in ``open``)
    and ``replayed``, ``stale`` (in ``admit``).
    """

    def __init__(self, key: SharedKey, *, max_nodes: int = MAX_NODES) -> None:
        self.key = key
        self._states = _hmac_states(key.secret)
        self._prefix = bytes((MAGIC, SCHEME)) + key_id(key.secret)
        self._keys = {key_id(k): _hmac_states(k) for k in (*key.accept, key.secret)}
        self._counter = 0
        self._last: dict[tuple[str, int], int] = {}
        self.max_nodes = max_nodes
        self.sealed = 0
        self.opened = 0
        self.unsigned = 0
        self.unknown_key = 0
        self.bad_tag = 0
        self.replayed = 0
        self.stale = 0

    def seal(self, frame: bytes, *, now: float) -> bytes:
        """The frame with header and tag. ``now``: this node's wall clock (s since 1970)."""
        counter = max(self._counter + 1, int(now * 1e6))
        if not 0 <= counter < 1 << 63:
            raise ConfigError(f"wall clock out of range: {now!r}")
        self._counter = counter
        self.sealed += 1
        msg = self._prefix + counter.to_bytes(COUNTER_BYTES, "big") + frame
        return msg + _tag(self._states, msg)

    def open(self, buf: bytes) -> tuple[bytes, int]:
        """(frame bytes, counter) of a sealed frame; AuthError if it is not one we accept.

        Checks the tag only: call ``admit`` once the frame is decoded and its node known.
        """
        if len(buf) < OVERHEAD_BYTES + 1 or buf[0] != MAGIC or buf[1] != SCHEME:
            self.unsigned += 1
            raise AuthError("frame is not sealed (no shared-key MAC)", "unsigned")
        buf = bytes(buf)
        states = self._keys.get(buf[2:2 + KEY_ID_BYTES])
        if states is None:
            self.unknown_key += 1
            raise AuthError("frame is sealed with a key this node does not hold", "unknown_key")
        if not hmac.compare_digest(_tag(states, buf[:-TAG_BYTES]), buf[-TAG_BYTES:]):
            self.bad_tag += 1
            raise AuthError("frame MAC does not match", "bad_tag")
        self.opened += 1
        counter = int.from_bytes(buf[2 + KEY_ID_BYTES:HEADER_BYTES], "big")
        return buf[HEADER_BYTES:-TAG_BYTES], counter

    def admit(self, node: tuple[str, int], counter: int, *, now: float) -> bool:
        """True if ``counter`` is above every one heard from ``node`` so far and, read as
        a time, within ``max_age_s`` of ``now`` (this node's wall clock, s since 1970).
        False counts the frame as replayed or stale."""
        max_age = self.key.max_age_s
        if max_age is not None and not abs(now - counter / 1e6) <= max_age:
            self.stale += 1
            return False
        last = self._last.pop(node, None)
        if last is not None and counter <= last:
            self._last[node] = last
            self.replayed += 1
            return False
        self._last[node] = counter  # re-inserted: the dict's order is least recently heard first
        if len(self._last) > self.max_nodes:
            del self._last[next(iter(self._last))]
        return True

    def snapshot(self) -> dict[str, int]:
        return {"sealed": self.sealed, "opened": self.opened, "unsigned": self.unsigned,
                "unknown_key": self.unknown_key, "bad_tag": self.bad_tag,
                "replayed": self.replayed, "stale": self.stale, "nodes": len(self._last)}
