"""The adapter's configuration: one plain, picklable object shipped to every task."""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from nakflow import AckConfig, ConfigError, NakConfig, RepairConfig, check_mode
from nakflow.config import LINGER_S, check_values
from nakflow.wire.codec import MAX_NAME_CHARS
from transports import SocketOptions, check_pairs, parse_endpoints, receivers_expected

log = logging.getLogger("nakflow.spark")

#: ``WriterConfig.require_complete``: which receivers must confirm a task's rows.
REQUIRE_COMPLETE = ("live", "all", "none")


#: One receiver per data endpoint; a multicast group: at least one (as ``nakflow send``).
default_wait_receivers = receivers_expected


@dataclass(frozen=True)
class WriterConfig:
    """Where and how Spark tasks send their rows.

    Args:
        data: receivers' data endpoints (a list or comma-separated), or a multicast group.
        feedback: receivers' feedback endpoints, or the feedback multicast group.
        mode: ``"nak"`` (default), ``"ack"`` or ``"none"``.
        stream: stream name (receivers ignore other streams).
        run_id: prefix of every task's sender id. ``None`` (default): a fresh id per
            job, made on the driver when the writer is built. Pin it to make re-runs of
            the same job (or replays of a streaming micro-batch) recognisable as
            re-sends, so receivers with ``drop_duplicates`` deliver their rows once.
        nak, ack: policy parameters (see nakflow.NakConfig / AckConfig).
        repair: history and repair in ``nak`` mode (see nakflow.RepairConfig; on by
            default): a task answers receivers' repair requests until its sender closes.
        max_rate_msgs: a per-task cap in every mode (``nak``: its ceiling), rows/s.
        batch_rows: the most rows one DATA frame carries (the sender's natural
            batching: each row is sent with ``send``, and rows coalesce into a frame
            until it holds this many or the first has waited ``batch_linger_s``); also
            the most a task holds in memory beyond Spark's own iterator.
        batch_linger_s: longest a row waits for others to share its frame, s (0: one
            row a frame).
        remember_rate: (``nak``) a task starts from the rate the previous task in the same
            Python worker reached on the same receivers (within 10 s), not from slow
            start's initial rate (``Sender(remember_rate=True)``).
        serializer: ``row -> bytes``; default: msgpack of a dict per row.
        wait_receivers: before sending, wait until this many receivers answered (in
            ``ack`` also granted). None (default): one per data endpoint (1 for a
            multicast group). This guards against ZeroMQ's slow-joiner loss: without it
            the first rows of every task reach nobody who was not yet subscribed. 0: do
            not wait (late join then asks the history for them in ``nak``; ``ack`` and
            ``none`` lose them).
        wait_timeout_s: ... for at most this long; then the task fails (and is retried).
        send_timeout_s: a task that gets no permission to send for this long fails
            (e.g. ``ack`` with every receiver gone); ``None``: wait for ever.
        linger_s: how long closing a sender may keep unsent frames, s.
        options: socket options, e.g. ``SocketOptions(curve=Curve(...))`` (the key
            files must exist at those paths on every executor).
        shared_key_file: seal and check every frame with the shared key in this file
            (``nakflow keygen --shared``; for multicast, where CURVE cannot go). Each
            executor reads it from that path: the key never travels in the task closure.
        pushgateway: a Prometheus Pushgateway URL (``http://host:9091``); each task pushes
            its sender's metrics there when it ends (needs ``nakflow[metrics]`` on the
            executors; a failed push is logged and never fails the task).
        require_complete: which receivers must confirm that they hold the task's rows
            (their receipt at the sender's close) for the task to succeed: ``"live"``
            (every receiver heard that is still alive at the close; one that died or left
            is reported, not waited for), ``"all"`` (a receiver that went fails the task
            too) or ``"none"`` (report only). None (default): ``"live"`` in ``nak`` and
            ``ack``, ``"none"`` in ``none`` (no flow control: a retry would only drop
            again). A task that fails this raises ``nakflow.IncompleteDelivery`` after
            END, so Spark retries it under a new epoch; receivers with
            ``drop_duplicates`` deliver each row once.
        feedback_proxy: the feedback endpoints are a proxy's that forwards every
            receiver's feedback: ``data`` and ``feedback`` need not pair.
        arrow_rows: (the data source, ``df.write.format("nakflow")``) the most rows one
            message carries: each message is an Arrow IPC stream of one record batch.
            Rate limits, credit and the receivers' queues count messages, so with the
            data source a message is up to this many rows.
        metrics_path: (the data source) the driver's commit appends each task's metrics
            row (``METRICS_COLUMNS``) to this file as a JSON line.
    """

    data: Sequence[str] | str  # stored as a tuple of URIs
    feedback: Sequence[str] | str
    mode: str = "nak"
    stream: str = "default"
    run_id: str | None = None
    nak: NakConfig = field(default_factory=NakConfig)
    ack: AckConfig = field(default_factory=AckConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    max_rate_msgs: float | None = None
    batch_rows: int = 128
    batch_linger_s: float = LINGER_S
    remember_rate: bool = True
    serializer: Callable[[Any], bytes] | None = None
    wait_receivers: int | None = None
    wait_timeout_s: float = 30.0
    send_timeout_s: float | None = 300.0
    linger_s: float = 5.0
    options: SocketOptions | None = None
    shared_key_file: str | None = None
    pushgateway: str | None = None
    require_complete: str | None = None
    feedback_proxy: bool = False
    arrow_rows: int = 1024
    metrics_path: str | None = None

    def __post_init__(self) -> None:
        check_values(self)
        check_mode(self.mode)
        if self.require_complete is None:
            object.__setattr__(self, "require_complete",
                               "none" if self.mode == "none" else "live")
        if self.require_complete not in REQUIRE_COMPLETE:
            raise ConfigError(f"require_complete must be one of {', '.join(REQUIRE_COMPLETE)}; "
                              f"got {self.require_complete!r}")
        for name in ("data", "feedback"):
            value: str | Sequence[str] = getattr(self, name)
            object.__setattr__(self, name, tuple(parse_endpoints(value)))
        check_pairs(self.data, self.feedback, proxy=self.feedback_proxy)
        if not self.stream or len(self.stream) > 256:
            raise ConfigError("stream must be a name of 1..256 characters")
        if self.run_id is not None and not self.run_id:
            raise ConfigError("run_id must be None or a non-empty string")
        check_run_id(self.run_id)
        if self.arrow_rows < 1:
            raise ConfigError("arrow_rows must be >= 1")
        if self.batch_rows < 1 or not self.batch_linger_s >= 0:
            raise ConfigError("batch_rows must be >= 1 and batch_linger_s >= 0")
        if self.wait_receivers is None:
            object.__setattr__(self, "wait_receivers", default_wait_receivers(self.data))
        elif self.wait_receivers < 0:
            raise ConfigError("wait_receivers must be >= 0 or None")
        if not self.wait_timeout_s > 0 or not self.linger_s >= 0:
            raise ConfigError("wait_timeout_s must be > 0 and linger_s >= 0")
        if self.send_timeout_s is not None and not self.send_timeout_s > 0:
            raise ConfigError("send_timeout_s must be > 0 or None")
        if self.max_rate_msgs is not None and not 0 < self.max_rate_msgs < math.inf:
            raise ConfigError("max_rate_msgs must be a finite number > 0, or None (no "
                              f"limit), not {self.max_rate_msgs!r}")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> WriterConfig:
        """A config from a Spark data source's string options, named as the fields
        (case does not matter, as in Spark): ``data``, ``feedback``, ``mode``, ``stream``,
        ``run_id``, ``wait_receivers``, ... Raises ConfigError naming an unknown option or
        a value that does not parse."""
        fields = {f.name.lower(): f for f in dataclass_fields(cls) if f.name in _OPTIONS}
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            if key.lower() in SPARK_OPTIONS:
                continue
            f = fields.get(key.lower())
            if f is None:
                raise ConfigError(f"unknown nakflow option {key!r}; options: "
                                  f"{', '.join(sorted(_OPTIONS))}")
            parse = _OPTIONS[f.name]
            try:
                kwargs[f.name] = parse(raw)
            except ValueError:
                raise ConfigError(f"option {key}={raw!r}: not a valid value") from None
        for name in ("data", "feedback"):
            if name not in kwargs:
                raise ConfigError(f"option {name!r} is required (the receivers' endpoints)")
        return cls(**kwargs)

    @property
    def receivers_expected(self) -> int:
        """How many receivers each task waits for (``wait_receivers`` resolved)."""
        return int(self.wait_receivers or 0)

    def pinned(self) -> WriterConfig:
        """This config with a run id (a fresh one if none was given)."""
        if self.wait_receivers == 0:
            log.warning("WriterConfig(wait_receivers=0): tasks send without waiting for "
                        "receivers; rows sent before a receiver's subscription is up are "
                        "missed there (nak: late join asks the history for them)")
        if self.run_id is not None:
            return self
        return replace(self, run_id=f"run-{uuid.uuid4().hex[:12]}")

    def for_batch(self, batch_id: int | str) -> WriterConfig:
        """The config of one Structured Streaming micro-batch (``foreachBatch``)."""
        base = self.pinned()
        return replace(base, run_id=f"{base.run_id}/b{batch_id}")


#: What a task's sender id adds to the run id: ``/p<partition>`` (a Spark int), and in
#: a streaming query ``/b<micro-batch>`` (a long) before it.
TASK_SUFFIX = len(f"/p{2**31 - 1}")
BATCH_SUFFIX = len(f"/b{2**63 - 1}")


def check_run_id(run_id: str | None, *, streaming: bool = False) -> None:
    """Raise ConfigError unless every task's sender id made of ``run_id`` is a name frames
    carry (at most 256 characters, no NUL): a longer one made every frame malformed at
    the receivers. ``streaming``: room for the micro-batch too, refused at the query's
    start rather than at the batch whose number no longer fits."""
    if run_id is None:
        return
    longest = MAX_NAME_CHARS - TASK_SUFFIX - (BATCH_SUFFIX if streaming else 0)
    if len(run_id) > longest or "\0" in run_id:
        shape = "<run_id>/b<micro-batch>/p<partition>" if streaming else "<run_id>/p<partition>"
        raise ConfigError(f"run_id must be at most {longest} characters without NUL (a "
                          f"task's sender id is {shape}, a name of at most "
                          f"{MAX_NAME_CHARS}), not {len(run_id):,} characters")


def _flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(raw)


def _none_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda raw: None if raw.strip().lower() in ("", "none") else parse(raw)


#: Options Spark itself passes to a data source along with the user's, not nakflow's.
SPARK_OPTIONS = frozenset(("path", "checkpointlocation", "queryname"))

#: The options a data source takes (WriterConfig's scalar fields), with their parsers.
_OPTIONS: dict[str, Callable[[str], Any]] = {
    "data": str, "feedback": str, "mode": str, "stream": str, "run_id": _none_or(str),
    "max_rate_msgs": _none_or(float), "batch_rows": int, "batch_linger_s": float,
    "remember_rate": _flag, "wait_receivers": _none_or(int), "wait_timeout_s": float,
    "send_timeout_s": _none_or(float), "linger_s": float,
    "shared_key_file": _none_or(str), "pushgateway": _none_or(str),
    "require_complete": _none_or(str), "feedback_proxy": _flag, "arrow_rows": int,
    "metrics_path": _none_or(str),
}
