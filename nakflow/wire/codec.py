"""The wire protocol: versioned msgpack frames.

Every frame is a msgpack array ``[version, type, *fields]``. Decoding any
bytes of any size returns a frame or raises ProtocolError — never another
exception, never unbounded work (the input is capped at ``max_frame_bytes``
before msgpack sees it, and msgpack bounds every container by the input size).

Extending a frame: new fields go at the end, with a default (``Nak.signal`` and
``Nak.rate``, ``Repair.to_me`` came this way in wire revision 2, ``Hello.announce`` in
3, ``Hello.receipts`` and ``Repair.hold`` in 4, ``Data.startup`` in 5, ``Hello.room`` in
6, ``Data.report_us`` in 7, ``Hello.max_frame`` in 8). A decoder accepts
a frame without them (from an older peer: the defaults apply) and ignores up to
MAX_UNKNOWN_FIELDS trailing fields it does not know (from a newer one). ``encode`` leaves
out trailing fields that hold their default, so a frame that uses no new field is the
frame an older peer knows.
Decoders of revision 1 required the exact field count, so they count a NAK that says its
signal as malformed. A new frame type (RECEIPT, revision 4) is one an older peer counts
as malformed and drops; a receiver says it sends them (``Hello.receipts``), so no sender
waits for one from a receiver that does not. PROGRESS (revision 5) answers only DATA that
says ``startup``, which only a sender of revision 5 sends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import MISSING, astuple, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Union

import msgpack

from ..errors import ProtocolError

VERSION = 1
#: Revision of the frame layouts within VERSION (2: NAK carries signal and rate, REPAIR
#: to_me; 3: a sender's HELLO may be an announcement of its last seq; 4: RECEIPT, a
#: receiver's HELLO says it sends them, REPAIR may ask the sender to hold; 5: DATA may say
#: the sender is starting, PROGRESS answers it; 6: a receiver's HELLO says its room; 7: a
#: starting sender's DATA may ask for PROGRESS less often; 8: a receiver's HELLO says the
#: largest frame it takes, and its incarnation).
WIRE_REVISION = 8
#: Trailing fields a decoder does not know and skips (a newer peer's additions), at most.
MAX_UNKNOWN_FIELDS = 8
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_NAME_CHARS = 256
MAX_BATCH = 65_536
MAX_SEQ = (1 << 63) - 1

T_DATA, T_NAK, T_CREDIT, T_HELLO, T_BYE, T_END = 1, 2, 3, 4, 5, 6
T_RDATA, T_REPAIR, T_GONE, T_RECEIPT, T_PROGRESS = 7, 8, 9, 10, 11
MAX_RANGES = 64  # sequence ranges one REPAIR frame may ask for
ROLES = ("sender", "receiver")


@dataclass(frozen=True, slots=True)
class Data:
    """One or more payloads from a sender; ``seq`` numbers the first. ``grtt_us`` is the
    sender's group round-trip time, µs (0: not measured yet), advertised in every DATA
    frame as NORM does, so receivers can scale their feedback timing to it.

    ``startup`` (revision 5): the sender is in its start (``policy.startup``) and asks
    every receiver for its PROGRESS; a receiver that does not know the field ignores it.
    ``report_us`` (revision 7): how often, µs (0: ``progress.REPORT_S``): a sender with
    many receivers asks each less often (``progress.report_interval_us``); a receiver of
    revision 5 or 6 ignores it and reports at REPORT_S."""

    stream: str
    sender: str
    epoch: int
    seq: int
    ts: float
    payloads: tuple[bytes, ...]
    grtt_us: int = 0
    startup: bool = False
    report_us: int = 0


@dataclass(frozen=True, slots=True)
class Nak:
    """A receiver's queue reached ``level`` percent (``fill`` is the exact percent).

    ``signal`` says what filled it (``SIGNALS``: its queue, the path's queueing delay,
    loss in flight, a silent path, an I/O thread behind, repairs; 0: not said, an older
    receiver); ``rate`` is what the receiver took over the last window, msgs/s (0: not
    said). Both are for the sender's attribution and rate choice."""

    stream: str
    receiver: str
    level: int
    fill: float
    ts: float
    signal: int = 0
    rate: float = 0.0


