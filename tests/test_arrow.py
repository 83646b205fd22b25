"""Arrow messages: row counts read from the IPC headers agree with pyarrow's decoding. The
Parquet sink keeps every value of msgpack rows whose types show late."""

from __future__ import annotations

import json
import random

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nakflow.arrow import ArrowDecodeError, encode_batch, rows_in
from nakflow.core.receiver_core import Message
from nakflow.live.sinks import ParquetSink


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


def late_typed_row(i: int) -> dict:
    """A row as the foreachPartition writer sends it (a msgpack map), whose types show
    late: ``maybe`` is null in the first row (Spark's nullable column), ``amount`` whole
    numbers until row 300, ``attrs`` (a Spark map) gains keys from row 200, and ``tag``
    is an int until row 600, then a string."""
    return {"id": i, "maybe": None if i % 3 == 0 else i,
            "amount": i if i < 300 else i + 0.5,
            "attrs": {f"k{i % 7 if i >= 200 else 0}": i},
            "tag": i if i < 600 else f"t{i}"}


@pytest.mark.parametrize("chunks", [
    [1, 256, 256, 256, 231],  # the receiver's takes: the first one row, a null in it
    [1, "end", 255, "end", 344, "end", 400],  # a stream ended (a file closed) in between
])
def test_the_parquet_sink_keeps_every_value_of_rows_whose_types_show_late(tmp_path, chunks):
    """Before, a file's schema was inferred from the first rows and later rows were cast
    into it: a null first row failed the sink (``Invalid null value``) and stopped the
    receiver, 1.5 became 1 in an int column, and map keys not seen at first vanished."""
    rows = [late_typed_row(i) for i in range(1_000)]
    msgs = [Message("s", 0, i, 0.0, msgpack.packb(r)) for i, r in enumerate(rows)]
    sink = ParquetSink(str(tmp_path))
    at = 0
    for chunk in chunks:
        if chunk == "end":
            sink.flush()
            continue
        sink.write(msgs[at:at + chunk])
        at += chunk
    sink.close()
    assert sink.written == sink.rows == 1_000
    files = sorted(tmp_path.glob("*.parquet"))
    assert [str(f) for f in files] == sink.files and not list(tmp_path.glob("*.part"))
    assert sink.pending == sink.lost == 0
    back = [row for f in files for row in pq.read_table(f).to_pylist()]
    assert [r["id"] for r in back] == list(range(1_000))
    for got, sent in zip(back, rows, strict=True):
        assert got["maybe"] == sent["maybe"] and got["amount"] == sent["amount"]
        assert {k: v for k, v in got["attrs"].items() if v is not None} == sent["attrs"]
        assert got["tag"] == sent["tag"]
    # every file's schema is the merge of those before it, but for the column whose type
    # changed for good: up to it, the last file's schema reads them all
    schemas = [pq.read_schema(f) for f in files]
    ints = [s for s in schemas if s.field("tag").type == pa.int64()]
    assert pa.types.is_string(schemas[-1].field("tag").type)
    assert pq.read_table(files[:len(ints)], schema=ints[-1]).num_rows == 600
    assert schemas[-1].field("amount").type == pa.float64()
    assert schemas[-1].field("attrs").type.num_fields == 7


def test_the_parquet_sinks_directory_reads_while_a_file_is_open(tmp_path):
    """Spark and pyarrow read every file of a directory whose name starts with neither
    ``.`` nor ``_``: the sink's open file, ``part-...part`` without a footer yet, failed
    the read of the whole directory (``Parquet magic bytes not found``) while a receiver
    wrote, and for ever after a kill. It is hidden now; what is counted written is what
    the read gets."""
    sink = ParquetSink(str(tmp_path))
    sink.ROW_GROUP_ROWS = 100  # a row group goes to the open file at 100 rows
    msgs = [Message("s", 0, i, 0.0, msgpack.packb({"i": i})) for i in range(350)]
    sink.write(msgs[:150])
    sink.flush()  # a stream ended: one closed file
    sink.write(msgs[150:])  # two row groups into the next file, which stays open
    assert sink.written == 150 and sink.pending == 200
    assert [p.name.startswith(".") for p in tmp_path.iterdir()].count(True) == 1
    assert pq.read_table(tmp_path).column("i").to_pylist() == list(range(150))
    sink.close()
    assert (sink.written, sink.pending) == (350, 0)
    assert pq.read_table(tmp_path).column("i").to_pylist() == list(range(350))



def test_a_map_keyed_by_numbers_is_a_row_the_parquet_sink_writes(tmp_path):
    """A Spark ``map<int,string>`` (or of doubles, booleans) sent by the row-by-row
    writer: every such row was rejected by the Parquet sink as ``payload is neither Arrow
    IPC nor msgpack: int is not allowed for map key`` (msgpack's strict keys), and
    ``nakflow.arrow.to_record_batch`` raised the same. Its keys now name the struct's
    fields as the JSON-line sink names them, Spark's ``to_json``'s way."""
    from pyspark.sql import Row

    from nakflow.live.sinks import message_json
    from spark_adapter.serialize import row_to_msgpack

    rows = [Row(id=i, by_int={i: "a", i + 1: "b"}, by_flag={i % 2 == 0: 1.5},
                nested=[{float(i): "x"}]) for i in range(3)]
    msgs = [Message("s", 0, i, 0.0, row_to_msgpack(r)) for i, r in enumerate(rows)]
    sink = ParquetSink(str(tmp_path))
    sink.write(msgs)
    sink.close()
    assert (sink.written, sink.rejected) == (3, 0)
    back = pq.read_table(tmp_path).to_pylist()
    as_json = [json.loads(message_json("x", m))["payload"] for m in msgs]
    def present(struct: dict) -> dict:  # a struct has every key seen: the others null
        return {k: v for k, v in struct.items() if v is not None}

    for got, said in zip(back, as_json, strict=True):
        assert present(got["by_int"]) == said["by_int"]
        assert present(got["by_flag"]) == said["by_flag"]
        assert [present(s) for s in got["nested"]] == said["nested"]
    assert back[1]["by_int"]["2"] == "b" and as_json[0]["by_flag"] == {"true": 1.5}
    assert as_json[2]["nested"] == [{"2.0": "x"}]


