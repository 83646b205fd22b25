"""The Spark data source (``df.write.format("nakflow")``, ``writeStream.format("nakflow")``)
with real Spark, real receiver processes and a real Parquet sink."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from nakflow.arrow import ARROW_MAGIC, to_record_batch
from nakflow.live.receiver import Receiver
from nakflow.testing import LocalReceivers, ReceiverSpec
from tests.stream_job import start_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]
on_both = pytest.mark.parametrize("spark", ["local", "local-cluster"], indirect=True)
on_local = pytest.mark.parametrize("spark", ["local"], indirect=True)

def typed_frame(spark, n: int, parts: int):  # type: ignore[no-untyped-def]
    """long, string, timestamp, decimal, nullable double (every 7th row null), made by
    Spark itself (a Python list of 20k rows takes longer to ship than to send)."""
    return spark.range(n, numPartitions=parts).selectExpr(
        "id", "IF(id % 11 = 0, '', concat('row-', id)) AS name",
        "timestamp_seconds(1774744200 + id * 37) AS at",
        "CAST(id / 100 AS DECIMAL(12,2)) AS price",
        "IF(id % 7 = 0, CAST(NULL AS DOUBLE), id * 0.5) AS score")


class Collector:
    """An in-process receiver keeping every payload."""

    def __init__(self, mode: str = "nak", stream: str = "ds") -> None:
        self.rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode=mode, stream=stream,
                           capacity_msgs=2_000, drop_duplicates=True)
        self.got: list = []
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        for m in self.rx:
            self.got.append(m)

    def finish(self, ends: int) -> dict:
        assert self.rx.wait_for_ends(ends, 60), self.rx.ends()
        assert self.rx.wait_drained(60)
        self.rx.close()
        self._t.join(10)
        return self.rx.snapshot()


@on_both
def test_a_typed_frame_round_trips_through_the_data_source_into_parquet(spark, tmp_path):
    from spark_adapter import NakflowDataSource

    spark.dataSource.register(NakflowDataSource)
    df = typed_frame(spark, 20_000, parts=3)
    out = tmp_path / "pq"
    metrics = tmp_path / "metrics.jsonl"
    parquet = LocalReceivers([ReceiverSpec("pq", drop_duplicates=True)], mode="nak",
                             senders=3, stream="ds", extra=["--sink", f"parquet:{out}"])
    mem = Collector()
    try:
        parquet.wait_ready()
        (df.write.format("nakflow").mode("append")
         .option("data", ",".join([*parquet.data, *mem.rx.data_endpoints]))
         .option("feedback", ",".join([*parquet.feedback, *mem.rx.feedback_endpoints]))
         .option("stream", "ds").option("arrow_rows", "500")
         .option("metrics_path", str(metrics)).save())
        report = parquet.results()[0]
        snap = mem.finish(ends=3)
    finally:
        parquet.close()
    assert report["exit_status"] == 0 and report["sink"]["error"] is None
    assert report["sink"]["not_written"] == 0
    back = spark.read.parquet(str(out))
    assert [(f.name, f.dataType.simpleString()) for f in back.schema] == [
        ("id", "bigint"), ("name", "string"), ("at", "timestamp"), ("price", "decimal(12,2)"),
        ("score", "double")]
    assert back.exceptAll(df).count() == 0 and df.exceptAll(back).count() == 0
    assert back.count() == 20_000
    # the in-process receiver: Arrow messages of at most arrow_rows rows, the same rows
    assert all(m.payload[:4] == ARROW_MAGIC for m in mem.got)
    batch = to_record_batch(mem.got)
    assert batch.num_rows == 20_000 and snap["delivered"] == len(mem.got)
    assert sorted(batch.column("id").to_pylist()) == list(range(20_000))
    assert max(to_record_batch([m]).num_rows for m in mem.got) <= 500
    tasks = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert sorted(t["partition"] for t in tasks) == [0, 1, 2]
    assert sum(t["rows"] for t in tasks) == 20_000
    assert all(t["receivers_complete"] == 2 for t in tasks)
    assert sum(t["messages"] for t in tasks) == len(mem.got)


@on_local
def test_bad_options_fail_the_write_with_a_clear_error(spark, tmp_path):
    from spark_adapter import NakflowDataSource

    spark.dataSource.register(NakflowDataSource)
    df = spark.range(10)
    with pytest.raises(Exception, match="unknown nakflow option 'speed'"):
        (df.write.format("nakflow").mode("append").option("data", "tcp://127.0.0.1:9")
         .option("feedback", "tcp://127.0.0.1:11").option("speed", "fast").save())
    with pytest.raises(Exception, match="option 'feedback' is required"):
        df.write.format("nakflow").mode("append").option("data", "tcp://127.0.0.1:9").save()
    with pytest.raises(Exception, match="cannot overwrite"):
        (df.write.format("nakflow").mode("overwrite").option("data", "tcp://127.0.0.1:9")
         .option("feedback", "tcp://127.0.0.1:11").save())
    # a run id no task's sender id can be made of: every frame was malformed at the
    # receivers (and a streaming query's would fail at the batch whose number no longer fit)
    with pytest.raises(Exception, match="run_id must be at most 244 characters without NUL"):
        (df.write.format("nakflow").mode("append").option("data", "tcp://127.0.0.1:9")
         .option("feedback", "tcp://127.0.0.1:11").option("run_id", "r" * 245).save())
    with pytest.raises(Exception, match=r"run_id must be at most 223 characters .* "
                       r"<run_id>/b<micro-batch>/p<partition>"):
        query = (spark.readStream.format("rate").load().writeStream.format("nakflow")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .option("data", "tcp://127.0.0.1:9").option("feedback", "tcp://127.0.0.1:11")
                 .option("run_id", "r" * 224).start())
        query.awaitTermination(60)  # its first batch fails with the error, or a bug
        raise AssertionError("the query ran without the error")
    # a read: Spark's own error was "[NOT_IMPLEMENTED] schema is not implemented"
    for read in (lambda: spark.read.format("nakflow").load(),
                 lambda: spark.read.schema("id long").format("nakflow").load().collect(),
                 lambda: spark.readStream.format("nakflow").load()):
        with pytest.raises(Exception, match=r"the nakflow format only writes .* To read what "
                           r"arrived, run 'nakflow receive \.\.\. --sink parquet:DIR'"):
            read()


@on_local
def test_a_column_no_task_can_be_handed_fails_the_write_on_the_driver_naming_it(spark,
                                                                               tmp_path):
    """A year-month interval: PySpark hands a task no such value, and the write failed
    in every task with pyarrow's ``KeyError: 21`` (the data source) or PySpark's
    ``YearMonthIntervalType.fromInternal is not implemented`` (a row writer)."""
    from nakflow import ConfigError
    from spark_adapter import NakflowDataSource, WriterConfig, nakflow_writer

    spark.dataSource.register(NakflowDataSource)
    df = spark.sql("SELECT id, INTERVAL '1-2' YEAR TO MONTH AS span, "
                   "named_struct('x', INTERVAL '3' MONTH) AS nested FROM range(3)")
    mem = Collector()
    try:
        named = (r"cannot send columns 'span' \(interval year to month\), 'nested\.x' "
                 r"\(interval month\): .*df\.withColumn\('span', df\['span'\]\.cast")
        with pytest.raises(Exception, match=named):
            (df.write.format("nakflow").mode("append").option("data", mem.rx.data_endpoints[0])
             .option("feedback", mem.rx.feedback_endpoints[0]).option("stream", "ds").save())
        cfg = WriterConfig(mem.rx.data_endpoints, mem.rx.feedback_endpoints, stream="ds")
        with pytest.raises(ConfigError, match=named):
            df.foreachPartition(nakflow_writer(cfg, schema=df.schema))
        stream = (spark.readStream.format("rate").load()
                  .selectExpr("value", "INTERVAL '1' MONTH AS span"))
        with pytest.raises(Exception, match=r"cannot send column 'span' \(interval month\)"):
            query = (stream.writeStream.format("nakflow")
                     .option("checkpointLocation", str(tmp_path / "checkpoint"))
                     .option("data", mem.rx.data_endpoints[0])
                     .option("feedback", mem.rx.feedback_endpoints[0]).option("stream", "ds")
                     .start())
            query.awaitTermination(60)  # its first batch fails with the error, or a bug
            raise AssertionError("the query ran without the error")
        assert mem.rx.snapshot()["senders"] == []  # no task ever started a sender
        # what the error says to do works: the interval arrives as text
        cast = df.select("id", df["span"].cast("string").alias("span"))
        (cast.write.format("nakflow").mode("append").option("data", mem.rx.data_endpoints[0])
         .option("feedback", mem.rx.feedback_endpoints[0]).option("stream", "ds").save())
        senders = cast.rdd.getNumPartitions()
        mem.finish(ends=senders)
    finally:
        mem.rx.close()
    rows = to_record_batch(mem.got).to_pylist()
    assert sorted(r["id"] for r in rows) == [0, 1, 2]
    assert {r["span"] for r in rows} == {"INTERVAL '1-2' YEAR TO MONTH"}


@on_local
def test_columns_named_twice_are_refused_and_no_row_goes_short_of_a_value(spark):
    """A row writer sent ``SELECT 1 AS a, 2 AS a`` as ``{'a': 2}``: a value lost unsaid."""
    from nakflow import ConfigError
    from spark_adapter import NakflowDataSource, WriterConfig, nakflow_writer

    spark.dataSource.register(NakflowDataSource)
    df = spark.sql("SELECT id AS a, id * 2 AS a FROM range(3)")
    mem = Collector()
    try:
        cfg = WriterConfig(mem.rx.data_endpoints, mem.rx.feedback_endpoints, stream="ds")
        with pytest.raises(ConfigError, match=r"columns named twice: 'a'\."):
            df.foreachPartition(nakflow_writer(cfg, schema=df.schema))  # on the driver
        with pytest.raises(Exception, match=r"columns named twice: 'a'\."):
            (df.write.format("nakflow").mode("append").option("data", mem.rx.data_endpoints[0])
             .option("feedback", mem.rx.feedback_endpoints[0]).option("stream", "ds").save())
        with pytest.raises(Exception, match=r"columns named twice: 'a'\."):  # in the task
            df.foreachPartition(nakflow_writer(cfg))
    finally:
        mem.rx.close()
    assert mem.got == []


@on_local
def test_a_variant_arrives_as_its_json_text_by_row_and_as_its_binary_form_by_arrow(spark):
    """A row writer's task failed on a ``variant`` (``cannot serialise VariantVal``);
    the data source sends Spark's Arrow form of it, which ``VariantVal`` reads."""
    import msgpack
    from pyspark.sql.types import VariantVal

    from spark_adapter import NakflowDataSource, WriterConfig, nakflow_writer

    spark.dataSource.register(NakflowDataSource)
    text = '{"a":1,"b":[1.5,"x",null],"c":{"d":true}}'
    df = spark.sql(f"SELECT 7 AS id, parse_json('{text}') AS v")
    by_row, by_arrow = Collector(), Collector()
    try:
        cfg = WriterConfig(by_row.rx.data_endpoints, by_row.rx.feedback_endpoints, stream="ds")
        df.foreachPartition(nakflow_writer(cfg, schema=df.schema))
        (df.write.format("nakflow").mode("append").option("data", by_arrow.rx.data_endpoints[0])
         .option("feedback", by_arrow.rx.feedback_endpoints[0]).option("stream", "ds").save())
        by_row.finish(ends=1)
        by_arrow.finish(ends=1)
    finally:
        by_row.rx.close()
        by_arrow.rx.close()
    assert [msgpack.unpackb(m.payload) for m in by_row.got] == [{"id": 7, "v": text}]
    (row,) = to_record_batch(by_arrow.got).to_pylist()
    assert row["id"] == 7
    assert VariantVal(row["v"]["value"], row["v"]["metadata"]).toJson() == text


