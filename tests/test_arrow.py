"""Arrow messages: row counts read from the IPC headers agree with pyarrow's decoding."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from nakflow.arrow import ArrowDecodeError, encode_batch, rows_in


def decoded_rows(payload: bytes) -> int:
    return sum(b.num_rows for b in pa.ipc.open_stream(payload))


def stream(*batches: pa.RecordBatch, eos: bool = True) -> bytes:
    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream(sink, batches[0].schema)
    for b in batches:
        writer.write_batch(b)
    writer.close()
    data = bytes(sink.getvalue())
    return data if eos else data[:-8]  # the end-of-stream marker is 8 bytes


DICTIONARY = pa.array(["x", "y", "z"])


def batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({
        "n": pa.array(range(n), pa.int64()),
        "s": pa.array([str(i) * 3 for i in range(n)], pa.string()),
        "d": pa.DictionaryArray.from_arrays(pa.array([i % 3 for i in range(n)], pa.int8()),
                                            DICTIONARY),  # a dictionary message first
        "t": pa.array([None] * n, pa.timestamp("us", tz="UTC"))})


@pytest.mark.parametrize("payload", [
    encode_batch(batch(0)), encode_batch(batch(1)), encode_batch(batch(128)),
    encode_batch(batch(100_000)), stream(batch(10), batch(3), batch(0)),
    stream(batch(10), batch(5), eos=False)], ids=["0", "1", "128", "100k", "3 batches",
                                                   "no eos"])
def test_row_counts_agree_with_pyarrow(payload: bytes) -> None:
    assert rows_in(payload) == decoded_rows(payload)


def test_a_msgpack_row_counts_one() -> None:
    assert rows_in(b"\x81\xa1a\x01") == 1


def test_a_truncated_or_damaged_stream_raises_and_only_that() -> None:
    whole = stream(batch(40), batch(2))
    for cut in range(4, len(whole)):  # every truncation: as pyarrow says, or an error
        part = whole[:cut]
        try:
            expect: int | None = decoded_rows(part)
        except (pa.ArrowInvalid, OSError):
            expect = None
        try:
            got: int | None = rows_in(part)
        except ArrowDecodeError:
            got = None
        assert got == expect, cut
    rnd = random.Random(7)
    raised = 0
    for _ in range(2_000):  # damaged bytes: a count or ArrowDecodeError, never another error
        damaged = bytearray(whole)
        for _ in range(3):
            damaged[rnd.randrange(4, len(damaged))] = rnd.randrange(256)
        try:
            assert rows_in(bytes(damaged)) >= 0
        except ArrowDecodeError:
            raised += 1
    assert raised > 0
