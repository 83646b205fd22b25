"""The wire protocol: versioned msgpack frames.

Every frame is a msgpack array ``[version, type, *fields]``. Decoding any
bytes of any size returns a frame or raises ProtocolError — never another
exception, never unbounded work (the input is capped at ``max_frame_bytes``
before msgpack sees it, and msgpack bounds every container by the input size).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Union

import msgpack

from ._errors import ProtocolError

VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_NAME_CHARS = 256
MAX_BATCH = 65_536
MAX_SEQ = (1 << 63) - 1

T_DATA, T_NAK, T_CREDIT, T_HELLO, T_BYE, T_END = 1, 2, 3, 4, 5, 6
T_RDATA, T_REPAIR, T_GONE = 7, 8, 9
MAX_RANGES = 64  # sequence ranges one REPAIR frame may ask for
ROLES = ("sender", "receiver")


@dataclass(frozen=True, slots=True)
class Data:
    """One or more payloads from a sender; ``seq`` numbers the first. ``grtt_us`` is the
    sender's group round-trip time, µs (0: not measured yet), advertised in every DATA
    frame as NORM does, so receivers can scale their feedback timing to it."""

    stream: str
    sender: str
    epoch: int
    seq: int
    ts: float
    payloads: tuple[bytes, ...]
    grtt_us: int = 0


@dataclass(frozen=True, slots=True)
class Nak:
    """A receiver's queue reached ``level`` percent (``fill`` is the exact percent)."""

    stream: str
    receiver: str
    level: int
    fill: float
    ts: float


@dataclass(frozen=True, slots=True)
class Credit:
    """``receiver`` lets (``sender``, ``epoch``) send every seq below ``limit``."""

    stream: str
    receiver: str
    sender: str
    epoch: int
    limit: int
    ts: float


@dataclass(frozen=True, slots=True)
class Hello:
    """Presence. A sender's HELLO carries the next seq it will send; a receiver's
    HELLO that answers a sender's names it in ``echo`` ("" otherwise) and carries the
    sender's ``ts`` back, so the sender measures the round trip on its own clock."""

    stream: str
    node: str
    role: str
    mode: str
    epoch: int
    next_seq: int
    echo: str
    ts: float


@dataclass(frozen=True, slots=True)
class Bye:
    """A node leaves on purpose (a sender: that incarnation, ``epoch``; receivers send 0)."""

    stream: str
    node: str
    role: str
    epoch: int
    ts: float


@dataclass(frozen=True, slots=True)
class End:
    """A sender's stream is complete: it sent every seq below ``final_seq``."""

    stream: str
    sender: str
    epoch: int
    final_seq: int
    ts: float


@dataclass(frozen=True, slots=True)
class RData:
    """A repair: payloads re-sent from the sender's history (PGM's RDATA), laid out as DATA
    without the RTT.
    Receivers take from it only the seqs they are missing; the rest is not a duplicate."""

    stream: str
    sender: str
    epoch: int
    seq: int
    ts: float
    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Repair:
    """``receiver`` asks (``sender``, ``epoch``) to re-send the half-open seq ``ranges``."""

    stream: str
    receiver: str
    sender: str
    epoch: int
    ranges: tuple[tuple[int, int], ...]
    ts: float


@dataclass(frozen=True, slots=True)
class Gone:
    """(``sender``, ``epoch``) no longer holds seqs [``lo``, ``hi``) in its history, so
    they cannot be repaired (NORM's SQUELCH): receivers stop asking and report them."""

    stream: str
    sender: str
    epoch: int
    lo: int
    hi: int
    ts: float


Frame = Union[Data, Nak, Credit, Hello, Bye, End,  # noqa: UP007 (runtime alias, py3.10)
              RData, Repair, Gone]
