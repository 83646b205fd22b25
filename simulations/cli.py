"""``nakflow simulate``: registered through the ``nakflow.commands`` entry point."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from typing import Any

from nakflow import MODES, check_mode
from nakflow.cli import number_arg
from nakflow.tables import format_table

from .engines import CORES_MAX_STREAMS, ENGINES, MODEL_LEAVES_OUT

#: What the columns mean in a simulation (figures over all receivers, not one).
SIM_NOTES = {
    "goodput": "msgs/s delivered per receiver, mean over the receivers alive at the end",
    "slowest": "the lowest goodput of a receiver alive at the end, msgs/s",
    "send_rate": "msgs/s the sender(s) sent, summed",
    "engine": "cores: the real SenderCore/ReceiverCore (repair and every default signal); "
              "model: the vectorised model (see the note under the table)",
    "dropped": "messages dropped by full queues, summed over all receivers (nak repairs them "
               "on the cores)",
    "unrepaired": "messages still missing at the receivers alive at the end (on the cores, "
                  "after the senders' END and repairs)",
    "lost": "messages sent to receivers after they died, summed (a dead receiver "
            "cannot take them; the live ones are not held back)",
    "queue_peak": "most messages waiting in any one receiver's queue",
}


def register(sub: Any) -> None:
    p = sub.add_parser("simulate", help="latency simulations: ACK vs NAK at scale",
                       description="Run a named scenario of the simulator once per mode.",
                       epilog="exit status: 0 done (what a simulation loses is a result, "
                              "not an error); 2 bad arguments; 129/130/143 interrupted. See "
                              "docs/exit-codes.md.")
    p.add_argument("scenario", nargs="?", help="scenario name (see --list)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter (repeatable); sweeps take sweep=v1,v2,...")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated modes, each run on the same scenario")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="cores: the real protocol cores; model: the vectorised model; auto "
                        f"(default): cores up to {CORES_MAX_STREAMS} receivers x senders")
    p.add_argument("--seed", type=number_arg(int, minimum=0, strict=False), default=0,
                   help="random seed: the same seed gives the same run")
    p.add_argument("--out", default=None, metavar="DIR", help="write JSON, CSV and PNG plots")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--spark", nargs="?", const="local[*]", default=None, metavar="MASTER",
                   help="run each sweep point as a Spark task (default master local[*])")
    p.set_defaults(func=cmd_simulate)


def _overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--param wants NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


class _Progress:
    """A one-line progress bar on a terminal; a line per finished run otherwise."""

    def __init__(self, tasks: list[Any]) -> None:
        self.tasks = tasks
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()

    def update(self, i: int, frac: float) -> None:
        if not self.tty:
            return
        done = (i + frac) / len(self.tasks)
        bar = "#" * int(done * 30)
        _, label, _, mode, _, engine = self.tasks[i]
        sys.stderr.write(f"\r[simulate] [{bar:<30}] {done:5.1%} {label} {mode:<4} {engine} "
                         f"{time.monotonic() - self.t0:6.1f} s")
        sys.stderr.flush()

    def done(self, result: dict[str, Any]) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * 90 + "\r")
        point = "" if result["point"] == "-" else f" {result['point']}"
        print(f"[simulate] {result['scenario']}{point} {result['mode']} "
              f"({result['engine']}): "
              f"goodput {result['goodput']['overall']:.0f} msgs/s, dropped {result['dropped']}, "
              f"{result['wall_s']:.1f} s", file=sys.stderr, flush=True)


def cmd_simulate(args: argparse.Namespace) -> int:
    from .scenarios import SCENARIOS, run_tasks, table_rows, tasks_for

    if args.list:
        for s in SCENARIOS.values():
            sweep = f" (sweeps {s.sweep_param})" if s.sweep_param else ""
            print(f"{s.name:<16} {s.summary}{sweep}")
        return 0
    if not args.scenario:
        raise ValueError("name a scenario (see --list)")
    modes = [check_mode(m.strip()) for m in args.modes.split(",") if m.strip()]
    tasks = tasks_for(args.scenario, _overrides(args.param), modes, args.seed, args.engine)
    bar = _Progress(tasks)
    if args.spark:
        from spark_adapter.simulations import run_on_spark

        results = run_on_spark(tasks, args.spark)
        for r in results:
            bar.done(r)
    else:
        results = run_tasks(tasks, on_done=bar.done, progress=bar.update)
    rows = table_rows(results)
    if args.out:
        write_outputs(args.out, args.scenario, results, rows)
    if args.json:
        print(json.dumps({"scenario": args.scenario, "seed": args.seed, "table": rows,
                          "engine_note": engine_note(rows),
                          "results": [{k: v for k, v in r.items() if k != "trace"}
                                      for r in results]}, default=str))
    else:
        print(f"scenario {args.scenario} (seed {args.seed}), one row per mode"
              f"{' and sweep point' if len({r['point'] for r in rows}) > 1 else ''}")
        print(format_table(rows, notes=SIM_NOTES))
        print(engine_note(rows))
        if args.out:
            print(f"wrote {os.path.join(args.out, '')}")
    return 0


def engine_note(rows: list[dict[str, Any]]) -> str:
    """Which engine made the rows, and what the model leaves out if it made any."""
    note = (f"engine: the real cores for up to {CORES_MAX_STREAMS} receivers x senders "
            "(--engine auto), the vectorised model above")
    if any(r["engine"] == "model" for r in rows):
        note += f"\nmodel rows: {MODEL_LEAVES_OUT}"
    return note


def write_outputs(out: str, scenario: str, results: list[dict[str, Any]],
                  rows: list[dict[str, Any]]) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{scenario}.json"), "w") as f:
        json.dump({"scenario": scenario, "results": results}, f, default=str)
    with open(os.path.join(out, f"{scenario}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        from .plots import plot_results
    except ImportError as exc:  # matplotlib is the 'plot' extra
        print(f"[simulate] no plots: {exc} (pip install 'nakflow[plot]')", file=sys.stderr)
        return
    for path in plot_results(out, scenario, results):
        print(f"[simulate] wrote {path}", file=sys.stderr)
