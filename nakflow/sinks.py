"""Where ``nakflow receive`` hands each delivered message: stdout, a file or a command.

A sink is the receiver's consumer: it writes in the receiving loop, so a slow file or
command slows delivery, the queue fills and the senders hear NAKs (or grant less
credit) as with any slow application. Each message becomes one JSON line::

    {"stream": "orders", "sender": "s-1f…", "epoch": 1795…, "seq": 41, "ts": 1795….5,
     "payload": {"id": 41, …}}

``payload`` is the msgpack-decoded value when the payload is msgpack whose value JSON can
carry (what the Spark writer sends), else the UTF-8 text; payloads that are neither come
as ``payload_b64`` (base64) instead. A sink that fails (a full disk, a command that
exited) raises SinkError; the caller stops and reports how many messages it could not
hand over, so nothing is lost silently.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

import msgpack

from ._errors import NakflowError
from ._receiver_core import Message

SINK_HELP = ("'-' (stdout), 'file:PATH' (appended) or 'cmd:COMMAND' (a shell command "
             "reading JSON lines on its stdin)")


class SinkError(NakflowError):
    """The sink could not take messages."""


def message_json(stream: str, msg: Message) -> str:
    """One message as a JSON line (without the newline)."""
    record: dict[str, Any] = {"stream": stream, "sender": msg.sender, "epoch": msg.epoch,
                              "seq": msg.seq, "ts": msg.ts}
    try:
        record["payload"] = msgpack.unpackb(msg.payload, raw=False, strict_map_key=False)
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError):
        pass  # not msgpack, or a value JSON has no form for
    try:
        record["payload"] = msg.payload.decode("utf-8")
    except UnicodeDecodeError:
        del record["payload"]
        record["payload_b64"] = base64.b64encode(msg.payload).decode("ascii")
    return json.dumps(record, separators=(",", ":"))


class JsonLinesSink:
    """JSON lines to a binary stream; ``close`` flushes (and closes what it opened)."""

    def __init__(self, stream: str, out: IO[bytes], owned: bool, name: str) -> None:
        self.stream, self.out, self.owned, self.name = stream, out, owned, name
        self.written = 0

    def write(self, msgs: Sequence[Message]) -> None:
        if not msgs:
            return
        data = "".join(message_json(self.stream, m) + "\n" for m in msgs).encode()
        try:
            self.out.write(data)
        except (OSError, ValueError) as exc:
            raise SinkError(f"sink {self.name} failed: {exc}") from exc
        self.written += len(msgs)

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
    """JSON lines into a shell command's stdin; ``close`` waits for it to finish."""

    def __init__(self, stream: str, command: str) -> None:
        self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE)
        assert self.proc.stdin is not None
        super().__init__(stream, self.proc.stdin, owned=True, name=f"cmd:{command}")

    def close(self) -> None:
        try:
            super().close()
        except SinkError:
            pass  # a closed pipe: the exit status below says why
        status = self.proc.wait(60)
        if status != 0:
            raise SinkError(f"sink {self.name} exited with status {status}")


def open_sink(spec: str, stream: str) -> JsonLinesSink:
    """A sink from its command-line form (see SINK_HELP). Raises ValueError if malformed."""
    if spec in ("-", "stdout"):
        return JsonLinesSink(stream, sys.stdout.buffer, owned=False, name="stdout")
    kind, _, target = spec.partition(":")
    if kind == "file" and target:
        try:
            out = open(target, "ab")  # noqa: SIM115 (the sink owns it; close() closes it)
        except OSError as exc:
            raise SinkError(f"--sink {spec}: cannot open {target}: {exc.strerror}") from None
        return JsonLinesSink(stream, out, owned=True, name=spec)
    if kind == "cmd" and target:
        return CommandSink(stream, target)
    raise ValueError(f"--sink must be {SINK_HELP}: {spec!r}")