_TYPE_OF: dict[type, int] = {Data: T_DATA, Nak: T_NAK, Credit: T_CREDIT, Hello: T_HELLO,
                             Bye: T_BYE, End: T_END, RData: T_RDATA, Repair: T_REPAIR,
                             Gone: T_GONE}

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
#: Packs a frame given as its field list ``[VERSION, T_..., *fields]`` (the hot path;
#: ``encode`` and ``encode_data`` are the checked ways in).
pack_frame = _packb


def encode(frame: Frame) -> bytes:
    """Serialise a frame."""
    fields = list(astuple(frame))
    if isinstance(frame, Data):
        fields[-2] = list(frame.payloads)
    elif isinstance(frame, RData):
        fields[-1] = list(frame.payloads)
    elif isinstance(frame, Repair):
        fields[-2] = [list(r) for r in frame.ranges]
    out: bytes = _packb([VERSION, _TYPE_OF[type(frame)], *fields])
    return out


def encode_data(stream: str, sender: str, epoch: int, seq: int, ts: float,
                payloads: Sequence[bytes], grtt_us: int = 0) -> bytes:
    """Serialise a DATA frame without building a Data object (the send hot path)."""
    out: bytes = _packb([VERSION, T_DATA, stream, sender, epoch, seq, ts, payloads, grtt_us])
    return out


# -- field validators: each returns the value or raises ProtocolError ------------
def _name(v: Any) -> str:
    if type(v) is not str or not 0 < len(v) <= MAX_NAME_CHARS:
        raise ProtocolError("expected a name of 1..256 characters")
    return v


def _uint(v: Any) -> int:
    if type(v) is not int or not 0 <= v <= MAX_SEQ:
        raise ProtocolError("expected an integer in [0, 2**63)")
    return v


def _level(v: Any) -> int:
    if type(v) is not int or not 1 <= v <= 100:
        raise ProtocolError("expected a NAK level in [1, 100]")
    return v


def _fill(v: Any) -> float:
    if type(v) not in (int, float) or not (math.isfinite(v) and 0 <= v <= 1000):
        raise ProtocolError("expected a fill percent in [0, 1000]")
    return float(v)


def _ts(v: Any) -> float:
    if type(v) not in (int, float) or not math.isfinite(v):
        raise ProtocolError("expected a finite timestamp")
    return float(v)


def _echo(v: Any) -> str:
    if type(v) is not str or len(v) > MAX_NAME_CHARS:
        raise ProtocolError("expected a name of at most 256 characters")
    return v


def _role(v: Any) -> str:
    if v not in ROLES:
        raise ProtocolError("expected role 'sender' or 'receiver'")
    return str(v)


def _mode(v: Any) -> str:
    if v not in ("nak", "ack", "none"):
        raise ProtocolError("expected mode 'nak', 'ack' or 'none'")
    return str(v)


def _payloads(v: Any) -> tuple[bytes, ...]:
    if type(v) is not list or not 0 < len(v) <= MAX_BATCH:
        raise ProtocolError("expected a list of 1..65536 payloads")
    for p in v:
        if type(p) is not bytes:
            raise ProtocolError("payloads must be binary")
    return tuple(v)


def _ranges(v: Any) -> tuple[tuple[int, int], ...]:
    if type(v) is not list or not 0 < len(v) <= MAX_RANGES:
        raise ProtocolError(f"expected a list of 1..{MAX_RANGES} seq ranges")
    out = []
    for r in v:
        if (type(r) is not list or len(r) != 2 or type(r[0]) is not int
                or type(r[1]) is not int or not 0 <= r[0] < r[1] <= MAX_SEQ):
            raise ProtocolError("a seq range is [lo, hi] with 0 <= lo < hi < 2**63")
        out.append((r[0], r[1]))
    return tuple(out)


