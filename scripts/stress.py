"""Run one test (or any pytest selection) many times in a row, to find flakes.

    make stress TEST=tests/test_transports.py::test_epgm_suite_in_private_netns N=20
    make stress TEST=tests/test_live.py BURN=1 N=10     # beside a CPU burner on one core

Each run is a fresh pytest process. The output of every failed run is kept under
``stress-logs/`` so the failure can be read afterwards; the summary line says how
many runs passed. Bounded: at most N runs and at most ``--max-s`` seconds in all.
Exit status 0 only if every run passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BURNER = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("tests", nargs="+", help="pytest node ids or paths")
    ap.add_argument("-n", "--runs", type=int, default=20, help="how many runs")
    ap.add_argument("--burn", action="store_true",
                    help="keep one core busy with a CPU burner during the runs")
    ap.add_argument("--max-s", type=float, default=3600.0,
                    help="stop starting new runs after this many seconds")
    ap.add_argument("--logs", default="stress-logs", help="where failed runs' output goes")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    burner = None
    if args.burn:  # bounded by the same time budget, and killed at the end anyway
        burner = subprocess.Popen([sys.executable, "-c", BURNER.format(s=args.max_s + 600)])
    logs = Path(args.logs)
    start = time.monotonic()
    passed = failed = 0
    try:
        for i in range(1, args.runs + 1):
            if time.monotonic() - start > args.max_s:
                print(f"time budget of {args.max_s:.0f} s spent: stopping before run {i}")
                break
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   *args.tests], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            took = time.monotonic() - t0
            tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            if proc.returncode == 0:
                passed += 1
                print(f"run {i}/{args.runs}: pass  {took:6.1f} s  {tail}", flush=True)
            else:
                failed += 1
                logs.mkdir(exist_ok=True)
                log = logs / f"run-{i:03d}.txt"
                log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
                print(f"run {i}/{args.runs}: FAIL  {took:6.1f} s  {tail}  (output: {log})",
                      flush=True)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    load = " beside a CPU burner" if args.burn else ""
    print(f"{passed} of {passed + failed} runs passed{load} "
          f"({time.monotonic() - start:.0f} s): {' '.join(args.tests)}")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
