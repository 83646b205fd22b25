"""``nakflow eval``: the same Spark job once per flow-control mode, from the executors.

For each mode: start receiver processes on loopback (one slow, optionally one
stalled mid-run), send a DataFrame with ``send_and_collect`` (one sender per
task), gather the senders' metrics from the executors and the receivers'
reports from their processes, and put both in one comparison table.
"""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from nakflow import MODES, ConfigError, check_mode
from nakflow.cli.commands import say
from nakflow.config import check_values
from nakflow.testing import LocalReceivers, ReceiverSpec

from .config import WriterConfig
from .shipping import executors_import
from .writer import send_and_collect

INPUT_FORMATS = ("parquet", "csv", "json")
WRITERS = ("datasource", "foreach")
STREAM = "eval"


@dataclass(frozen=True)
class EvalConfig:
    """What ``nakflow eval`` runs; every field is a command-line option."""

    #: Spark master URL.
    master: str = "local[*]"
    #: Rows generated (ignored with ``input_path``).
    rows: int = 100_000
    #: Partitions = Spark tasks = senders (with ``input_path``: repartition only if set).
    partitions: int | None = None
    #: Bytes of filler per generated row (the msgpack'd row is about 40 bytes more).
    row_bytes: int = 60
    #: Read the rows from this parquet / csv / json path instead.
    input_path: str | None = None
    #: Its format (default: from the file name; a directory is parquet).
    input_format: str | None = None
    modes: tuple[str, ...] = MODES
    #: The slow receiver consumes this many rows/s.
    slow_rate: float = 20_000.0
    #: Each receiver's queue bound, rows.
    capacity: int = 5_000
    #: Stall one receiver's consumer for this long (0: no stalled receiver), s.
    stall_for_s: float = 0.0
    #: ... this many seconds after it started, s.
    stall_at_s: float = 2.0
    #: External receivers as (data URIs, feedback URIs); empty: start local ones.
    receivers: tuple[tuple[str, str], ...] = ()
    #: The external receivers' stream (``nakflow receive --stream``; its default there).
    stream: str = "default"
    #: Rows per DATA frame (``foreach``); rows per Arrow message (``datasource``).
    batch_rows: int = 128
    #: How the job sends: ``datasource`` (``df.write.format("nakflow")``, Arrow messages
    #: of ``batch_rows`` rows) or ``foreach`` (``foreachPartition`` row by row, a
    #: msgpack row each); both run the library's NAK defaults.
    writer: str = "datasource"

    def __post_init__(self) -> None:
        check_values(self)
        for m in self.modes:
            check_mode(m)
        if not self.modes:
            raise ConfigError("name at least one mode")
        if self.rows < 1 or self.row_bytes < 0 or self.capacity < 1 or self.batch_rows < 1:
            raise ConfigError("rows, capacity and batch_rows must be >= 1, row_bytes >= 0")
        if self.partitions is not None and self.partitions < 1:
            raise ConfigError("partitions must be >= 1")
        if not 0 < self.slow_rate < math.inf or self.stall_for_s < 0 or self.stall_at_s < 0:
            raise ConfigError("slow_rate must be a finite number > 0, stall times >= 0")
        if self.input_format is not None and self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"input_format must be one of {', '.join(INPUT_FORMATS)}")
        if self.input_path is not None:  # before Spark starts (it took 6 s to say so)
            if not os.path.exists(self.input_path):
                raise ConfigError(f"input path not found: {self.input_path}")
            if self.read_format is None:
                raise ConfigError(f"cannot tell the format of {self.input_path}; give --format")
        if self.writer not in WRITERS:
            raise ConfigError(f"writer must be one of {', '.join(WRITERS)}")
        if self.receivers and len(self.modes) != 1:
            raise ConfigError("external receivers run one mode each: give --modes with one mode "
                              "(the one they were started with)")

    @property
    def read_format(self) -> str | None:
        """``input_format``, or the one its file name says (a directory: parquet)."""
        if self.input_format is not None or self.input_path is None:
            return self.input_format
        ext = os.path.splitext(self.input_path.rstrip("/"))[1].lstrip(".").lower()
        return {"parquet": "parquet", "csv": "csv", "json": "json", "jsonl": "json",
                "": "parquet"}.get(ext)

    @property
    def rows_per_message(self) -> int:
        """Rows one message carries: ``batch_rows`` with the data source, else 1."""
        return self.batch_rows if self.writer == "datasource" else 1

    def receiver_specs(self) -> list[ReceiverSpec]:
        """The local receivers; their rates and queues count messages, so with the data
        source the slow rate and the queue bound (given in rows) are divided by the rows
        a message carries."""
        per = self.rows_per_message
        cap = max(4, self.capacity // per)
        specs = [ReceiverSpec("slow", consume_rate_msgs=self.slow_rate / per,
                              capacity_msgs=cap, drop_duplicates=True),
                 ReceiverSpec("fast-1", capacity_msgs=cap, drop_duplicates=True)]
        if self.stall_for_s:
            specs.append(ReceiverSpec("stalled", stall_at_s=self.stall_at_s,
                                      stall_for_s=self.stall_for_s,
                                      capacity_msgs=cap, drop_duplicates=True))
        else:
            specs.append(ReceiverSpec("fast-2", capacity_msgs=cap, drop_duplicates=True))
        return specs


def load_input(spark: Any, cfg: EvalConfig) -> Any:
    """The evaluation's DataFrame: generated, or read from ``input_path``."""
    if cfg.input_path is None:
        parts = cfg.partitions or 4
        return spark.range(cfg.rows, numPartitions=parts).selectExpr(
            "id", "concat('row-', id) AS name", "id % 97 AS bucket",
            "cast(id AS double) / 7 AS value", f"repeat('x', {cfg.row_bytes}) AS filler")
    fmt = cfg.read_format  # the path and its format were checked with the config
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    df = reader.load(cfg.input_path)
    # round-robin repartition is deterministic in Spark (sorted first), so a retried
    # task re-sends the same rows under the same sequence numbers
    return df.repartition(cfg.partitions) if cfg.partitions else df


def _budget_s(cfg: EvalConfig, rows: int) -> float:
    return 120.0 + 3.0 * rows / cfg.slow_rate + cfg.stall_for_s


def run_mode(spark: Any, df: Any, mode: str, cfg: EvalConfig, *, rows: int,
             partitions: int) -> dict[str, Any]:
    """One Spark job under ``mode``: sender metrics from the executors, receiver reports."""
    run_id = f"eval-{mode}-{uuid.uuid4().hex[:8]}"
    if cfg.receivers:
        data = ",".join(d for d, _ in cfg.receivers)
        feedback = ",".join(f for _, f in cfg.receivers)
        wcfg = WriterConfig(data, feedback, mode=mode, stream=cfg.stream, run_id=run_id,
                            wait_receivers=len(cfg.receivers), batch_rows=cfg.batch_rows,
                            arrow_rows=cfg.batch_rows)
        t0 = time.monotonic()
        senders = send(spark, df, wcfg, cfg.writer)
        return {"mode": mode, "run_id": run_id, "rows": rows, "partitions": partitions,
                "job_s": time.monotonic() - t0, "senders": senders, "receivers": []}
    specs = cfg.receiver_specs()
    # ack receivers grant no task more than half the queue: tasks that start together
    # then never hold one receiver's queue each while waiting at another (AckConfig.max_share)
    extra = ["--ack-max-share", "0.5"] if mode == "ack" else []
    with LocalReceivers(specs, mode=mode, senders=partitions, stream=STREAM,
                        duration_s=_budget_s(cfg, rows), extra=extra) as rx:
        rx.wait_ready()
        wcfg = WriterConfig(rx.data, rx.feedback, mode=mode, stream=STREAM, run_id=run_id,
                            wait_receivers=len(specs),
                            batch_rows=cfg.batch_rows, arrow_rows=cfg.batch_rows)
        started_at, t0 = time.time(), time.monotonic()
        senders = send(spark, df, wcfg, cfg.writer)
        job_s = time.monotonic() - t0
        receivers = rx.results(timeout_s=_budget_s(cfg, rows))
    return {"mode": mode, "run_id": run_id, "rows": rows, "partitions": partitions,
            "job_s": job_s, "started_at": started_at, "senders": senders,
            "receivers": receivers}


def done_s(run: dict[str, Any], receiver: dict[str, Any]) -> float | None:
    """Seconds from the job's start until ``receiver`` delivered its last row to its
    application (local receivers share the driver's clock; None if it delivered none).
    The job ends once every receiver holds every row, queued or delivered: with a full
    queue behind it, the slow receiver delivers its last rows after the job ended."""
    last, began = receiver.get("last_delivery_at"), run.get("started_at")
    return None if last is None or began is None else round(last - began, 3)


def slowest_done_s(run: dict[str, Any]) -> float | None:
    """When the last receiver delivered its last row, s after the job began."""
    times = [t for r in run["receivers"] if (t := done_s(run, r)) is not None]
    return max(times) if times else None


def send(spark: Any, df: Any, wcfg: WriterConfig, writer: str) -> list[dict[str, Any]]:
    """Send ``df`` the way ``writer`` names; return the tasks' metrics rows (the data
    source's commit writes them to a file on the driver's side, read back here)."""
    if writer == "foreach":
        return send_and_collect(df, wcfg)
    from .datasource import NakflowDataSource

    spark.dataSource.register(NakflowDataSource)
    with tempfile.TemporaryDirectory(prefix="nakflow-eval-") as tmp:
        path = os.path.join(tmp, "tasks.jsonl")
        options = {k: str(v) for k, v in (
            ("data", ",".join(wcfg.data)), ("feedback", ",".join(wcfg.feedback)),
            ("mode", wcfg.mode), ("stream", wcfg.stream), ("run_id", wcfg.run_id),
            ("wait_receivers", wcfg.wait_receivers), ("batch_rows", wcfg.batch_rows),
            ("arrow_rows", wcfg.arrow_rows), ("metrics_path", path))}
        df.write.format("nakflow").mode("append").options(**options).save()
        with open(path) as f:
            return [json.loads(line) for line in f]


def table_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Comparison rows of one mode's run: one per receiver (one in all if external)."""
    senders = run["senders"]
    rows_per_s = round(run["rows"] / run["job_s"]) if run["job_s"] > 0 else 0
    common = {
        "mode": run["mode"], "rows_per_s": rows_per_s,
        "blocked_s": round(sum(s["blocked_s"] for s in senders), 2),
        "fb_frames": sum(s["feedback_frames"] for s in senders),
        "cuts": sum(s["cuts"] for s in senders),
    }
    if not run["receivers"]:
        return [{**common, "receiver": "(external)", "sent": sum(s["rows"] for s in senders)}]
    out = []
    for r in run["receivers"]:
        complete = {s["sender"] for s in r["senders"] if s["status"] == "complete"}
        latency = r.get("latency_ms") or {}
        out.append({
            "mode": run["mode"], "receiver": r["receiver_id"], "rows_per_s": rows_per_s,
            # rows/s: a message is one row (foreach) or an Arrow message of many
            "goodput": round(r["goodput_msgs"] * r["rows"] / r["delivered"]
                             if r["delivered"] else 0), "delivered": r["rows"],
            "missing": run["rows"] - r["rows"], "done_s": done_s(run, r),
            "p50_ms": _ms(latency.get("p50")), "p99_ms": _ms(latency.get("p99")),
            "dropped": r["dropped"],
            "repaired": r["repaired"], "lost": r["lost"], "dups": r["duplicates"],
            "complete": f"{len(complete)}/{run['partitions']}",
            "queue_peak": r["queue_peak"], "blocked_s": common["blocked_s"],
            "fb_frames": common["fb_frames"], "naks": sum(r["naks_sent"].values()),
            "credits": r["credits_sent"],
        })
    return out


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _count_rows(rows: Iterator[Any]) -> Iterator[int]:
    import nakflow.live.sender  # noqa: F401  (load what the senders need, once per worker)

    yield sum(1 for _ in rows)


def warm_up(df: Any) -> int:
    """Run one job over every partition before timing anything; return the row count.

    The first job of a session starts the executors' Python workers; without
    this, whichever mode ran first would pay for it.
    """
    return int(sum(df.rdd.mapPartitions(_count_rows).collect()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How many times ``warm_up_send`` sends the rows to nobody.
WARM_UP_SENDS = 3


def warm_up_send(spark: Any, df: Any, cfg: EvalConfig) -> None:
    """One untimed send of the real data the way the timed runs send it (``cfg.writer``,
    its batch sizes): mode none to endpoints nobody binds, waiting for no receiver, so
    the rows reach nobody, by design. A first write plans in fresh Python workers on the
    driver's side (seconds), and the first send of this DataFrame's rows converts its
    schema in the executors' workers: a warm-up of another DataFrame left about 0.15 s
    of that to whichever mode ran first (its first row reached the receivers 0.37-0.58 s
    into its job, the second mode's 0.23-0.42 s, in either order). One such send is not
    enough: the first rows of four timed runs after one reached the receivers 0.14, 0.10,
    0.07 and 0.08 s into their jobs (a NAK/ACK of 0.99 from the order alone), so it runs
    WARM_UP_SENDS times (the later ones about 0.6 s each).

    Then, with local receivers, each mode once over a sample of the rows to receivers of
    its own that all keep up (``warm_up_mode``)."""
    for _ in range(WARM_UP_SENDS):
        wcfg = WriterConfig(f"tcp://127.0.0.1:{_free_port()}",
                            f"tcp://127.0.0.1:{_free_port()}", mode="none",
                            stream="eval-warm-up",
                            run_id=f"eval-warm-up-{uuid.uuid4().hex[:8]}", wait_receivers=0,
                            batch_rows=cfg.batch_rows, arrow_rows=cfg.batch_rows)
        send(spark, df, wcfg, cfg.writer)
    if not cfg.receivers:
        for mode in cfg.modes:
            warm_up_mode(spark, df, mode, cfg)


#: The share of the rows each mode's warm-up sends (``warm_up_mode``).
WARM_UP_SAMPLE = 0.05


def warm_up_mode(spark: Any, df: Any, mode: str, cfg: EvalConfig) -> None:
    """Run ``mode`` once, untimed, over a WARM_UP_SAMPLE of the rows (``run_mode``: its
    own receivers, as the timed run's): the executors' workers run that mode's code with
    live receivers once before it is timed. Without it the mode that ran first paid for
    it: NAK/ACK was 0.976-0.986 with NAK first and 0.999-1.012 with ACK first (three runs
    each, 2026-11-28); with it, 0.977-0.994 and 0.975-1.005 (six each)."""
    run_mode(spark, df.sample(fraction=WARM_UP_SAMPLE, seed=1), mode, cfg, rows=0,
             partitions=df.rdd.getNumPartitions())


def run_eval(spark: Any, cfg: EvalConfig,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every mode of ``cfg`` on ``spark``; return runs, table and config (JSON-ready)."""
    if progress is not None:  # seconds of silence otherwise (8-12 s on 2 cores)
        progress("[eval] warming up (untimed): the executors' Python workers, the first "
                 f"write's planning, and each mode once over {WARM_UP_SAMPLE:.0%} of the rows ...")
    df = load_input(spark, cfg)
    partitions = df.rdd.getNumPartitions()
    rows = warm_up(df)
    if cfg.writer == "datasource" and not executors_import(spark, "pyarrow"):
        if progress is not None:
            progress("[eval] the executors' Python has no pyarrow, which the data source's "
                     "Arrow writer needs there: sending with foreachPartition (--writer "
                     "foreach); install pyarrow on the workers for the data source")
        cfg = replace(cfg, writer="foreach")
    warm_up_send(spark, df, cfg)
    runs: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    if progress is not None and not cfg.receivers:
        progress("[eval] local receivers on loopback: nak senders run the library's defaults, "
                 "ack receivers grant a task at most half a queue")
    for mode in cfg.modes:
        run = run_mode(spark, df, mode, cfg, rows=rows, partitions=partitions)
        runs.append(run)
        table += table_rows(run)
        if progress is not None:
            worst = max((rows - r["rows"] for r in run["receivers"]), default=None)
            tail = "" if worst is None else f", at most {worst:,} rows missing at a receiver"
            done = slowest_done_s(run)
            if done is not None:
                tail += f"; the last receiver delivered its last row {done:.1f} s after the start"
            slowest = max((p for r in table if r["mode"] == mode
                           if (p := r.get("p50_ms")) is not None), default=None)
            if slowest is not None:
                tail += f"; median latency at the slowest receiver {slowest:,.0f} ms"
            via = "the data source" if cfg.writer == "datasource" else "foreachPartition"
            progress(f"[eval] mode {mode}: {rows:,} rows from {partitions} tasks ({via}) in "
                     f"{run['job_s']:.1f} s ({rows / run['job_s']:,.0f} rows/s){tail}")
    return {"config": asdict(cfg), "spark_master": spark.sparkContext.master,
            "rows": rows, "partitions": partitions, "runs": runs, "table": table}


def print_progress(line: str) -> None:
    say(line)  # one write: Spark's JVM shares this stderr


def parse_receivers(specs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``DATA_URI,FEEDBACK_URI`` per receiver."""
    out = []
    for spec in specs:
        parts = [p.strip() for p in spec.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"--receivers wants DATA_URI,FEEDBACK_URI, got {spec!r}")
        out.append((parts[0], parts[1]))
    return tuple(out)
