"""Spark values mean one thing everywhere (docs/types.md): a Spark job whose Python
workers run in America/New_York sends to a receiver in Asia/Tokyo, the session's time
zone UTC; every timestamp the receiver's JSON sink writes is an instant with its offset,
at microseconds, and parses to the instant the job wrote; ``timestamp_ntz`` stays a wall
time; decimals keep their digits. Then the docs' snippet reads the file back into pandas
as written (in a third time zone)."""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import msgpack
import pytest

from nakflow.testing import nakflow_cmd

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "types.md").read_text()
SNIPPET = re.compile(r"<!-- snippet: (\S+) -->\n```(\w+)\n(.*?)\n```", re.S)
SNIPPETS = {name: code for name, _lang, code in SNIPPET.findall(DOC)}

#: id -> the source instant (session time zone UTC). Whole and fractional seconds, and
#: the two instants New York's clocks show as the same wall time (01:30 on 2026-11-01,
#: first in EDT, then in EST): a naive local datetime can only tell them apart by fold.
INSTANTS = {0: "2026-11-25 10:00:00", 1: "2026-11-25 10:00:00.5",
            2: "2026-03-08 07:30:00.000001", 3: "2026-11-01 05:30:00",
            4: "2026-11-01 06:30:00"}

JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from spark_adapter import WriterConfig, nakflow_writer

    data, feedback, instants = sys.argv[1], sys.argv[2], eval(sys.argv[3])
    spark = (SparkSession.builder.master("local[1]")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    values = ", ".join(f"({i}, TIMESTAMP '{t}')" for i, t in instants.items())
    df = spark.sql(f\"\"\"
        SELECT id, at, TIMESTAMP_NTZ '2026-11-25 10:00:00.25' AS wall,
               CAST(id AS DECIMAL(20, 4)) / 3 AS amount, DATE '2026-11-25' AS day,
               CASE WHEN id = 1 THEN NULL WHEN id = 2 THEN double('NaN')
                    ELSE id * 1.5 END AS score
        FROM VALUES {values} AS t(id, at)\"\"\").repartition(1)
    config = WriterConfig(data, feedback, stream="types", wait_receivers=1)
    df.foreachPartition(nakflow_writer(config, schema=df.schema))
    print([r.asDict() for r in df.selectExpr("id", "cast(amount AS STRING) AS amount")
           .collect()])
    spark.stop()
""")


def _utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)


@pytest.mark.spark
@pytest.mark.slow
def test_timestamps_are_instants_whatever_the_workers_and_receivers_time_zones(tmp_path):
    pytest.importorskip("pyspark")
    sink, ready = tmp_path / "orders.jsonl", tmp_path / "ready.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    rx = subprocess.Popen(nakflow_cmd("receive", "--data", "tcp://127.0.0.1:*", "--feedback",
                                      "tcp://127.0.0.1:*", "--stream", "types", "--senders",
                                      "1", "--sink", f"file:{sink}", "--ready-file",
                                      str(ready), "--json"),
                          env={**env, "TZ": "Asia/Tokyo"}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not ready.exists():
            assert rx.poll() is None and time.monotonic() < end, rx.communicate()
            time.sleep(0.05)
        eps = json.loads(ready.read_text())
        (tmp_path / "job.py").write_text(JOB)
        job = subprocess.run([sys.executable, "job.py", eps["data"][0], eps["feedback"][0],
                              repr(INSTANTS)], cwd=tmp_path, capture_output=True, text=True,
                             env={**env, "TZ": "America/New_York"}, timeout=240)
        assert job.returncode == 0, job.stderr[-3000:]
        _, err = rx.communicate(timeout=60)
        assert rx.returncode == 0, err
    finally:
        if rx.poll() is None:
            rx.kill()
    exact = {r["id"]: r["amount"] for r in eval(job.stdout.strip().splitlines()[-1])}
    rows = {r["payload"]["id"]: r["payload"]
            for r in map(json.loads, sink.read_text().splitlines())}
    assert sorted(rows) == sorted(INSTANTS)
    for i, source in INSTANTS.items():
        row = rows[i]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", row["at"]), row
        assert dt.datetime.fromisoformat(row["at"]) == _utc(source), (i, row["at"], source)
        assert row["wall"] == "2026-11-25T10:00:00.250000"  # timestamp_ntz: no offset
        assert row["day"] == "2026-11-25" and row["amount"] == exact[i]  # every digit
    assert rows[1]["score"] is None and rows[2]["score"] == "NaN" and rows[0]["score"] == 0.0
    # the two instants New York shows as one wall time stay two instants
    assert rows[3]["at"] != rows[4]["at"]

    # the docs' snippet, as written, in a third time zone
    (tmp_path / "read-sink.py").write_text(SNIPPETS["types/read-sink.py"])
    read = subprocess.run([sys.executable, "read-sink.py"], cwd=tmp_path, capture_output=True,
                          text=True, env={**env, "TZ": "Europe/Paris"}, timeout=120)
    assert read.returncode == 0, read.stderr[-3000:]
    dtypes, records = read.stdout.strip().splitlines()[-2:]
    assert "datetime64[ns, UTC]" in dtypes or "datetime64[us, UTC]" in dtypes, dtypes
    for rec in json.loads(records):
        assert pd_instant(rec["at"]) == _utc(INSTANTS[rec["id"]]), rec


def pd_instant(text: str) -> dt.datetime:
    """pandas writes UTC instants as ...Z."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_serializer_takes_a_naive_timestamp_for_local_time_and_ntz_by_the_schema():
    """Without Spark: the writer's conversions on values as PySpark hands them over."""
    pytest.importorskip("pyspark")
    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        LongType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    from spark_adapter import msgpack_serializer, row_to_msgpack
    from spark_adapter.serialize import instant

    local = dt.datetime(2026, 1, 2, 3, 4, 5)  # naive: this process's time zone
    expect = local.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")
    assert instant(local) == expect and expect.endswith("+00:00")
    assert instant(dt.datetime(2026, 1, 2, 3, 4, 5, 500, tzinfo=dt.timezone.utc)) == \
        "2026-01-02T03:04:05.000500+00:00"
    schema = StructType([StructField("id", LongType()), StructField("at", TimestampType()),
                         StructField("wall", TimestampNTZType()),
                         StructField("walls", ArrayType(TimestampNTZType()))])
    row = Row(id=1, at=local, wall=local, walls=[local, None])
    got = msgpack.unpackb(msgpack_serializer(schema)(row))
    assert got == {"id": 1, "at": expect, "wall": "2026-01-02T03:04:05.000000",
                   "walls": ["2026-01-02T03:04:05.000000", None]}
    # without the schema every naive datetime is an instant
    assert msgpack.unpackb(row_to_msgpack(row))["wall"] == expect


def test_a_name_twice_is_refused_where_a_row_would_lose_a_value_by_it():
    """Without Spark: ``SELECT 1 AS a, 2 AS a`` reached a receiver as ``{'a': 2}``."""
    pytest.importorskip("pyspark")
    from pyspark.sql import Row
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    from nakflow import ConfigError
    from spark_adapter import msgpack_serializer, row_to_msgpack
    from spark_adapter.serialize import check_sendable

    with pytest.raises(ValueError, match=r"columns named twice: 'a'\. .*df\.toDF"):
        row_to_msgpack(Row("a", "a")(1, 2))
    inner = StructType([StructField("x", LongType()), StructField("x", StringType())])
    schema = StructType([StructField("a", LongType()), StructField("a", LongType()),
                         StructField("s", ArrayType(inner)), StructField("b", LongType())])
    for check in (check_sendable, msgpack_serializer):
        with pytest.raises(ConfigError, match=r"columns named twice: 'a', 's\.x'\."):
            check(schema)
    assert msgpack.unpackb(row_to_msgpack(Row(a=1, b=2))) == {"a": 1, "b": 2}
