"""``df.write.format("nakflow")`` and ``df.writeStream.format("nakflow")``: a PySpark
Python data source whose tasks hand Arrow record batches straight to a nakflow sender.

    from spark_adapter import NakflowDataSource
    spark.dataSource.register(NakflowDataSource)
    (df.write.format("nakflow").mode("append")
       .option("data", "tcp://host:5600").option("feedback", "tcp://host:5601").save())

Options are ``WriterConfig``'s fields by name (``WriterConfig.from_options``). Each task
is one sender, as with ``foreachPartition(nakflow_writer(...))``, but rows never become
Python objects: Spark gives the task Arrow record batches and each message is one Arrow
IPC stream of at most ``arrow_rows`` rows (``nakflow.arrow``). Flow control (rate, credit,
queue fill) counts these messages. A task finishes after END and its receivers' receipts
(commit after send); one that a live receiver lacks rows of raises IncompleteDelivery and
Spark retries it, and receivers with ``drop_duplicates`` deliver each row once. The
driver's ``commit`` gets every task's metrics row: it logs the rows sent and any receiver
a task reported incomplete (a task succeeds with one only under ``require_complete``
``"none"``) and, with the ``metrics_path`` option, appends the rows there as JSON lines.

Streaming: a micro-batch's sender ids are ``<query id>/b<batch id>/p<partition>``. The
query id lives in the checkpoint, so a query restarted from its checkpoint replays an
unfinished batch under the same ids and the receivers' dedupe drops what they hold.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from nakflow import ConfigError
from nakflow.arrow import encode_batch
from nakflow.wire.codec import DEFAULT_MAX_FRAME_BYTES

from .config import WriterConfig, check_run_id
from .serialize import check_sendable
from .writer import TaskIdentity, current_task, send_payloads

log = logging.getLogger("nakflow.spark")

#: Spark's local properties naming a streaming query (kept in its checkpoint) and the
#: micro-batch a task belongs to.
QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"


@dataclass
class TaskReport(WriterCommitMessage):
    """What a task hands the driver's ``commit``: its metrics row (``METRICS_COLUMNS``)."""

    metrics: dict[str, Any]

#: NAK's floor for Arrow messages, messages/s (``per_message``). At it a repair for one
#: receiver over tcp goes at the whole rate (``RepairConfig.share_alone``): 2 a second,
#: twice what a receiver waits between the tries it counts (10 in 1 s; none count while
#: its queue has no room). Over multicast such a repair gets a quarter of the rate.
MIN_FLOOR_MSGS = 2.0


#: The most bytes an Arrow message of more than one row is, half a frame's default bound
#: (``max_frame_bytes``, 16 MiB): 1,024 rows of 20 KB made a message of 20 MB, more than
#: any frame holds, and the task failed (``message of 20,120,400 bytes exceeds
#: max_frame_bytes``). A single row is sent whole, if a frame holds it.
MESSAGE_BYTES = DEFAULT_MAX_FRAME_BYTES // 2


def arrow_messages(batches: Iterator[Any], max_rows: int, counted: list[int],
                   max_bytes: int = MESSAGE_BYTES) -> Iterator[bytes]:
    """One Arrow IPC message per slice of at most ``max_rows`` rows of each batch, split
    by bytes until it is ``max_bytes`` or less (or one row), in order (the same slices
    on every attempt: Spark's batches are); adds the rows to ``counted[0]`` as each
    message is made."""
    for batch in batches:
        n = batch.num_rows
        for start in range(0, n, max_rows):
            yield from _within(batch.slice(start, min(max_rows, n - start)), max_bytes,
                               counted)


