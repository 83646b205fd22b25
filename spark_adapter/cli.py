"""``nakflow eval``: registered through the ``nakflow.commands`` entry point."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from dataclasses import replace
from typing import Any

from nakflow import MODES
from nakflow.cli import number_arg
from nakflow.tables import format_table

from .shipping import SHIP_CHOICES

#: What the eval's columns mean in its setting.
EVAL_NOTES = {"delivered": "DataFrame rows the receiver took",
              "missing": "DataFrame rows it lacks (the job's rows - delivered)",
              "goodput": "rows per second this receiver delivered to its application",
              "dropped": "messages (the data source: Arrow messages of up to --batch-rows "
                         "rows; --writer foreach: one row each), as repaired, lost, dups "
                         "and queue_peak",
              "receiver": "slow consumes at --slow-rate; fast-N as fast as it can; stalled "
                          "(with --stall-for) stops for that long; every Spark task sends "
                          "to all of them",
              "complete": "Spark tasks (senders) whose rows this receiver holds whole (END came, "
                          "nothing missing) / tasks"}


_positive_int = number_arg(int, minimum=0, strict=True)
_non_negative_int = number_arg(int, minimum=0, strict=False)
_non_negative = number_arg(float, minimum=0, strict=False, finite=True)
_rate = number_arg(float, minimum=0, strict=True, finite=True)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval", help="the evaluation job: ACK vs NAK vs none from Spark executors",
        description="Start local receivers (one slow), send a DataFrame from Spark tasks once "
                    "per mode, and print a comparison of sender and receiver metrics.",
        epilog="exit status: 0 done, no nak or ack receiver missed a row; 1 a nak or ack "
               "receiver missed rows (the table says which); 2 bad arguments, or executors "
               "that cannot import nakflow; 129/130/143 interrupted. See docs/exit-codes.md.")
    p.add_argument("--master", default="local[*]",
                   help="Spark master URL, e.g. local[*], local-cluster[2,1,1024] or "
                        "spark://host:7077")
    p.add_argument("--standalone", type=_non_negative_int, default=0, metavar="WORKERS",
                   help="start a Spark standalone Master and this many Workers on 127.0.0.1 "
                        "for the run (separate JVMs, 1 core and 1 GiB each) and use it as "
                        "the master; 0: use --master")
    p.add_argument("--ship", default="auto", choices=SHIP_CHOICES,
                   help="send nakflow, pyzmq and msgpack to the executors with the job "
                        "(spark.archives): auto = for cluster masters, not local ones")
    p.add_argument("--executor-python", default=None, metavar="PATH",
                   help="the executors' Python (spark.pyspark.python) on a cluster master; "
                        "default: PYSPARK_PYTHON or the workers' python3")
    p.add_argument("--rows", type=_positive_int, default=100_000, help="rows to generate")
    p.add_argument("--partitions", type=_positive_int, default=None,
                   help="partitions = senders (default 4; with --input: as read)")
    p.add_argument("--row-bytes", type=_non_negative_int, default=60,
                   help="filler bytes per generated row")
    p.add_argument("--input", default=None, metavar="PATH", help="parquet, csv or json to send")
    p.add_argument("--format", default=None, choices=("parquet", "csv", "json"),
                   help="format of --input (default: from its file name)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated modes, run one after the other on the same data")
    p.add_argument("--slow-rate", type=_rate, default=20_000.0, metavar="ROWS_PER_S",
                   help="the slow receiver's consumption rate, rows/s")
    p.add_argument("--capacity", type=_positive_int, default=5_000, help="queue bound, rows")
    p.add_argument("--stall-for", type=_non_negative, default=0.0, metavar="S",
                   help="add a receiver whose consumer stalls this long (0: none)")
    p.add_argument("--stall-at", type=_non_negative, default=2.0, metavar="S",
                   help="... this long after it started")
    p.add_argument("--receivers", action="append", default=[], metavar="DATA,FEEDBACK",
                   help="an external receiver's endpoints (repeatable); none are started then")
    p.add_argument("--stream", default="default",
                   help="the external receivers' stream, as their 'nakflow receive --stream' "
                        "(default: default, receive's own)")
    p.add_argument("--batch-rows", type=_positive_int, default=128,
                   help="rows per message (the data source) or per DATA frame (foreach)")
    p.add_argument("--writer", default="datasource", choices=("datasource", "foreach"),
                   help="datasource: df.write.format('nakflow'), Arrow messages of "
                        "--batch-rows rows (default; needs pyarrow on the executors, else "
                        "foreach); foreach: foreachPartition(nakflow_writer), a msgpack "
                        "message a row")
    p.add_argument("--out", default=None, metavar="DIR", help="write eval.json and PNG plots")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)


#: What a task of nakflow's raises that says what went wrong in one line: a receiver
#: lacked rows, a peer ran another mode or key, nobody answered the wait (which names
#: what is wrong where), an endpoint or an option nakflow cannot use.
TASK_ERRORS = ("IncompleteDelivery", "PeerMismatch", "KeyMismatch", "TimeoutError",
               "EndpointError", "ConfigError")


def task_failure(exc: BaseException) -> str | None:
    """The line of a Spark job failure that nakflow raised in a task (``TASK_ERRORS``),
    the last one named (the worker's own, after Spark's wrapping), else None. Before a
    wait that ran out ended ``nakflow eval`` with two Python tracebacks."""
    found = None
    for line in str(exc).splitlines():
        for name in TASK_ERRORS:
            if line.lstrip().startswith(name + ":") or f".{name}:" in line:
                found = line[line.index(name):].strip()
    return found


def cmd_eval(args: argparse.Namespace) -> int:
    from .evaluation import EvalConfig, parse_receivers, print_progress, run_eval
    from .session import JVM_LOG, spark_session
    from .shipping import ExecutorImportError, explain
    from .standalone import StandaloneCluster

    cfg = EvalConfig(master=args.master, rows=args.rows, partitions=args.partitions,
                     row_bytes=args.row_bytes, input_path=args.input, input_format=args.format,
                     modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
                     slow_rate=args.slow_rate, capacity=args.capacity,
                     stall_for_s=args.stall_for, stall_at_s=args.stall_at,
                     receivers=parse_receivers(args.receivers), stream=args.stream,
                     batch_rows=args.batch_rows,
                     writer=args.writer)
    with contextlib.ExitStack() as stack:
        if args.standalone:
            cluster = stack.enter_context(StandaloneCluster(
                workers=args.standalone, progress=lambda t: print_progress(f"[eval] {t}")))
            cfg = replace(cfg, master=cluster.master)
        print_progress(f"[eval] starting Spark ({cfg.master}) ...")
        try:
            spark = spark_session(cfg.master, "nakflow-eval", ship=args.ship,
                                  executor_python=args.executor_python)
        except ExecutorImportError as exc:
            print_progress(f"[eval] error: {exc}")
            return 2
        if JVM_LOG:
            print_progress(f"[eval] Spark's own log: {JVM_LOG['path']}")
        try:
            result = run_eval(spark, cfg, progress=print_progress)
        except Exception as exc:
            clear = explain(exc)
            if clear is not None:
                print_progress(f"[eval] error: {clear}")
                return 2
            task = task_failure(exc)
            if task is None:
                raise
            print_progress(f"[eval] error: a Spark job failed: {task}")
            return 1
        finally:
            spark.stop()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "eval.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)
        written = [path]
        try:
            from .plots import plot_eval
        except ImportError as exc:
            print_progress(f"[eval] no plots (pip install 'nakflow[plot]'): {exc}")
        else:
            written += plot_eval(args.out, result)
        print_progress(f"[eval] wrote {', '.join(written)}")
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(format_table(result["table"], notes=EVAL_NOTES))
    short = [r for r in result["table"]
             if r["mode"] in ("nak", "ack") and r.get("missing", 0)]
    for r in short:
        print_progress(f"[eval] problem: mode {r['mode']}: {r['missing']:,} rows missing at "
                       f"receiver {r['receiver']}")
    return 1 if short else 0  # none's losses are what it is there to show
