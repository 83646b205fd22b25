"""Send a DataFrame's or RDD's rows to nakflow receivers from inside Spark tasks.

``df.foreachPartition(nakflow_writer(config))`` is the one-liner. Each task
builds its own ``nakflow.Sender`` (sockets cannot be pickled, so nothing of it
exists on the driver), pulls rows from its partition iterator only as fast as
the flow policy admits them (gate the source, never the sink: at most
``batch_rows`` rows are held), and finishes only after END: commit after send.
A task that raises leaves without END, so receivers see that attempt as
incomplete; Spark retries it under the next attempt number, which is the
sender's epoch, and a receiver with ``drop_duplicates`` delivers its rows once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from nakflow import IncompleteDelivery
from nakflow.keyfile import load_shared_key
from nakflow.live.sender import Sender
from nakflow.report import at_close_problems

from .config import WriterConfig
from .serialize import check_sendable, msgpack_serializer, row_to_msgpack

log = logging.getLogger("nakflow.spark")

#: Columns of a per-task metrics row, in order, with their Spark SQL types.
METRICS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "string"), ("sender_id", "string"), ("epoch", "bigint"),
    ("partition", "int"), ("attempt", "int"), ("stage", "int"), ("task_attempt_id", "bigint"),
    ("executor", "string"), ("mode", "string"),
    ("rows", "bigint"), ("bytes", "bigint"), ("frames", "bigint"),
    ("elapsed_s", "double"), ("rows_per_s", "double"), ("wait_receivers_s", "double"),
    ("blocked_s", "double"), ("credit_stalled_s", "double"),
    ("naks", "bigint"), ("naks_by_level", "map<string,bigint>"), ("cuts", "bigint"),
    ("final_rate_limit", "double"), ("feedback_frames", "bigint"), ("receivers", "int"),
    ("start_rate_limit", "double"), ("beyond_history", "bigint"), ("mismatched", "bigint"),
    ("receivers_complete", "int"), ("receivers_incomplete", "int"), ("receivers_gone", "int"),
    ("receivers_unconfirmed", "int"), ("at_close", "map<string,string>"),
    ("messages", "bigint"),
)
METRICS_DDL = ", ".join(f"{name} {kind}" for name, kind in METRICS_COLUMNS)


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task's sender is: sender id ``<run id>/p<partition>``, epoch = attempt number."""

    run_id: str
    partition: int
    attempt: int
    stage: int = -1
    task_attempt_id: int = -1

    @property
    def sender_id(self) -> str:
        return f"{self.run_id}/p{self.partition}"



