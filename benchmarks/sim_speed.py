"""Simulator speed: wall time for 1,000 and 10,000 receivers over 60 s simulated at 1 ms,
and the vectorised model against the event-driven (SimPy) model on the same small case.

    .venv/bin/python benchmarks/sim_speed.py [--quick]

Targets (issue 4): 1,000 receivers <= 10 s, 10,000 receivers <= 60 s on this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import time

from simulations import SimParams, simulate
from simulations.events import simulate_events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="6 s simulated instead of 60 (CI)")
    args = ap.parse_args()
    duration = 6.0 if args.quick else 60.0
    rows = []
    for n in (1_000, 10_000):
        for mode in ("nak", "ack"):
            p = SimParams(receivers=n, slow=1, duration_s=duration, capacity_msgs=2_000,
                          rtt_jitter=0.5)
            t0 = time.perf_counter()
            simulate(p, mode, seed=1)
            rows.append({"case": f"N={n} {duration:g}s", "mode": mode,
                         "wall_s": round(time.perf_counter() - t0, 2)})
            print(json.dumps(rows[-1]), flush=True)
    small = SimParams(receivers=3, slow=1, slow_fraction=0.25, consume_rate_msgs=8_000.0,
                      sender_max_rate_msgs=20_000.0, capacity_msgs=500, rtt_s=0.01,
                      duration_s=3.0)
    for mode in ("nak", "ack", "none"):
        t0 = time.perf_counter()
        simulate(small, mode, seed=3)
        vec = time.perf_counter() - t0
        t0 = time.perf_counter()
        simulate_events(small, mode, seed=3)
        evt = time.perf_counter() - t0
        rows.append({"case": "small (3 rx, 3 s)", "mode": mode, "wall_s": round(vec, 3),
                     "event_driven_s": round(evt, 3), "speedup": round(evt / vec, 1)})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'case':<20} {'mode':<5} {'wall_s':>8} {'event_s':>8} {'speedup':>8}")
    for r in rows:
        print(f"{r['case']:<20} {r['mode']:<5} {r['wall_s']:>8} "
              f"{r.get('event_driven_s', '-'):>8} {r.get('speedup', '-'):>8}")


if __name__ == "__main__":
    main()