def _within(part: Any, max_bytes: int, counted: list[int]) -> Iterator[bytes]:
    message = encode_batch(part)
    rows = part.num_rows
    if len(message) <= max_bytes or rows <= 1:
        counted[0] += rows
        yield message
        return
    # pieces of the rows that fit at this message's mean row size, with a tenth to spare:
    # each encoded once more (halving encoded 20 MB three times over)
    per = max(1, rows * max_bytes * 9 // (10 * len(message)))
    for start in range(0, rows, per):
        yield from _within(part.slice(start, per), max_bytes, counted)


def per_message(config: WriterConfig) -> WriterConfig:
    """``config`` with its rates (given in rows/s, as for the row writer) turned into
    messages/s for messages of ``arrow_rows`` rows: NAK's initial rate, floor and
    ceiling and the per-task cap, so a rate means the same rows/s whichever writer sends.

    NAK's floor (``min_rate_msgs``) is divided too, but kept at ``MIN_FLOOR_MSGS`` or
    more: undivided (50 messages of 1,024 rows a second, 51k rows/s a task) no NAK could
    slow a task to a receiver taking 5k rows/s, whose queue overflowed faster than the
    history could keep what it asked back (``beyond_history``, the task failed); divided
    all the way (50 rows/s, a message every 20 s) the sender's repairs, which wait for
    its rate limit, came more slowly than the receiver then waited for them (10 tries 0.1 s
    apart, counted even while the sender still sent) and it gave up before the close."""
    per = config.arrow_rows
    if per == 1:
        return config
    nak = config.nak
    floor = min(nak.min_rate_msgs, max(MIN_FLOOR_MSGS, nak.min_rate_msgs / per))
    initial = (None if nak.initial_rate_msgs is None
               else max(floor, nak.initial_rate_msgs / per))
    nak = replace(nak, min_rate_msgs=floor, max_rate_msgs=max(floor, nak.max_rate_msgs / per),
                  initial_rate_msgs=initial)
    cap = None if config.max_rate_msgs is None else config.max_rate_msgs / per
    return replace(config, nak=nak, max_rate_msgs=cap)


def _send_task(config: WriterConfig, batches: Iterator[Any],
               identity: TaskIdentity) -> TaskReport:
    config = per_message(config)
    counted = [0]
    metrics = send_payloads(config, arrow_messages(batches, config.arrow_rows, counted),
                            identity, rows=lambda: counted[0])
    return TaskReport(metrics)


def _commit(config: WriterConfig, messages: list[Any], what: str) -> None:
    reports = [m.metrics for m in messages if isinstance(m, TaskReport)]
    short = [r for r in reports if r["receivers_incomplete"] or r["receivers_unconfirmed"]]
    rows = sum(r["rows"] for r in reports)
    log.info("nakflow %s: %d tasks sent %d rows", what, len(reports), rows)
    if config.metrics_path:
        with open(config.metrics_path, "a") as out:
            for r in reports:
                out.write(json.dumps(r) + "\n")
    if short:  # only with require_complete="none": the tasks reported and succeeded
        log.warning("nakflow %s: %d of %d tasks ended with receivers that did not confirm "
                    "their rows: %s", what, len(short), len(reports),
                    "; ".join(f"{r['sender_id']}: {r['at_close']}" for r in short[:8]))


class NakflowArrowWriter(DataSourceArrowWriter):
    """A batch write: each task one sender of Arrow messages."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        assert self.config.run_id is not None  # pinned on the driver
        return _send_task(self.config, iterator, current_task(self.config.run_id))

    def commit(self, messages: list[Any]) -> None:
        _commit(self.config, messages, f"write {self.config.run_id}")

    def abort(self, messages: list[Any]) -> None:
        log.warning("nakflow write %s aborted: a task failed; the receivers hold what "
                    "the tasks that ended sent (a re-run with the same run_id is "
                    "deduplicated)", self.config.run_id)


class NakflowStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write: each micro-batch's task one sender, named after the query id
    (from the checkpoint) and the batch id, so a replayed batch is a re-send."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:  # pragma: no cover (Spark runs write in a task)
            raise RuntimeError("the nakflow stream writer runs inside Spark tasks")
        batch = ctx.getLocalProperty(BATCH_ID_KEY)
        query = self.config.run_id or ctx.getLocalProperty(QUERY_ID_KEY)
        if batch is None or query is None:
            raise RuntimeError("nakflow's stream writer found no streaming query or batch "
                               "id in the task (is this a writeStream query?)")
        cfg = replace(self.config, run_id=str(query)).for_batch(batch)
        assert cfg.run_id is not None
        return _send_task(cfg, iterator, current_task(cfg.run_id))

    def commit(self, messages: list[Any], batchId: int) -> None:
        _commit(self.config, messages, f"batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("nakflow batch %d aborted: a task failed; the query's restart replays "
                    "it under the same sender ids (deduplicated)", batchId)


#: What a read of the ``nakflow`` format says.
READ_ONLY = ("the nakflow format only writes (df.write.format('nakflow'), "
             "df.writeStream.format('nakflow')): receivers bind and take what senders push. "
             "To read what arrived, run 'nakflow receive ... --sink parquet:DIR' and read "
             "DIR with spark.read.parquet, or take it in Python with nakflow.Receiver")


class NakflowDataSource(DataSource):
    """The ``nakflow`` format: ``spark.dataSource.register(NakflowDataSource)``, then
    ``df.write.format("nakflow").option("data", ...).option("feedback", ...).save()`` or
    ``df.writeStream.format("nakflow")...start()``. Options: ``WriterConfig``'s fields
    (``WriterConfig.from_options``)."""

    @classmethod
    def name(cls) -> str:
        return "nakflow"

    def _config(self, overwrite: bool) -> WriterConfig:
        if overwrite:
            raise ConfigError("nakflow sends rows to receivers; it cannot overwrite what "
                              "they hold: use mode('append')")
        return WriterConfig.from_options(dict(self.options))

    def writer(self, schema: Any, overwrite: bool) -> NakflowArrowWriter:
        check_sendable(schema)  # before any task: PySpark's own error was "KeyError: 21"
        return NakflowArrowWriter(self._config(overwrite).pinned())

    def schema(self) -> Any:
        """Asked only by a read: Spark's own error was ``[NOT_IMPLEMENTED] schema is not
        implemented``."""
        raise ConfigError(READ_ONLY)

    def reader(self, schema: Any) -> Any:
        raise ConfigError(READ_ONLY)

    def streamReader(self, schema: Any) -> Any:
        raise ConfigError(READ_ONLY)

    def simpleStreamReader(self, schema: Any) -> Any:
        raise ConfigError(READ_ONLY)

    def streamWriter(self, schema: Any, overwrite: bool) -> NakflowStreamWriter:
        check_sendable(schema)
        config = self._config(overwrite)
        check_run_id(config.run_id, streaming=True)
        return NakflowStreamWriter(config)