def test_empty_maps_at_any_depth_are_written_as_nulls(tmp_path):
    """A struct of no fields (an empty map, msgpack ``{}``) has no form in Parquet: in a
    struct or a list too, it is written as a null, and the rest of the row as it was."""
    rows = [{"i": 0, "outer": {"x": 1, "inner": {}}, "many": [{}, {}], "keep": [1, 2]},
            {"i": 1, "outer": None, "many": None, "keep": None},
            {"i": 2, "outer": {"x": 3, "inner": {}}, "many": [], "keep": []}]
    sink = ParquetSink(str(tmp_path))
    sink.write([Message("s", 0, i, 0.0, msgpack.packb(r)) for i, r in enumerate(rows)])
    sink.close()
    assert (sink.written, sink.rejected, sink.lost) == (3, 0, 0)
    assert pq.read_table(tmp_path).to_pylist() == [
        {"i": 0, "outer": {"x": 1, "inner": None}, "many": [None, None], "keep": [1, 2]},
        {"i": 1, "outer": None, "many": None, "keep": None},
        {"i": 2, "outer": {"x": 3, "inner": None}, "many": [], "keep": []}]


def test_rows_of_other_columns_keep_every_column_in_a_batch_and_in_the_parquet_sink(tmp_path):
    """msgpack rows with columns the first lacks (an RDD of dicts, two jobs' rows): a
    batch took the first row's columns and dropped the rest's values without a word,
    and the Parquet sink, which reads through it, wrote them short the same way."""
    from nakflow.arrow import to_record_batch

    rows = [{"id": 0}, {"id": 1, "extra": "x"}, {"only": 2.5}, {"id": 3, "extra": None}]
    payloads = [msgpack.packb(r) for r in rows]
    want = [{"id": r.get("id"), "extra": r.get("extra"), "only": r.get("only")} for r in rows]
    assert to_record_batch(payloads).to_pylist() == want
    # an Arrow message between them, of its own columns: joined by name
    arrow = encode_batch(pa.record_batch({"id": pa.array([9], pa.int64()),
                                          "name": pa.array(["n"])}))
    both = to_record_batch([payloads[0], arrow, payloads[1]]).to_pylist()
    assert both == [{"id": 0, "name": None, "extra": None}, {"id": 9, "name": "n", "extra": None},
                    {"id": 1, "name": None, "extra": "x"}]
    with pytest.raises(ArrowDecodeError, match="Field id has incompatible types: int64 vs "
                       "string; read those of each schema in a call of its own"):
        to_record_batch([arrow, msgpack.packb({"id": "nine"})])
    sink = ParquetSink(str(tmp_path))
    sink.write([Message("s", 0, i, 0.0, p) for i, p in enumerate(payloads)])
    sink.close()
    assert (sink.written, sink.rejected) == (4, 0)
    assert [row for f in sink.files for row in pq.read_table(f).to_pylist()] == want


def test_the_data_sources_messages_of_wide_rows_are_split_by_bytes_to_fit_a_frame():
    """Without Spark: 1,024 rows of 20 KB made one Arrow message of 20 MB, more than a
    frame holds, and the task failed (``message of 20,120,400 bytes exceeds
    max_frame_bytes``). Split by bytes, every row once, in order."""
    pytest.importorskip("pyspark")
    from nakflow.arrow import decode_batches
    from spark_adapter.datasource import MESSAGE_BYTES, arrow_messages

    wide = pa.record_batch({"id": pa.array(range(1_500), pa.int64()),
                            "blob": pa.array([b"%05d" % i * 4_000 for i in range(1_500)])})
    narrow = pa.record_batch({"id": pa.array(range(3_000), pa.int64())})
    counted = [0]
    messages = list(arrow_messages(iter([wide, narrow]), 1_024, counted))
    assert all(len(m) <= MESSAGE_BYTES for m in messages)
    back = [b for m in messages for b in decode_batches(m)]
    ids = [i for b in back for i in b.column("id").to_pylist()]
    assert ids == list(range(1_500)) + list(range(3_000)) and counted == [4_500]
    assert [b.num_rows for b in back[-3:]] == [1_024, 1_024, 952]  # narrow: by rows alone
    assert max(b.num_rows for b in back[:-3]) < 1_024  # wide: by bytes too
    # a row bigger than the bound goes whole (a frame holds up to twice the bound)
    big = pa.record_batch({"blob": pa.array([b"x" * 100, b"y" * 3_000])})
    alone = list(arrow_messages(iter([big]), 1_024, [0], max_bytes=2_000))
    assert [decode_batches(m)[0].num_rows for m in alone] == [1, 1]
