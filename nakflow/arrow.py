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

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from .errors import NakflowError

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


def preload() -> bool:
    """Import pyarrow now, if it is installed (True): a receiver does this before it says
    ready, so that its first Arrow message does not hold its consumer (and, importing
    under the GIL, its I/O thread) for the 0.1-0.4 s the import takes, a stall that
    filled a small queue and read as a paused consumer."""
    try:
        _pa()
    except NakflowError:
        return False
    return True


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


def rows_in(payload: bytes) -> int:
    """Rows a payload carries: an Arrow message's row count, else 1 (a msgpack row)."""
    if not is_arrow(payload):
        return 1
    return sum(b.num_rows for b in decode_batches(payload))


def record_batches(messages: Iterable[Message | bytes]) -> Iterator[pa.RecordBatch]:
    """The record batches of Arrow messages, in order (msgpack rows are not converted:
    use ``to_record_batch`` for a mix)."""
    for m in messages:
        payload = m if isinstance(m, (bytes, bytearray, memoryview)) else m.payload
        yield from decode_batches(bytes(payload))


def to_record_batch(messages: Sequence[Message | bytes],
                    schema: pa.Schema | None = None) -> pa.RecordBatch:
    """One ``pyarrow.RecordBatch`` of ``messages``: Arrow messages as they are, msgpack
    rows (maps) converted with ``schema`` or, without it, pyarrow's inference. The batches
    must share a schema; raises ArrowDecodeError for a payload that is neither."""
    pa = _pa()
    batches: list[Any] = []
    rows: list[Any] = []

    def flush_rows() -> None:
        if rows:
            batches.append(pa.RecordBatch.from_pylist(rows, schema=schema))
            rows.clear()

    for m in messages:
        payload = bytes(m if isinstance(m, (bytes, bytearray, memoryview)) else m.payload)
        if is_arrow(payload):
            flush_rows()
            batches.extend(decode_batches(payload))
            continue
        try:
            rows.append(msgpack.unpackb(payload, raw=False, timestamp=3))
        except (ValueError, msgpack.UnpackException) as exc:
            raise ArrowDecodeError(f"payload is neither Arrow IPC nor msgpack: {exc}") from None
    flush_rows()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema or pa.schema([]))
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches)
    return table.combine_chunks().to_batches()[0]
