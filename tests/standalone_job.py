"""A driver program for the standalone-cluster tests, run as its own process (as a user's
job is): ``python -m tests.standalone_job MASTER EXECUTOR_PYTHON DATA FEEDBACK ROWS SHIP
[PUSHGATEWAY]``.

It sends ``ROWS`` rows in two partitions through the foreachPartition writer, with the
first attempt of partition 1 failing mid-way (Spark retries it), and prints the tasks'
metrics rows as one JSON list. An ExecutorImportError goes to stderr as its one line
and exit status 3.
"""

from __future__ import annotations

import json
import sys

from spark_adapter import WriterConfig, send_with_metrics
from spark_adapter.session import spark_session
from spark_adapter.shipping import ExecutorImportError
from tests.test_spark_adapter import example_frame, fail_first_attempt


def main(argv: list[str]) -> int:
    master, python, data, feedback, rows, ship, *rest = argv
    if rest == ["datasource"]:
        return write_with_the_data_source(master, python, data, feedback, int(rows), ship)
    pushgateway = rest[0] if rest else None
    try:
        spark = spark_session(master, "nakflow-standalone-test", ship=ship,
                              executor_python=python)
    except ExecutorImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    try:
        cfg = WriterConfig(data.split(","), feedback.split(","), stream="test",
                           wait_receivers=1, pushgateway=pushgateway,
                           serializer=fail_first_attempt(partition=1, after_rows=1_500))
        metrics = send_with_metrics(example_frame(spark, int(rows), 2), cfg).collect()
        print(json.dumps([m.asDict(recursive=True) for m in metrics]))
    finally:
        spark.stop()
    return 0


def write_with_the_data_source(master: str, python: str, data: str, feedback: str,
                               rows: int, ship: str) -> int:
    """``df.write.format("nakflow")`` from the cluster's executors; prints the tasks'
    metrics rows (the driver's commit writes them) as one JSON list."""
    import os
    import tempfile

    from spark_adapter import NakflowDataSource

    spark = spark_session(master, "nakflow-standalone-datasource", ship=ship,
                          executor_python=python)
    try:
        spark.dataSource.register(NakflowDataSource)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tasks.jsonl")
            (example_frame(spark, rows, 2).write.format("nakflow").mode("append")
             .option("data", data).option("feedback", feedback).option("stream", "test")
             .option("metrics_path", path).save())
            with open(path) as f:
                print(json.dumps([json.loads(line) for line in f]))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