#: What a NAK's ``signal`` says filled the receiver: code -> name.
SIGNALS = {0: "unknown", 1: "queue", 2: "delay", 3: "loss", 4: "silence", 5: "io",
           6: "repair", 7: "paused"}
SIGNAL_CODES = {name: code for code, name in SIGNALS.items()}


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
    sender's ``ts`` back, so the sender measures the round trip on its own clock. A
    receiver's ``epoch`` is its incarnation (revision 8; 0 before): two receivers started
    with one id answer one HELLO with two, which the sender names.

    ``announce`` (revision 3): a sender's periodic word, while it is idle and for a
    while after END, that every seq below ``next_seq`` was sent (PGM's SPM, NORM's
    flush): a receiver that missed the tail counts it lost (and asks for it) instead of
    waiting. Receivers do not answer it.

    ``receipts`` (revision 4): a receiver's HELLO says that it answers every END with a
    RECEIPT, so a closing sender waits for it (one that does not say so is an older
    receiver: nobody waits for its receipt).

    ``room`` (revision 6): a receiver's answer says how many messages its queue has room
    for (below the share a start may fill, as PROGRESS does; 1 at least), so a sender
    sizes its start's first window before it sends (``policy.startup``); 0: not said (an
    older receiver).

    ``max_frame`` (revision 8): a receiver's answer says the largest frame it takes, bytes
    (its ``max_frame_bytes``: its socket drops the connection at a bigger one), so a sender
    builds no bigger frame and refuses a message no frame for it can hold; 0: not said."""

    stream: str
    node: str
    role: str
    mode: str
    epoch: int
    next_seq: int
    echo: str
    ts: float
    announce: bool = False
    receipts: bool = False
    room: int = 0
    max_frame: int = 0


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
    """``receiver`` asks (``sender``, ``epoch``) to re-send the half-open seq ``ranges``.

    ``to_me`` (revision 2): only this receiver misses them (its own queue dropped them, or
    it joined late): the sender re-sends them to it alone where the transport can (a
    topic of its own: ``target_prefix``), and other receivers do not hold back their own
    requests for them.

    ``hold`` (revision 4): do not re-send these yet, keep them: this receiver's own queue
    dropped them and it will ask again once it has room. Asked at once, so that what was
    dropped while the history still held it stays repairable however fast the history
    moves on (within the history's memory bound; the sender answers GONE for what it
    already lost)."""

    stream: str
    receiver: str
    sender: str
    epoch: int
    ranges: tuple[tuple[int, int], ...]
    ts: float
    to_me: bool = False
    hold: bool = False


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


@dataclass(frozen=True, slots=True)
class Progress:
    """(revision 5) While (``sender``, ``epoch``)'s DATA says ``startup``: every seq below
    ``next_seq`` reached ``receiver`` (or was lost on the way: the highest it saw), its
    queue has ``room`` for that many more messages, its consumer takes ``rate`` msgs/s
    (0: it keeps up, its queue is short), and the least one-way delay of its frames since
    the last PROGRESS was ``delay`` s (stamp to arrival, the two clocks' offset included:
    the sender compares a receiver's delays with each other only; less what the
    receiver's process was late to read them, but no less than the least it saw). At
    most one a millisecond per sender, for the start only."""

    stream: str
    receiver: str
    sender: str
    epoch: int
    next_seq: int
    room: int
    rate: float
    delay: float
    ts: float


#: What a RECEIPT says a receiver lacks, in this order (``Receipt.missing``).
RECEIPT_REASONS = ("lost", "dropped", "beyond_history", "missed_before_join")


@dataclass(frozen=True, slots=True)
class Receipt:
    """(revision 4) ``receiver`` is done with (``sender``, ``epoch``)'s stream: it saw END
    (``final_seq``) and every seq below it was delivered or waits in its queue, except
    ``missing`` (counts by ``RECEIPT_REASONS``), which it asks for no more. All zeros: the
    stream is complete there. One frame per receiver and stream, sent once the stream is
    settled, and again for each END that comes after it (a lost receipt is asked for by
    the sender's repeated END): the exact close (NORM's watermark acknowledgement,
    Kafka's ``acks=all``)."""

    stream: str
    receiver: str
    sender: str
    epoch: int
    final_seq: int
    missing: tuple[int, int, int, int]
    ts: float

    @property
    def complete(self) -> bool:
        return not any(self.missing)


Frame = Union[Data, Nak, Credit, Hello, Bye, End,  # noqa: UP007 (runtime alias, py3.10)
              RData, Repair, Gone, Receipt, Progress]
_TYPE_OF: dict[type, int] = {Data: T_DATA, Nak: T_NAK, Credit: T_CREDIT, Hello: T_HELLO,
                             Bye: T_BYE, End: T_END, RData: T_RDATA, Repair: T_REPAIR,
                             Gone: T_GONE, Receipt: T_RECEIPT, Progress: T_PROGRESS}

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
#: Packs a frame given as its field list ``[VERSION, T_..., *fields]`` (the hot path;
#: ``encode`` and ``encode_data`` are the checked ways in).
pack_frame = _packb


def encode(frame: Frame) -> bytes:
    """Serialise a frame (trailing fields that hold their default are left out)."""
    fields = list(astuple(frame))
    if isinstance(frame, (Data, RData)):
        fields[5] = list(frame.payloads)
    elif isinstance(frame, Repair):
        fields[4] = [list(r) for r in frame.ranges]
    elif isinstance(frame, Receipt):
        fields[5] = list(frame.missing)
    for default in _TRAILING_DEFAULTS[type(frame)]:
        if fields[-1] is not default and fields[-1] != default:
            break
        fields.pop()
    out: bytes = _packb([VERSION, _TYPE_OF[type(frame)], *fields])
    return out


#: A frame meant for one receiver only travels behind this prefix and the receiver's id
#: (and a NUL): ZeroMQ's SUB filters on it, so the others never even read it. Nothing
#: else starts with it: msgpack never uses 0xC1, and a sealed frame goes on with 0x01.
TARGET_MAGIC = b"\xc1\x02"


def target_prefix(receiver: str) -> bytes:
    """The topic a frame for ``receiver`` alone is sent behind."""
    return TARGET_MAGIC + receiver.encode() + b"\x00"


def untarget(buf: bytes) -> bytes:
    """``buf`` without a target prefix (unchanged if it has none). Raises ProtocolError
    if the prefix does not end."""
    if buf[:2] != TARGET_MAGIC:
        return buf
    end = buf.find(b"\x00", 2, 2 + 4 * MAX_NAME_CHARS + 1)
    if end < 0:
        raise ProtocolError("a target prefix without its end")
    return buf[end + 1:]


def encode_data(stream: str, sender: str, epoch: int, seq: int, ts: float,
                payloads: Sequence[bytes], grtt_us: int = 0, startup: bool = False,
                report_us: int = 0) -> bytes:
    """Serialise a DATA frame without building a Data object (the send hot path)."""
    fields = [VERSION, T_DATA, stream, sender, epoch, seq, ts, payloads, grtt_us]
    if startup or report_us:
        fields.append(startup)
        if report_us:
            fields.append(report_us)
    out: bytes = _packb(fields)
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


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise ProtocolError("expected true or false")
    return v


def _signal(v: Any) -> int:
    if type(v) is not int or not 0 <= v <= 255:
        raise ProtocolError("expected a signal code in [0, 255]")
    return v


def _rate(v: Any) -> float:
    if type(v) not in (int, float) or not (math.isfinite(v) and 0 <= v <= 1e12):
        raise ProtocolError("expected a rate in [0, 1e12] msgs/s")
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


def _missing(v: Any) -> tuple[int, int, int, int]:
    if type(v) is not list or len(v) != len(RECEIPT_REASONS):
        raise ProtocolError(f"expected {len(RECEIPT_REASONS)} missing counts")
    a, b, c, d = (_uint(x) for x in v)
    return a, b, c, d


_Validator = Callable[[Any], Any]
#: type -> (frame class, validators of its fields in order). The fields a class gives a
#: default may be missing at the end of a frame (``_REQUIRED``: how many may not).
_SCHEMA: dict[int, tuple[type, tuple[_Validator, ...]]] = {
    T_DATA: (Data, (_name, _name, _uint, _uint, _ts, _payloads, _uint, _bool, _uint)),
    T_NAK: (Nak, (_name, _name, _level, _fill, _ts, _signal, _rate)),
    T_CREDIT: (Credit, (_name, _name, _name, _uint, _uint, _ts)),
    T_HELLO: (Hello, (_name, _name, _role, _mode, _uint, _uint, _echo, _ts, _bool, _bool,
                       _uint, _uint)),
    T_BYE: (Bye, (_name, _name, _role, _uint, _ts)),
    T_END: (End, (_name, _name, _uint, _uint, _ts)),
    T_RDATA: (RData, (_name, _name, _uint, _uint, _ts, _payloads)),
    T_REPAIR: (Repair, (_name, _name, _name, _uint, _ranges, _ts, _bool, _bool)),
    T_GONE: (Gone, (_name, _name, _uint, _uint, _uint, _ts)),
    T_RECEIPT: (Receipt, (_name, _name, _name, _uint, _uint, _missing, _ts)),
    T_PROGRESS: (Progress, (_name, _name, _name, _uint, _uint, _uint, _rate, _ts, _ts)),
}


_REQUIRED = {t: sum(1 for f in dataclass_fields(cls) if f.default is MISSING)
             for t, (cls, _v) in _SCHEMA.items()}
#: The defaults of the trailing fields added after revision 1, last first (what ``encode``
#: may omit; DATA's ``grtt_us`` is in every DATA frame, as ``encode_data`` writes it, and
#: only ``startup`` and ``report_us`` may go).
_TRAILING_DEFAULTS: dict[type, tuple[Any, ...]] = {
    cls: (tuple(f.default for f in reversed(dataclass_fields(cls))
                if f.default is not MISSING) if cls in (Nak, Repair, Hello) else ())
    for cls, _v in _SCHEMA.values()}
_TRAILING_DEFAULTS[Data] = (0, False)


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
    n, required = len(fields), _REQUIRED[ftype]
    if not required <= n <= len(validators) + MAX_UNKNOWN_FIELDS:
        raise ProtocolError(f"{cls.__name__} takes {required} to {len(validators)} fields, "
                            f"got {n}")
    frame: Frame = cls(*[check(v) for check, v in zip(validators, fields[:len(validators)],
                                                      strict=False)])
    if type(frame) is Gone and frame.lo >= frame.hi:
        raise ProtocolError("GONE needs lo < hi")
    return frame


DataFields = tuple[str, str, int, int, float, list[bytes], int]


def decode_data(buf: bytes | bytearray | memoryview,
                max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> DataFields | Frame:
    """Like ``decode``, but a DATA frame comes back as a plain tuple
    ``(stream, sender, epoch, seq, ts, payloads, grtt_us)`` (the receive hot path: no frame
    object, checks inline). Any other frame, DATA that says ``startup`` among them, is
    returned as ``decode`` returns it; malformed input raises ProtocolError exactly as
    there.
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


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
