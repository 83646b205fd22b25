"""Where ``nakflow receive`` hands each delivered message: stdout, a file or a command.

A sink is the receiver's consumer: it writes in the receiving loop, so a slow file or
command slows delivery, the queue fills and the senders hear NAKs (or grant less
credit) as with any slow application. Each message becomes one JSON line::

    {"stream": "orders", "sender": "s-1f…", "epoch": 1795…, "seq": 41, "ts": 1795….5,
     "payload": {"id": 41, …}}

``payload`` is the msgpack-decoded value when the payload is a msgpack map, array or
string (what the Spark writer sends: a row), written the way Spark's ``to_json`` writes
values (``json_value``: bytes as base64, NaN and the infinities as strings;
docs/types.md has the table per Spark type); else the UTF-8 text (``nakflow send
--input``'s lines: a line ``a`` is also msgpack, the number 97, and a Greek or Cyrillic
word can be too); else a msgpack number or null; payloads that are none of these come as
``payload_b64`` (base64) instead (``message_json``; ``nakflow receive --payload`` says
which a stream's payloads are, where the guess is not wanted). A sink that fails (a full
disk, a command that exited) raises SinkError; the caller stops and reports how many
messages it could not hand over, so nothing is lost silently.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

import msgpack

from ..core.receiver_core import Message
from ..errors import NakflowError
from ..values import json_value

log = logging.getLogger(__name__)

SINK_HELP = ("'-' (stdout), 'file:PATH' (appended), 'cmd:COMMAND' (a shell command "
             "reading JSON lines on its stdin) or 'parquet:DIR' (the rows as Parquet files, "
             "needs pyarrow)")


class SinkError(NakflowError):
    """The sink could not take messages."""


#: How the JSON-line sink reads a payload (``nakflow receive --payload``): ``auto``
#: tells msgpack from text (``message_json``), the others say which it is.
PAYLOAD_READINGS = ("auto", "msgpack", "text", "base64")


def message_json(stream: str, msg: Message, payload: str = "auto") -> str:
    """One message as a JSON line (without the newline), its payload read as ``payload``
    says (PAYLOAD_READINGS): a payload that is not what it says, or has no JSON form (a
    date beyond year 9999), comes as ``payload_b64``.

    ``auto``: a msgpack map, array or string (a Spark row, an RDD's string) as msgpack;
    else UTF-8 text as text (``nakflow send --input``'s lines); else a msgpack number,
    bool, null or binary; else base64. Text and msgpack overlap: the line ``a`` is also
    the msgpack of 97, and ``Я`` of -81 (text comes first for these), and a line of 130
    to 193 bytes that begins with ``ف`` (and some other Arabic letters) is a msgpack
    string (msgpack comes first: a Spark RDD's string of 128 to 191 bytes is one)."""
    record: dict[str, Any] = {"stream": stream, "sender": msg.sender, "epoch": msg.epoch,
                              "seq": msg.seq, "ts": msg.ts}
    value: Any = _NOT_MSGPACK
    if payload == "auto" or payload == "msgpack":
        try:
            value = msgpack.unpackb(msg.payload, raw=False, strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            pass
    kind = type(value)
    first = payload == "msgpack" or kind is dict or kind is list or kind is str
    if first and value is not _NOT_MSGPACK and (line := _with_value(record, value)):
        return line
    if payload == "auto" or payload == "text":
        try:
            record["payload"] = bytes(msg.payload).decode("utf-8")
            return json.dumps(record, separators=(",", ":"))
        except UnicodeDecodeError:
            pass
    if not first and value is not _NOT_MSGPACK and (line := _with_value(record, value)):
        return line
    record.pop("payload", None)
    record["payload_b64"] = base64.b64encode(msg.payload).decode("ascii")
    return json.dumps(record, separators=(",", ":"))


def _with_value(record: dict[str, Any], value: Any) -> str | None:
    """``record`` with ``value`` as its payload, as a JSON line; None where JSON has no
    form for the value (a date beyond year 9999)."""
    try:
        record["payload"] = json_value(value)
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, OverflowError):
        return None


#: ``message_json``'s mark for a payload that is no msgpack
_NOT_MSGPACK = object()


class JsonLinesSink:
    """JSON lines to a binary stream; ``close`` flushes (and closes what it opened);
    ``abandon`` lets go of it when the receiver never started."""

    def __init__(self, stream: str, out: IO[bytes], owned: bool, name: str,
                 payload: str = "auto") -> None:
        self.stream, self.out, self.owned, self.name = stream, out, owned, name
        self.payload = payload  # how each payload is read (message_json)
        self.written = 0
        self.rejected, self.rejected_why = 0, None  # any payload makes a line
        self.lost = 0  # messages handed over that a failure kept from being written

    def write(self, msgs: Sequence[Message]) -> None:
        if not msgs:
            return
        stream, payload = self.stream, self.payload
        data = "".join(message_json(stream, m, payload) + "\n" for m in msgs).encode()
        try:  # flushed: ``written`` counts what left, not what a buffer held (a full
            self.out.write(data)  # disk failed a later write, and took the buffer's lines
            self.out.flush()  # along, counted written)
        except (OSError, ValueError) as exc:
            self.lost += len(msgs)
            raise SinkError(f"sink {self.name} failed: {exc}") from exc
        self.written += len(msgs)

    def flush(self) -> None:
        """A stream ended: make what was written durable (lines are, once written)."""

    def abandon(self) -> None:
        if self.owned:
            self.out.close()

    def close(self) -> None:
        try:
            self.out.flush()
            if self.owned:
                self.out.close()
        except (OSError, ValueError) as exc:
            if self.owned:
                try:
                    self.out.close()  # a second try closes the descriptor for good
                except (OSError, ValueError):
                    pass
            raise SinkError(f"sink {self.name} failed: {exc}") from exc


class CommandSink(JsonLinesSink):
    """JSON lines into a shell command's stdin; ``close`` waits for it to finish.

    Checked before the receiver says it is ready: a program that cannot be found or run,
    or a command that ends within STARTUP_S (it cannot have read what is to come), is a
    SinkError at once."""

    #: A command that exits within this long of its start is taken for one that failed
    #: to start (the shell's "not found", a wrong option), s.
    STARTUP_S = 0.2

    def __init__(self, stream: str, command: str, payload: str = "auto") -> None:
        name = f"cmd:{command}"
        _check_program(command, name)
        self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE)
        try:
            status = self.proc.wait(self.STARTUP_S)
        except subprocess.TimeoutExpired:
            status = None
        if status is not None:
            self.abandon()
            why = {127: ": not found", 126: ": cannot be run"}.get(status, "")
            raise SinkError(f"--sink {name}: the command exited at once with status "
                            f"{status}{why} (its own message is above); it must read JSON "
                            "lines on its stdin until they end")
        assert self.proc.stdin is not None
        super().__init__(stream, self.proc.stdin, owned=True, name=name, payload=payload)

    def abandon(self) -> None:
        """The receiver never started: stop the command, quietly."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)

    def close(self) -> None:
        try:
            super().close()
        except SinkError:
            pass  # a closed pipe: the exit status below says why
        status = self.proc.wait(60)
        if status != 0:
            raise SinkError(f"sink {self.name} exited with status {status}")


def _check_program(command: str, name: str) -> None:
    """The command's program exists and may be run (a shell builtin or a pipeline's later
    programs are left to the start-up check)."""
    import os
    import shlex
    import shutil

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise SinkError(f"--sink {name}: {exc}") from None
    if not words:
        raise SinkError(f"--sink {name}: no command given")
    prog = words[0]
    if "=" in prog or prog in ("exec", "cd", "env", "nice", "nohup", "time"):
        return  # an assignment or a wrapper: the shell will tell
    if "/" in prog:
        if not os.path.isfile(prog):
            raise SinkError(f"--sink {name}: {prog}: no such file")
        if not os.access(prog, os.X_OK):
            raise SinkError(f"--sink {name}: {prog}: not executable")
    elif shutil.which(prog) is None and prog not in _SHELL_WORDS:
        raise SinkError(f"--sink {name}: {prog}: command not found on PATH")


#: Shell keywords and builtins a command may start with.
_SHELL_WORDS = frozenset(("if", "for", "while", "case", "{", "(", "exec", "read", "echo",
                          "printf", "set", "export", "ulimit", "umask", "trap", ":"))


class _ParquetTypes:
    """What Parquet can hold of the record batches a ParquetSink is given: one schema for
    batches inferred apart (``merged``), and a batch in a form Parquet can store
    (``writable``). Batch schemas already checked are remembered (up to 64)."""

    def __init__(self, pa: Any, pq: Any) -> None:
        self.pa, self.pq = pa, pq
        self._storable: set[Any] = set()  # batch schemas Parquet can store, checked

    def merged(self, old: Any, new: Any) -> Any:
        """One schema for rows of ``old`` and of ``new`` (``old``'s columns first): a null
        column takes the other's type, int64 and float64 make float64, structs the union
        of their fields. None when a column's types do not merge (int64 and string)."""
        if old is None or old == new:
            return new
        try:
            return self.pa.unify_schemas([old, new], promote_options="permissive")
        except (self.pa.ArrowInvalid, self.pa.ArrowTypeError, NotImplementedError):
            return None

    def writable(self, batch: Any) -> Any:
        """``batch`` with every struct of no fields, at any depth, a null: a msgpack row's
        empty map (``{}``, a Spark map with no entries) is inferred as one, and Parquet
        cannot store it (``Cannot write struct type ... with no child field``; the sink
        failed). Its column takes a struct's type in the file once a row has keys."""
        if any(self._empty_struct_in(f.type) for f in batch.schema):
            batch = self.pa.RecordBatch.from_arrays(
                [self._no_empty_structs(c) for c in batch.columns], names=batch.schema.names)
        if batch.schema not in self._storable:  # a type Parquet has no form for (a union):
            try:  # its message is rejected, the others written; the sink failed
                self.pq.write_table(batch.schema.empty_table(), self.pa.BufferOutputStream())
            except self.pa.ArrowException as exc:
                raise self.pa.ArrowNotImplementedError(
                    f"Parquet has no form for a type of these rows: {exc}") from None
            if len(self._storable) >= 64:
                self._storable.clear()
            self._storable.add(batch.schema)
        return batch

    def _empty_struct_in(self, t: Any) -> bool:
        """A struct of no fields is in type ``t``, at any depth (of structs and lists)."""
        types = self.pa.types
        if types.is_struct(t):
            return t.num_fields == 0 or any(self._empty_struct_in(f.type) for f in t)
        if types.is_list(t) or types.is_large_list(t):
            return self._empty_struct_in(t.value_type)
        return False

    def _no_empty_structs(self, arr: Any) -> Any:
        """``arr`` with each struct of no fields in its type a null (the rest as it is)."""
        pa, t = self.pa, arr.type
        if not self._empty_struct_in(t):
            return arr
        if arr.offset:  # a slice: its own buffers, so that its children line up
            arr = pa.concat_arrays([arr])
        if pa.types.is_struct(t):
            if t.num_fields == 0:
                return pa.nulls(len(arr))
            kids = [self._no_empty_structs(arr.field(i)) for i in range(t.num_fields)]
            return pa.StructArray.from_arrays(
                kids, fields=[pa.field(t.field(i).name, k.type) for i, k in enumerate(kids)],
                mask=arr.is_null())
        values = self._no_empty_structs(arr.values)  # a list's
        return type(arr).from_arrays(arr.offsets, values, mask=arr.is_null())


class ParquetSink:
    """The rows as Parquet files in a directory (``--sink parquet:DIR``).

    Arrow messages (the Spark data source's) are written as they are. msgpack rows (the
    ``foreachPartition`` writer's maps) become columns, each chunk's types inferred from its
    own rows and merged with what came before (``_ParquetTypes.merged``): a column null so
    far takes the type of its first value, an int column a float's, a map (a struct here)
    the union of the keys seen, so a value is never cast to a type it does not fit nor a key
    dropped. Rows are written in row groups of up to ROW_GROUP_ROWS; a file is closed
    (renamed from ``.part`` to ``.parquet``, readable from then on) when a stream ends and
    the queue is empty, when it holds FILE_ROWS rows, when later rows need a wider schema
    (the next file's is the merge of all before it, so the files read as one dataset with
    schema merging) or one that does not merge (a column of ints, then of strings), and at
    the receiver's stop (a signal too): nothing taken from the queue is left unwritten. A
    message that is no row (neither Arrow nor a msgpack map) or holds a value Parquet cannot
    take (an integer beyond int64, a union) is left out and counted (``rejected``); the
    others are written. An empty map (msgpack ``{}``) is written as a null: Parquet has no
    struct of no fields. Files are ``part-<start>-<n>.parquet``; the one being written is
    ``.part-<start>-<n>.parquet.part``, hidden (a leading dot) from Spark and pyarrow, which
    read every other file of a directory and failed on an open one.

    ``written`` counts the messages in closed files, the ones a reader gets; those handed
    over and not yet in one are ``pending``. A failure (a full disk at a row group or a
    footer, or pyarrow refusing what came) loses the open file and what is buffered: its
    messages are counted ``lost`` (the file is removed, as it cannot be read), so that
    ``written + rejected + lost + pending`` is every message handed over."""

    ROW_GROUP_ROWS = 128 * 1024
    FILE_ROWS = 4 * 1024 * 1024

    def __init__(self, directory: str) -> None:
        import os
        import time

        from ..arrow import _pa

        self.pa = _pa()
        import pyarrow.parquet as pq

        self.pq = pq
        self.name = f"parquet:{directory}"
        self.dir = directory
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"--sink {self.name}: cannot create {directory}: "
                            f"{exc.strerror}") from None
        if not os.access(directory, os.W_OK):
            raise SinkError(f"--sink {self.name}: {directory} is not writable")
        self.prefix = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        self.written = 0  # messages in closed files
        self.pending = 0  # messages handed over, not yet in a closed file
        self.lost = 0  # messages handed over, lost with a file a failure left unreadable
        self.rejected = 0  # messages that are no row it can write, left out
        self.rejected_why: str | None = None  # the first of them, and why
        self.rows = 0  # rows in closed or open files
        self.files: list[str] = []
        self._buf: list[Any] = []
        self._buf_msgs = 0  # messages in _buf
        self._file_msgs = 0  # messages in the open file
        self._buf_rows = 0
        self._buf_schema: Any = None  # the buffered batches' schemas merged
        self._schema: Any = None  # the open file's, or the last file's
        self._writer: Any = None
        self._path = ""
        self._file_rows = 0
        self._types = _ParquetTypes(self.pa, pq)

    def write(self, msgs: Sequence[Message]) -> None:
        if not msgs:
            return
        before = self._handed_over()
        try:
            self._write(msgs)
        except Exception as exc:  # a full disk (SinkError), or pyarrow refusing what came
            failure = exc if isinstance(exc, SinkError) else self._failed(exc)
            self.lost += len(msgs) - (self._handed_over() - before)  # none counted yet
            raise failure from exc

    def _handed_over(self) -> int:
        return self.written + self.pending + self.rejected + self.lost

    def _write(self, msgs: Sequence[Message]) -> None:
        batches = self._batches(msgs)
        self.pending += sum(n for _batch, n in batches)
        for batch, n in batches:
            merged = self._types.merged(self._buf_schema, batch.schema)
            if merged is None:  # a column's type changed for good: what came before goes
                self._write_buffer()
                merged = batch.schema
            self._buf_schema = merged
            self._buf.append(batch)
            self._buf_rows += batch.num_rows
            self._buf_msgs += n
        if self._buf_rows >= self.ROW_GROUP_ROWS:
            self._write_buffer()

    def _batches(self, msgs: Sequence[Message]) -> list[tuple[Any, int]]:
        """``msgs`` as record batches, each inferred from its own rows (nothing cast), and
        the messages in each: one, or, where a column's type changes within them, one per
        side of the change. A message that is no row it can write (not Arrow nor a
        msgpack map, a number beyond int64) is left out and counted: the others are
        written."""
        from ..arrow import ArrowDecodeError, to_record_batch

        try:
            return [(self._types.writable(to_record_batch(msgs)), len(msgs))]
        except (ArrowDecodeError, self.pa.ArrowException, OverflowError) as exc:
            if len(msgs) == 1:
                self._reject(msgs[0], exc)
                return []
        half = len(msgs) // 2
        return [*self._batches(msgs[:half]), *self._batches(msgs[half:])]

    def _reject(self, msg: Message, exc: Exception) -> None:
        self.rejected += 1
        if self.rejected == 1:
            self.rejected_why = (f"{msg.sender} epoch {msg.epoch} seq {msg.seq}: {exc}")
            log.warning("sink %s cannot write the message %s; it and any other such are "
                        "counted under the sink's 'rejected', the rest are written",
                        self.name, self.rejected_why)

    def _write_buffer(self) -> None:
        if not self._buf:
            return
        import os

        schema = self._types.merged(self._schema, self._buf_schema)
        if schema is None:  # a column changed its type for good: a file of its own
            schema = self._buf_schema
        if all(b.schema == schema for b in self._buf):  # Arrow messages of one schema
            table = self.pa.Table.from_batches(self._buf, schema)
        else:  # every batch in ``schema``: null columns filled, types widened, not narrowed
            table = self.pa.concat_tables(
                [schema.empty_table(), *(self.pa.Table.from_batches([b]) for b in self._buf)],
                promote_options="permissive")
        self._buf, self._buf_rows, self._buf_schema = [], 0, None
        msgs, self._buf_msgs = self._buf_msgs, 0  # still pending: a failure loses them
        if self._writer is not None and schema != self._schema:
            self._close_file()  # a wider schema, or one that does not merge
        try:
            if self._writer is None:
                name = f"{self.prefix}-{len(self.files):05d}.parquet"
                self._path = os.path.join(self.dir, name)
                self._writer = self.pq.ParquetWriter(self._open_path(), schema)
                self._schema = schema
            self._writer.write_table(table, row_group_size=self.ROW_GROUP_ROWS)
        except OSError as exc:
            raise self._failed(exc) from exc
        self._file_msgs += msgs
        self._file_rows += table.num_rows
        self.rows += table.num_rows
        if self._file_rows >= self.FILE_ROWS:
            self._close_file()

    def _open_path(self) -> str:
        """The open file's name: hidden, so that readers of the directory skip it."""
        import os

        head, tail = os.path.split(self._path)
        return os.path.join(head, f".{tail}.part")

    def _close_file(self) -> None:
        import os

        if self._writer is None:
            return
        try:
            self._writer.close()
            os.replace(self._open_path(), self._path)
        except OSError as exc:
            raise self._failed(exc) from exc
        self._writer = None
        self.files.append(self._path)
        self.written += self._file_msgs
        self.pending -= self._file_msgs
        self._file_rows = self._file_msgs = 0

    def _failed(self, exc: Exception) -> SinkError:
        """A write or a close failed (the disk, or pyarrow refusing what came: Parquet has
        no form for some values): the open file cannot be read, and is removed; its
        messages and the buffer's are lost, and counted. Nothing more is written."""
        import contextlib
        import os

        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(OSError):
                os.unlink(self._open_path())
        self.lost += self.pending
        self.rows -= self._file_rows
        self.pending = self._file_msgs = self._file_rows = self._buf_msgs = 0
        self._buf, self._buf_rows, self._buf_schema = [], 0, None
        why = exc if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        return SinkError(f"sink {self.name} failed: {why}")

    def flush(self) -> None:
        """A stream ended and the queue is empty: what is buffered goes into a closed,
        readable file."""
        try:
            self._write_buffer()
            self._close_file()
        except SinkError:
            raise
        except Exception as exc:  # pyarrow refusing what came: as a full disk's failure
            raise self._failed(exc) from exc

    def abandon(self) -> None:
        pass  # nothing was opened before the first rows

    def close(self) -> None:
        self.flush()


def open_sink(spec: str, stream: str, payload: str = "auto") -> JsonLinesSink | ParquetSink:
    """A sink from its command-line form (see SINK_HELP), its JSON lines' payloads read as
    ``payload`` says (PAYLOAD_READINGS; the Parquet sink reads rows only). Raises
    ValueError if malformed."""
    if payload not in PAYLOAD_READINGS:
        raise ValueError(f"--payload must be one of {', '.join(PAYLOAD_READINGS)}: "
                         f"{payload!r}")
    if spec in ("-", "stdout"):
        return JsonLinesSink(stream, sys.stdout.buffer, owned=False, name="stdout",
                             payload=payload)
    kind, _, target = spec.partition(":")
    if kind == "file" and target:
        try:
            out = open(target, "ab")  # noqa: SIM115 (the sink owns it; close() closes it)
        except OSError as exc:
            raise SinkError(f"--sink {spec}: cannot open {target}: {exc.strerror}") from None
        return JsonLinesSink(stream, out, owned=True, name=spec, payload=payload)
    if kind == "cmd" and target:
        return CommandSink(stream, target, payload)
    if kind == "parquet" and target:
        return ParquetSink(target)
    raise ValueError(f"--sink must be {SINK_HELP}: {spec!r}")
