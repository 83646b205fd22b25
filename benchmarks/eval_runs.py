"""NAK against ACK in the main job, repeated: `nakflow eval` N times, medians and ratios.

    .venv/bin/python benchmarks/eval_runs.py [--runs 5] [-- extra nakflow eval options]

Prints each run's rows/s per mode (rows over the Spark job's time), the slowest
receiver's median send-to-delivery latency, rows missing and repaired at every receiver,
the median NAK/ACK ratio (issue 13's target: >= 0.97 with 0 rows missing), the same ratio
over ``done``: the time until the last receiver had delivered its last row (the job ends
once every receiver holds every row; a queue that holds more at that moment delivers it
after the job), and ACK/NAK over that latency (the fuller queue waits longer). Each run
is a separate process (its own Spark), so runs do not warm each other up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def one_run(extra: list[str]) -> dict[str, dict[str, float]]:
    cmd = [sys.executable, "-m", "nakflow", "eval", "--modes", "nak,ack", "--json", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"nakflow eval failed:\n{proc.stderr[-3000:]}")
    table = json.loads(proc.stdout.strip().splitlines()[-1])["table"]
    out: dict[str, dict[str, float]] = {}
    for row in table:
        m = out.setdefault(row["mode"], {"rows_per_s": row["rows_per_s"], "missing": 0,
                                          "repaired": 0, "dropped": 0, "done_s": 0.0,
                                          "p50_ms": 0.0})
        for k in ("missing", "repaired", "dropped"):
            m[k] += row.get(k, 0)
        for k in ("done_s", "p50_ms"):  # the slowest receiver's
            m[k] = max(m[k], row.get(k) or 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("extra", nargs="*", help="options passed to nakflow eval (after --)")
    args = ap.parse_args()
    ratios, done_ratios, lat_ratios = [], [], []
    print(f"{'run':>3} {'nak rows/s':>10} {'ack rows/s':>10} {'nak/ack':>7} "
          f"{'nak done':>8} {'ack done':>8} {'ack/nak':>7} "
          f"{'nak p50 ms':>10} {'ack p50 ms':>10} "
          f"{'nak missing':>11} {'nak dropped':>11} {'nak repaired':>12} {'ack missing':>11}",
          flush=True)
    for i in range(args.runs):
        t0 = time.monotonic()
        r = one_run(args.extra)
        nak, ack = r["nak"], r["ack"]
        ratio = nak["rows_per_s"] / ack["rows_per_s"]
        ratios.append(ratio)
        done = ack["done_s"] / nak["done_s"] if nak["done_s"] else float("nan")
        done_ratios.append(done)
        if nak["p50_ms"]:
            lat_ratios.append(ack["p50_ms"] / nak["p50_ms"])
        print(f"{i + 1:>3} {nak['rows_per_s']:>10.0f} {ack['rows_per_s']:>10.0f} {ratio:>7.3f} "
              f"{nak['done_s']:>8.2f} {ack['done_s']:>8.2f} {done:>7.3f} "
              f"{nak['p50_ms']:>10.1f} {ack['p50_ms']:>10.1f} "
              f"{nak['missing']:>11.0f} {nak['dropped']:>11.0f} {nak['repaired']:>12.0f} "
              f"{ack['missing']:>11.0f}   ({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"median nak/ack over {args.runs} runs: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    print(f"median ack/nak time until the last row was delivered everywhere: "
          f"{statistics.median(done_ratios):.3f} (min {min(done_ratios):.3f}, "
          f"max {max(done_ratios):.3f}; above 1: nak delivered everything sooner)")
    if lat_ratios:
        print(f"median ack/nak median latency at the slowest receiver: "
              f"{statistics.median(lat_ratios):.3f} (min {min(lat_ratios):.3f}, "
              f"max {max(lat_ratios):.3f}; above 1: nak's rows waited less)")


if __name__ == "__main__":
    main()
