"""Arrow record batches as nakflow messages (needs ``pyarrow``: ``pip install nakflow[arrow]``).

The Spark data source (``df.write.format("nakflow")``) sends each message as one Arrow
IPC stream: the schema, then one record batch of at most ``arrow_rows`` rows. Such a
payload starts with the IPC continuation marker ``ff ff ff ff``, which no msgpack value
does (a msgpack payload is one value: a lone ``ff`` is -1 and ends it), so a consumer
tells the two apart by that prefix (``is_arrow``).

A consumer that wants columns rather than rows::

    from nakflow.arrow import to_record_batch
    batch = to_record_batch(receiver.get_many(10_000, timeout=1.0))  # pyarrow.RecordBatch

``to_record_batch`` takes Arrow messages and msgpack rows (what ``foreachPartition``'s
writer sends) alike.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from .errors import NakflowError
from .values import string_keys

if TYPE_CHECKING:
    import pyarrow as pa

    from .core.receiver_core import Message

#: The first bytes of every Arrow IPC stream message (the continuation marker).
ARROW_MAGIC = b"\xff\xff\xff\xff"


class ArrowDecodeError(NakflowError, ValueError):
    """A payload that claims to be Arrow IPC but is not a readable one."""


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.ipc
    except ImportError:  # pragma: no cover (pyarrow is installed here)
        raise NakflowError("Arrow messages need pyarrow: pip install 'nakflow[arrow]'") from None
    return pa


def is_arrow(payload: bytes) -> bool:
    """Is this payload an Arrow IPC stream (the data source's messages)?"""
    return payload[:4] == ARROW_MAGIC


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """One message: an Arrow IPC stream with ``batch``'s schema and ``batch``."""
    pa = _pa()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def decode_batches(payload: bytes) -> list[pa.RecordBatch]:
    """The record batches of one Arrow message. Raises ArrowDecodeError."""
    pa = _pa()
    try:
        return list(pa.ipc.open_stream(payload))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ArrowDecodeError(f"not a readable Arrow IPC stream: {exc}") from None


_U16, _I32, _U32, _I64 = (struct.Struct(f) for f in ("<H", "<i", "<I", "<q"))
#: ``MessageHeader.RecordBatch`` in the IPC format's ``Message.fbs``.
_RECORD_BATCH = 3


def _field(buf: memoryview, table: int, index: int) -> int | None:
    """Where field ``index`` of the flatbuffer table at ``table`` is (None: absent)."""
    vtable = table - _I32.unpack_from(buf, table)[0]
    if not 0 <= vtable <= len(buf) - 4:
        raise ValueError("a table's vtable lies outside the message")
    at = 4 + 2 * index
    if at + 2 > _U16.unpack_from(buf, vtable)[0]:
        return None  # an older writer's shorter vtable: the field is absent
    off = _U16.unpack_from(buf, vtable + at)[0]
    return table + off if off else None


def rows_in(payload: bytes) -> int:
    """Rows a payload carries: an Arrow message's row count, else 1 (a msgpack row).

    Read from the IPC messages' headers (the flatbuffer ``Message`` and its
    ``RecordBatch.length``) without pyarrow and without decoding a column: the receive
    loop counts every message it hands over. Raises ArrowDecodeError for framing that
    does not hold together (a batch's columns are read only by ``decode_batches``)."""
    if not is_arrow(payload):
        return 1
    buf, rows, pos = memoryview(payload), 0, 0
    try:
        while pos < len(buf):
            if _U32.unpack_from(buf, pos)[0] != 0xFFFFFFFF:
                raise ValueError("no continuation marker where a message begins")
            size = _I32.unpack_from(buf, pos + 4)[0]
            if size == 0:  # end of stream
                return rows
            meta = buf[pos + 8:pos + 8 + size]
            if size < 0 or len(meta) < size:
                raise ValueError("a message's metadata runs past the payload")
            msg = _U32.unpack_from(meta, 0)[0]
            kind_at, body_at = _field(meta, msg, 1), _field(meta, msg, 3)
            body = 0 if body_at is None else _I64.unpack_from(meta, body_at)[0]
            if body < 0:
                raise ValueError("a negative body length")
            if kind_at is not None and meta[kind_at] == _RECORD_BATCH:
                header_at = _field(meta, msg, 2)
                if header_at is None:
                    raise ValueError("a record batch message without its header")
                batch = header_at + _U32.unpack_from(meta, header_at)[0]
                length_at = _field(meta, batch, 0)
                n = 0 if length_at is None else _I64.unpack_from(meta, length_at)[0]
                if n < 0:
                    raise ValueError("a negative row count")
                rows += n
            pos += 8 + size + body
            if pos > len(buf):
                raise ValueError("a message's body runs past the payload")
    except (struct.error, ValueError, IndexError) as exc:
        raise ArrowDecodeError(f"not a readable Arrow IPC stream: {exc}") from None
    return rows


def record_batches(messages: Iterable[Message | bytes]) -> Iterator[pa.RecordBatch]:
    """The record batches of Arrow messages, in order (msgpack rows are not converted:
    use ``to_record_batch`` for a mix)."""
    for m in messages:
        payload = m if isinstance(m, (bytes, bytearray, memoryview)) else m.payload
        yield from decode_batches(bytes(payload))


def to_record_batch(messages: Sequence[Message | bytes],
                    schema: pa.Schema | None = None) -> pa.RecordBatch:
    """One ``pyarrow.RecordBatch`` of ``messages``: Arrow messages as they are, msgpack
    rows (maps) converted with ``schema`` or, without it, pyarrow's inference over every
    row's columns (a column only some rows have is null in the others). Batches of
    different columns are joined the same way (a column of nulls takes the other's
    type); raises ArrowDecodeError for a payload that is neither, that is msgpack but not
    a map, or for columns of one name and two types."""
    pa = _pa()
    batches: list[Any] = []
    rows: list[Any] = []

    def flush_rows() -> None:
        if rows:
            try:
                batch = _rows_batch(pa, rows, schema)
            except pa.ArrowTypeError:  # a map keyed by numbers, say (Spark's map<int,_>):
                batch = _rows_batch(pa, string_keys(rows), schema)
            batches.append(batch)  # a struct's fields are named as JSON names its keys
            rows.clear()

    for m in messages:
        payload = bytes(m if isinstance(m, (bytes, bytearray, memoryview)) else m.payload)
        if is_arrow(payload):
            flush_rows()
            batches.extend(decode_batches(payload))
            continue
        try:
            row = msgpack.unpackb(payload, raw=False, timestamp=3, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise ArrowDecodeError(f"payload is neither Arrow IPC nor msgpack: {exc}") from None
        if not isinstance(row, dict):
            raise ArrowDecodeError(f"a msgpack {type(row).__name__}, not a row (a map of "
                                   "column name to value)")
        rows.append(row)
    flush_rows()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema or pa.schema([]))
    if len(batches) == 1:
        return batches[0]
    first = batches[0].schema
    if all(b.schema.equals(first) for b in batches):
        table = pa.Table.from_batches(batches)
    else:  # messages of other columns (another job, a row missing some): joined by name
        try:
            table = pa.concat_tables([pa.Table.from_batches([b]) for b in batches],
                                     promote_options="default")
        except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
            raise ArrowDecodeError(f"the messages' columns do not fit one batch: {exc}; "
                                   "read those of each schema in a call of its own") from None
    return table.combine_chunks().to_batches()[0]


def _rows_batch(pa: Any, rows: list[Any], schema: Any) -> Any:
    """msgpack rows as one batch: with ``schema`` its columns; without, every column any
    row has (``RecordBatch.from_pylist`` took the first row's and dropped the rest's)."""
    if schema is not None:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    return pa.RecordBatch.from_struct_array(pa.array(rows))
