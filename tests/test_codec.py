"""Wire codec: round trips, every truncation, trailing bytes, arbitrary bytes."""

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nakflow import ProtocolError
from nakflow.wire import (
    Bye,
    Credit,
    Data,
    End,
    Hello,
    Nak,
    Receipt,
    Repair,
    decode,
    encode,
    encode_data,
)
from nakflow.wire.codec import decode_data
from tests.fuzz import budget, frames

EXAMPLES = [
    Data("s", "p0", 3, 100, 1.5, (b"a", b"", b"xyz")),
    Data("s", "p0", 3, 100, 1.5, (b"a",), 123_456),
    Nak("s", "r1", 87, 88.5, 2.0),
    Credit("s", "r1", "p0", 3, 4096, 2.0),
    Hello("s", "r1", "receiver", "nak", 0, 0, "p0", 1.0),
    Bye("s", "p0", "sender", 3, 1.0),
    End("s", "p0", 3, 5000, 9.0),
    Hello("s", "r1", "receiver", "nak", 0, 0, "", 1.0, receipts=True),
    Hello("s", "r1", "receiver", "nak", 0, 0, "p0", 1.0, receipts=True, room=40,
          max_frame=32_768),
    Repair("s", "r1", "p0", 3, ((5, 9),), 1.0, to_me=True, hold=True),
    Receipt("s", "r1", "p0", 3, 5000, (0, 0, 0, 0), 9.5),
    Receipt("s", "r1", "p0", 3, 5000, (1, 2, 3, 4), 9.5),
]


def test_revision_4_fields_are_left_out_when_they_hold_their_default():
    """An older peer still reads a HELLO or REPAIR that uses none of revision 4's fields
    exactly as before; a RECEIPT says what a receiver lacks, by reason."""
    assert encode(Hello("s", "r1", "receiver", "nak", 0, 0, "", 1.0)) == encode(
        Hello("s", "r1", "receiver", "nak", 0, 0, "", 1.0, False, False))
    assert len(msgpack.unpackb(encode(Hello("s", "r", "receiver", "nak", 0, 0, "", 1.0,
                                            receipts=True)))) == 12
    receipt = Receipt("s", "r1", "p0", 3, 10, (0, 0, 2, 0), 1.0)
    assert not receipt.complete and Receipt("s", "r", "p", 1, 1, (0,) * 4, 0.0).complete
    for bad in ([1, 2, 3], [1, 2, 3, -1], [1, 2, 3, "x"]):
        buf = msgpack.packb([1, 10, "s", "r", "p", 3, 10, bad, 1.0])
        with pytest.raises(ProtocolError, match=r"missing counts|integer"):
            decode(buf)


@given(frames)
@budget(300)
def test_round_trip(frame):
    assert decode(encode(frame)) == frame


def test_encode_data_fast_path_matches_encode():
    f = EXAMPLES[0]
    assert encode_data(f.stream, f.sender, f.epoch, f.seq, f.ts, list(f.payloads)) == encode(f)


@pytest.mark.parametrize("frame", EXAMPLES, ids=lambda f: type(f).__name__)
def test_whole_truncated_at_every_byte_and_with_trailing_bytes(frame):
    buf = encode(frame)
    assert decode(buf) == frame
    for cut in range(len(buf)):
        with pytest.raises(ProtocolError):
            decode(buf[:cut])
    for tail in (b"\x00", b"\xc0", buf):
        with pytest.raises(ProtocolError):
            decode(buf + tail)


@given(st.binary(max_size=300))
@budget(1000)
def test_arbitrary_bytes_decode_or_raise_protocol_error(buf):
    with contextlib.suppress(ProtocolError):
        decode(buf)


scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text() | st.binary())


@given(st.recursive(scalars, lambda c: st.lists(c, max_size=8), max_leaves=30))
@budget(300)
def test_arbitrary_msgpack_values_decode_or_raise_protocol_error(obj):
    with contextlib.suppress(ProtocolError):
        decode(msgpack.packb([1, 1, *obj]) if isinstance(obj, list) else msgpack.packb(obj))