def _start_stream(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen([sys.executable, "tests/stream_job.py", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@on_local
@pytest.mark.quiet  # a deadline on the first run's progress (its own Spark)
def test_a_stream_killed_mid_way_and_restarted_delivers_every_row_once(spark, tmp_path):
    """availableNow over 3 parquet files (one batch each), sent at 1,500 rows/s so that
    the first run (its own process) is surely mid-way when it is killed (SIGKILL: no
    cleanup at all); the restart from the checkpoint (in this process) replays the
    unfinished batch under the same sender ids and the receiver's dedupe delivers each
    row once."""
    src = tmp_path / "src"
    spark.range(4_500, numPartitions=3).selectExpr(
        "id", "concat('row-', id) AS name").write.parquet(str(src))
    rx = Collector(stream="st")
    args = [str(src), str(tmp_path / "ckpt"), rx.rx.data_endpoints[0],
            rx.rx.feedback_endpoints[0], "arrow_rows=100", "max_rate_msgs=1500"]
    first = _start_stream(args)
    try:
        deadline = time.monotonic() + 120
        while sum(len(to_record_batch([m])) for m in list(rx.got)) < 2_000:
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run sent too little"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        killed_at = len(rx.got)
        query = start_query(spark, *args)  # restarted here, from the checkpoint
        assert query.awaitTermination(300)
        assert query.exception() is None and query.lastProgress["batchId"] >= 1
        snap = rx.finish(ends=len(rx.rx.ends()))
    finally:
        if first.poll() is None:
            first.kill()
    ids = to_record_batch(rx.got).column("id").to_pylist()
    assert len(ids) == 4_500 and sorted(ids) == list(range(4_500)), (killed_at, snap)
    # the kill came mid-way through the second batch: its replay was a re-send, dropped
    assert snap["duplicates"] > 0 and snap["lost"] == 0