def current_task(run_id: str) -> TaskIdentity:
    """The identity of the running Spark task. Raises RuntimeError on the driver."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("nakflow's Spark writer runs inside Spark tasks (foreachPartition, "
                           "mapPartitions); it cannot send from the driver")
    return TaskIdentity(run_id, ctx.partitionId(), ctx.attemptNumber(), ctx.stageId(),
                        ctx.taskAttemptId())


def _push(gateway: str, snap: dict[str, Any]) -> None:
    try:
        from nakflow.live.prometheus import push_metrics

        push_metrics(gateway, snap, job="nakflow-spark")
    except Exception as exc:  # metrics must never fail the task that sent the rows
        log.warning("pushing metrics to %s failed: %s", gateway, exc)


def send_partition(config: WriterConfig, rows: Iterable[Any], identity: TaskIdentity,
                   schema: Any = None) -> dict[str, Any]:
    """Send ``rows`` as one sender (id and epoch from ``identity``); return its metrics.

    Each row is sent with ``Sender.send`` (admitted one by one by the mode's policy)
    and rows coalesce into DATA frames of at most ``batch_rows`` (natural batching,
    ``batch_linger_s``). On success the stream ends with END and the close waits for the
    receivers' receipts; on any exception the sender leaves without END and the exception
    propagates (Spark retries). Raises ``nakflow.IncompleteDelivery`` after END when a
    receiver ``config.require_complete`` names did not confirm the whole stream.
    """
    serialize: Callable[[Any], bytes] = config.serializer or (
        row_to_msgpack if schema is None else msgpack_serializer(schema))
    return send_payloads(config, map(serialize, rows), identity)


def send_payloads(config: WriterConfig, payloads: Iterable[bytes], identity: TaskIdentity,
                  rows: Callable[[], int] | None = None) -> dict[str, Any]:
    """``send_partition`` for payloads made already (the data source's Arrow messages):
    one message each; ``rows`` says how many rows they carried in all once they are sent
    (None: one row a message)."""
    ack = config.ack
    expected = config.receivers_expected
    if expected > ack.min_receivers:  # ack: send nothing before all have granted
        ack = replace(ack, min_receivers=expected)
    t0 = time.monotonic()
    sender = Sender(config.data, config.feedback, mode=config.mode, stream=config.stream,
                    sender_id=identity.sender_id, epoch=identity.attempt, nak=config.nak,
                    ack=ack, repair=config.repair, max_rate_msgs=config.max_rate_msgs,
                    options=config.options, linger_s=config.batch_linger_s,
                    feedback_proxy=config.feedback_proxy,
                    frame_msgs=config.batch_rows, remember_rate=config.remember_rate,
                    shared_key=(None if config.shared_key_file is None
                                else load_shared_key(config.shared_key_file)))
    ok = False
    waited = 0.0
    try:
        if expected:
            sender.wait_for_receivers(expected, timeout=config.wait_timeout_s)
            waited = time.monotonic() - t0
        send, timeout = sender.send, config.send_timeout_s
        for payload in payloads:
            send(payload, timeout)
        sender.flush()
        ok = True
    finally:
        snap = sender.snapshot()
        if ok:
            sender.close(linger_s=config.linger_s)
        else:
            log.warning("sender %s epoch %d failed after %d rows; leaving without END",
                        identity.sender_id, identity.attempt, sender.sent)
            sender.abort(linger_s=config.linger_s)
        if config.pushgateway:
            _push(config.pushgateway, sender.snapshot())
    if ok:  # the close is over: what each receiver said
        snap = sender.snapshot()
    naks = {str(k): int(v) for k, v in (snap.get("naks_received") or {}).items()}
    # what the sender learnt of receivers' loss: repairs asked for that its history no
    # longer held, and frames from receivers in another mode or with another key
    beyond = int((snap.get("repair") or {}).get("gone", 0))
    mismatched = int(snap["mode_mismatch"]) + int(snap["key_mismatch"])
    if beyond or mismatched:
        log.warning("sender %s epoch %d: %d rows receivers asked for were beyond the history, "
                    "%d frames from receivers configured differently (mode or key)",
                    identity.sender_id, identity.attempt, beyond, mismatched)
    elapsed = time.monotonic() - t0
    sent_rows = snap["sent"] if rows is None else rows()
    at_close = snap.get("at_close") or []
    counts = snap.get("at_close_counts") or {}
    require = config.require_complete
    short = [] if require == "none" else at_close_problems(
        at_close, live_only=require == "live", counts=counts)
    if short:
        raise IncompleteDelivery(
            f"sender {identity.sender_id} epoch {identity.attempt} sent {sent_rows:,} rows, "
            f"but {'; '.join(short)} (require_complete={require!r}: the task fails and Spark "
            "retries it; receivers with drop_duplicates deliver each row once)", at_close)
    gone = [c for c in at_close if c["status"] != "complete"]
    if gone:
        log.warning("sender %s epoch %d: %s", identity.sender_id, identity.attempt,
                    "; ".join(at_close_problems(gone)))
    return {
        "run_id": config.run_id, "sender_id": identity.sender_id, "epoch": identity.attempt,
        "partition": identity.partition, "attempt": identity.attempt, "stage": identity.stage,
        "task_attempt_id": identity.task_attempt_id,
        "executor": f"{socket.gethostname()}/{os.getpid()}", "mode": config.mode,
        "rows": sent_rows, "messages": snap["sent"],
        "bytes": snap["bytes"],
        "frames": snap["frames"], "elapsed_s": round(elapsed, 6),
        "rows_per_s": round(sent_rows / elapsed, 1) if elapsed > 0 else 0.0,
        "wait_receivers_s": round(waited, 6), "blocked_s": snap["blocked_s"],
        "credit_stalled_s": snap["credit_stalled_s"], "naks": sum(naks.values()),
        "naks_by_level": naks, "cuts": int(snap["cuts"]),
        "final_rate_limit": None if snap["rate_limit"] is None else float(snap["rate_limit"]),
        "feedback_frames": snap["feedback_frames"], "receivers": int(snap["receivers"] or 0),
        "rtt_ms": snap["rtt_ms"], "start_rate_limit": snap["start_rate_msgs"],
        "beyond_history": beyond, "mismatched": mismatched,
        "receivers_complete": counts.get("complete", 0),
        "receivers_incomplete": counts.get("incomplete", 0),
        "receivers_gone": counts.get("gone", 0),
        "receivers_unconfirmed": counts.get("unconfirmed", 0),
        "at_close": {c["receiver"]: c["status"] + (f" ({c['why']})" if c["why"] else "")
                     for c in at_close},
    }


def _task_send(config: WriterConfig, rows: Iterable[Any], schema: Any = None,
               ) -> dict[str, Any]:
    assert config.run_id is not None  # pinned on the driver
    return send_partition(config, rows, current_task(config.run_id), schema)


def nakflow_writer(config: WriterConfig, *, metrics: Any = None, schema: Any = None,
                   ) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition`` / ``rdd.foreachPartition``.

    Args:
        config: where and how to send; its run id is fixed here, on the driver.
        metrics: an accumulator from ``metrics_accumulator(sc)``; each successful task
            adds its metrics row (Spark counts a task's update once, failed attempts never).
        schema: the DataFrame's schema (``df.schema``), for the default serializer: only
            with it are ``timestamp_ntz`` columns sent as wall times rather than instants
            (``spark_adapter.serialize``; PySpark hands both over as naive datetimes),
            and a column of a type no task can be handed (a year-month ``interval``) is
            a ``ConfigError`` here, on the driver, rather than in every task.
    """
    if schema is not None:
        check_sendable(schema)
    cfg = config.pinned()

    def write(rows: Iterable[Any]) -> None:
        report = _task_send(cfg, rows, schema)
        if metrics is not None:
            metrics.add([report])

    return write


def nakflow_batch_writer(config: WriterConfig, *, metrics: Any = None,
                         ) -> Callable[[Any, int], None]:
    """A function for Structured Streaming's ``writeStream.foreachBatch``.

    Runs on the driver once per micro-batch and sends the batch with
    ``foreachPartition``; sender ids carry the batch id. With a pinned ``run_id``
    a replayed batch (after a query restart from its checkpoint) is a re-send.
    """
    cfg = config.pinned()

    def write_batch(batch_df: Any, batch_id: int) -> None:
        batch_df.foreachPartition(nakflow_writer(cfg.for_batch(batch_id), metrics=metrics,
                                                 schema=batch_df.schema))

    return write_batch


def send_and_collect(data: Any, config: WriterConfig) -> list[dict[str, Any]]:
    """Send a DataFrame or RDD now (``mapPartitions``); return one metrics dict per partition.

    Only the successful attempt of a retried task reports (see its ``attempt``).
    """
    cfg = config.pinned()
    rdd = data.rdd if hasattr(data, "rdd") else data
    schema = getattr(data, "schema", None)
    if schema is not None:
        check_sendable(schema)

    def per_partition(rows: Iterator[Any]) -> Iterator[dict[str, Any]]:
        yield _task_send(cfg, rows, schema)

    reports: list[dict[str, Any]] = rdd.mapPartitions(per_partition).collect()
    return reports


def send_with_metrics(data: Any, config: WriterConfig) -> Any:
    """Send a DataFrame or RDD now; return a DataFrame with one metrics row per partition.

    The (small) result is collected at once, so the rows are sent exactly one
    time however often the returned DataFrame is used.
    """
    from pyspark.sql import SparkSession

    reports = send_and_collect(data, config)
    return metrics_frame(SparkSession.builder.getOrCreate(), reports)


class ListParam:
    """Accumulator parameter (pyspark's AccumulatorParam protocol): lists, concatenated."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, value1: list[Any], value2: list[Any]) -> list[Any]:
        value1.extend(value2)
        return value1


def metrics_accumulator(sc: Any) -> Any:
    """An accumulator that collects per-task metrics rows (a list of dicts)."""
    return sc.accumulator([], ListParam())


def metrics_frame(spark: Any, reports: Iterable[dict[str, Any]]) -> Any:
    """A DataFrame of metrics rows (e.g. an accumulator's value)."""
    return spark.createDataFrame([tuple(r[c] for c, _ in METRICS_COLUMNS) for r in reports],
                                 schema=METRICS_DDL)