_Validator = Callable[[Any], Any]
_SCHEMA: dict[int, tuple[type, tuple[_Validator, ...]]] = {
    T_DATA: (Data, (_name, _name, _uint, _uint, _ts, _payloads, _uint)),
    T_NAK: (Nak, (_name, _name, _level, _fill, _ts)),
    T_CREDIT: (Credit, (_name, _name, _name, _uint, _uint, _ts)),
    T_HELLO: (Hello, (_name, _name, _role, _mode, _uint, _uint, _echo, _ts)),
    T_BYE: (Bye, (_name, _name, _role, _uint, _ts)),
    T_END: (End, (_name, _name, _uint, _uint, _ts)),
    T_RDATA: (RData, (_name, _name, _uint, _uint, _ts, _payloads)),
    T_REPAIR: (Repair, (_name, _name, _name, _uint, _ranges, _ts)),
    T_GONE: (Gone, (_name, _name, _uint, _uint, _uint, _ts)),
}


def decode(buf: bytes | bytearray | memoryview,
           max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Frame:
    """Parse one frame. Raises ProtocolError on anything that is not exactly one."""
    if len(buf) > max_frame_bytes:
        raise ProtocolError(f"frame of {len(buf)} bytes exceeds the {max_frame_bytes} limit")
    try:
        obj = msgpack.unpackb(buf, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types; all mean "not a frame"
        raise ProtocolError(f"not a msgpack object: {type(exc).__name__}") from None
    if type(obj) is not list or len(obj) < 2:
        raise ProtocolError("a frame is an array [version, type, ...]")
    version, ftype = obj[0], obj[1]
    if version != VERSION or type(version) is not int:
        raise ProtocolError(f"unsupported protocol version {version!r}")
    entry = _SCHEMA.get(ftype) if type(ftype) is int else None
    if entry is None:
        raise ProtocolError(f"unknown frame type {ftype!r}")
    cls, validators = entry
    fields = obj[2:]
    if len(fields) != len(validators):
        raise ProtocolError(f"{cls.__name__} takes {len(validators)} fields, got {len(fields)}")
    frame: Frame = cls(*[check(v) for check, v in zip(validators, fields, strict=True)])
    if type(frame) is Gone and frame.lo >= frame.hi:
        raise ProtocolError("GONE needs lo < hi")
    return frame


DataFields = tuple[str, str, int, int, float, list[bytes], int]


def decode_data(buf: bytes | bytearray | memoryview,
                max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> DataFields | Frame:
    """Like ``decode``, but a DATA frame comes back as a plain tuple
    ``(stream, sender, epoch, seq, ts, payloads, grtt_us)`` (the receive hot path: no frame
    object, checks inline). Any other frame is returned as ``decode`` returns it;
    malformed input raises ProtocolError exactly as there.
    """
    if len(buf) > max_frame_bytes:
        raise ProtocolError(f"frame of {len(buf)} bytes exceeds the {max_frame_bytes} limit")
    try:
        obj = msgpack.unpackb(buf, raw=False, use_list=True, strict_map_key=True)
    except Exception:
        return decode(buf, max_frame_bytes)  # raises the usual ProtocolError
    if (type(obj) is list and len(obj) == 9 and obj[1] == T_DATA and type(obj[1]) is int
            and obj[0] == VERSION and type(obj[0]) is int):
        _, _, stream, sender, epoch, seq, ts, payloads, grtt_us = obj
        if (type(stream) is str and 0 < len(stream) <= MAX_NAME_CHARS
                and type(sender) is str and 0 < len(sender) <= MAX_NAME_CHARS
                and type(epoch) is int and 0 <= epoch <= MAX_SEQ
                and type(seq) is int and 0 <= seq <= MAX_SEQ
                and type(ts) is float and math.isfinite(ts)
                and type(payloads) is list and 0 < len(payloads) <= MAX_BATCH
                and all(type(p) is bytes for p in payloads)
                and type(grtt_us) is int and 0 <= grtt_us <= MAX_SEQ):
            return stream, sender, epoch, seq, ts, payloads, grtt_us
    return decode(buf, max_frame_bytes)  # anything else, or a DATA frame that is not valid


from ._speedups import use_compiled  # noqa: E402

use_compiled(globals())
