"""The data source against the row writer, on the same DataFrame in the same run.

    .venv/bin/python benchmarks/datasource_speed.py [--rows 2000000] [--partitions 2]
        [--mode nak] [--master local[2]] [--repeat 3]

Two receiver processes (``nakflow receive``, fast consumers) on this machine take a cached
DataFrame of (id long, name string, value double) sent by
``df.foreachPartition(nakflow_writer(config))`` (a msgpack message per row) and by
``df.write.format("nakflow")`` (Arrow messages of ``arrow_rows`` rows), each path first
warmed up on a small write. Prints rows/s of each write (wall time of the Spark action),
what each receiver holds, and the ratio (issue 36: >= 4x, aim 10x). Exits 1 if a
receiver misses a row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from nakflow.testing import LocalReceivers, ReceiverSpec
from spark_adapter import NakflowDataSource, WriterConfig, nakflow_writer
from spark_adapter.session import spark_session


def one_write(df: Any, rows: int, parts: int, mode: str, path: str,
              arrow_rows: int) -> tuple[float, list[dict[str, Any]]]:
    """Write ``df`` by ``path`` ("foreach" or "datasource") to two fresh receivers:
    (seconds, their reports)."""
    specs = [ReceiverSpec(f"r{i}", capacity_msgs=20_000) for i in range(2)]
    with LocalReceivers(specs, mode=mode, senders=parts, stream="speed") as rx:
        rx.wait_ready()
        t0 = time.monotonic()
        if path == "foreach":
            cfg = WriterConfig(rx.data, rx.feedback, mode=mode, stream="speed")
            df.foreachPartition(nakflow_writer(cfg, schema=df.schema))
        else:
            (df.write.format("nakflow").mode("append").option("data", ",".join(rx.data))
             .option("feedback", ",".join(rx.feedback)).option("mode", mode)
             .option("stream", "speed").option("arrow_rows", str(arrow_rows)).save())
        took = time.monotonic() - t0
        return took, rx.results()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--mode", default="nak", choices=("nak", "ack", "none"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="writes per path (median)")
    ap.add_argument("--arrow-rows", type=int, default=1024)
    args = ap.parse_args()
    spark = spark_session(args.master, "nakflow-datasource-speed")
    spark.dataSource.register(NakflowDataSource)

    def frame(n: int) -> Any:
        df = spark.range(n, numPartitions=args.partitions).selectExpr(
            "id", "concat('row-', id) AS name", "id * 0.5 AS value").cache()
        df.count()
        return df

    small, df = frame(20_000), frame(args.rows)
    print(f"{args.rows:,} rows in {args.partitions} partitions, {args.mode}, "
          f"{args.master}, 2 receivers", flush=True)
    rates: dict[str, list[float]] = {"foreach": [], "datasource": []}
    bad = 0
    for path in rates:  # warm-up: the Python workers, the data source's first planning
        one_write(small, 20_000, args.partitions, args.mode, path, args.arrow_rows)
    for i in range(args.repeat):
        for path in rates:
            took, reports = one_write(df, args.rows, args.partitions, args.mode, path,
                                      args.arrow_rows)
            rates[path].append(args.rows / took)
            held = [r["delivered"] for r in reports]
            missing = [len(r["problems"]) for r in reports]
            bad += sum(missing)
            print(f"  {i + 1} {path:<10} {took:6.2f} s {args.rows / took:>11,.0f} rows/s  "
                  f"messages at each receiver {held}, problems {missing}", flush=True)
    fe, ds = statistics.median(rates["foreach"]), statistics.median(rates["datasource"])
    print(f"median foreachPartition {fe:,.0f} rows/s, data source {ds:,.0f} rows/s: "
          f"{ds / fe:.1f}x")
    spark.stop()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