@pytest.mark.parametrize("bad", [
    [2, 2, "s", "r", 50, 50.0, 1.0],  # future version
    [1, 9, "s"],  # unknown type
    [1, 2, "s", "r", -1, 50.0, 1.0],  # negative level
    [1, 2, "s", "r", 101, 50.0, 1.0],  # level above 100
    [1, 2, "s", "r", True, 50.0, 1.0],  # bool is not a level
    [1, 2, "s", "", 50, 50.0, 1.0],  # empty name
    [1, 1, "s", "p", 0, 2**64 - 1, 1.0, [b"x"]],  # seq beyond 2**63
    [1, 1, "s", "p", 0, 0, 1.0, []],  # empty batch
    [1, 1, "s", "p", 0, 0, 1.0, ["text"]],  # payload must be binary
    [1, 1, "s", "p", 0, 0, float("nan"), [b"x"]],  # timestamp
    [1, 3, "s", "r", "p", 0, -5, 1.0],  # negative credit limit
    {"v": 1},
])
def test_absurd_fields_are_protocol_errors(bad):
    with pytest.raises(ProtocolError):
        decode(msgpack.packb(bad))


def test_oversized_frame_rejected_before_parsing():
    big = encode(Data("s", "p", 0, 0, 0.0, (b"x" * 2000,)))
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(big, max_frame_bytes=1000)
    # a container header claiming 4 G elements costs nothing
    with pytest.raises(ProtocolError):
        decode(b"\xdd\xff\xff\xff\xff" + b"\x00" * 10)


def _both(buf):
    """(decode's outcome, decode_data's outcome), errors as the string 'error'."""
    out = []
    for fn in (decode, decode_data):
        try:
            out.append(fn(buf))
        except ProtocolError:
            out.append("error")
    return out


@given(frames)
@budget(300)
def test_decode_data_hot_path_agrees_with_decode_on_frames(frame):
    full, fast = _both(encode(frame))
    if isinstance(full, Data) and type(full.ts) is float:
        assert fast == (full.stream, full.sender, full.epoch, full.seq, full.ts,
                        list(full.payloads), full.grtt_us)
    else:
        assert fast == full


@given(st.recursive(scalars, lambda c: st.lists(c, max_size=8), max_leaves=30))
@budget(300)
def test_decode_data_hot_path_agrees_with_decode_on_anything(obj):
    buf = msgpack.packb([1, 1, *obj]) if isinstance(obj, list) else msgpack.packb(obj)
    full, fast = _both(buf)
    if isinstance(full, Data):
        assert fast == (full.stream, full.sender, full.epoch, full.seq, full.ts,
                        list(full.payloads), full.grtt_us) or fast == full
    else:
        assert fast == full


def test_frames_extend_at_the_end_both_ways():
    """Wire revision 2: an older peer's NAK (without signal and rate) decodes with the
    defaults; a newer peer's trailing fields are skipped, up to MAX_UNKNOWN_FIELDS."""
    from nakflow.wire.codec import MAX_UNKNOWN_FIELDS, T_NAK, VERSION

    old = msgpack.packb([VERSION, T_NAK, "s", "r1", 75, 80.0, 1.0])
    assert decode(old) == Nak("s", "r1", 75, 80.0, 1.0, 0, 0.0)
    new = Nak("s", "r1", 75, 80.0, 1.0, 2, 19_500.0)
    assert decode(encode(new)) == new
    newer = msgpack.packb([VERSION, T_NAK, "s", "r1", 75, 80.0, 1.0, 2, 19_500.0, "x", 7])
    assert decode(newer) == new
    too_many = msgpack.packb([VERSION, T_NAK, "s", "r1", 75, 80.0, 1.0, 2, 1.0]
                             + [0] * (MAX_UNKNOWN_FIELDS + 1))
    with pytest.raises(ProtocolError):
        decode(too_many)
    with pytest.raises(ProtocolError):  # the required ones stay required
        decode(msgpack.packb([VERSION, T_NAK, "s", "r1", 75, 80.0]))
    with pytest.raises(ProtocolError):
        decode(encode(Nak("s", "r1", 75, 80.0, 1.0, 2, -1.0)))
