"""Repair and the modes, simulated with the real protocol cores (simulations/cores.py).

    .venv/bin/python benchmarks/repair_sim.py [--quick]

Prints, per scenario and mode: the send rate, the worst receiver's goodput, what the
queues and the network dropped, what repair brought back, and what stayed missing.
Then repair requests per second at the sender as receivers are added (suppression):
shared loss with the cores; independent loss with the cores and, to 10,000 receivers,
the vectorised model.
Issue 13's targets: gc-pauses, NAK with repair 0 unrepaired and goodput >= ACK's;
latency sweep, NAK goodput >= 0.9x its 1 ms figure and 0 unrepaired where the history
covers 2x the bandwidth-delay product.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from nakflow import RepairConfig
from simulations.cores import CoreSimParams, simulate_cores
from simulations.fanout_repair import repair_requests

VARIANTS = (("nak+repair", "nak", True), ("nak", "nak", False), ("ack", "ack", True))


def row(label: str, point: str, p: CoreSimParams, mode: str) -> str:
    t0 = time.perf_counter()
    r = simulate_cores(p, mode, seed=1)
    rx = r["receivers"]
    worst = min(x["goodput_msgs"] for x in rx)
    drops = sum(x["queue_drops"] + x["in_flight_drops"] for x in rx)
    repaired = sum(x["repaired"] for x in rx)
    missing = sum(x["lost"] + x["dropped_unrepaired"] + x["beyond_history"] for x in rx)
    return (f"{point:>10} {label:>10} {r['send_rate_msgs']:>9.0f} {worst:>9.0f} {drops:>7} "
            f"{repaired:>8} {missing:>8} {r['rtt_ms'] or 0:>7.1f} "
            f"{time.perf_counter() - t0:>6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s instead of 6 (CI)")
    args = ap.parse_args()
    duration = 3.0 if args.quick else 6.0
    print(f"{'point':>10} {'mode':>10} {'send/s':>9} {'worst/s':>9} {'drops':>7} "
          f"{'repaired':>8} {'missing':>8} {'rtt_ms':>7} {'wall_s':>6}", flush=True)
    gc = CoreSimParams(receivers=4, paused=1, pause_for_s=0.3, duration_s=duration)
    for label, mode, repair in VARIANTS:
        p = gc if repair else replace(gc, repair=RepairConfig(enabled=False))
        print(row(label, "gc-pauses", p, mode), flush=True)
    for rtt in (0.001, 0.01, 0.1, 0.2):
        base = CoreSimParams(receivers=4, rtt_s=rtt, capacity_msgs=2_000, duration_s=duration,
                             consume_rate_msgs=20_000.0, data_loss=0.01)
        for label, mode, repair in VARIANTS:
            p = base if repair else replace(base, repair=RepairConfig(enabled=False))
            print(row(label, f"rtt={rtt * 1000:g}ms", p, mode), flush=True)
    print("\nrepair requests at the sender: 1 % of frames lost near the sender (every "
          "receiver misses the same ones), 10 ms RTT", flush=True)
    for n in (10, 30) if args.quick else (10, 30, 100):
        p = CoreSimParams(receivers=n, rtt_s=0.01, duration_s=min(duration, 2.0),
                          shared_loss=0.01)
        r = simulate_cores(p, "nak", seed=3)
        missing = sum(x["lost"] + x["dropped_unrepaired"] + x["beyond_history"]
                      for x in r["receivers"])
        print(f"  {n:>4} receivers: {r['repair']['requests'] / r['sim_s']:6.1f} requests/s, "
              f"{missing} missing", flush=True)
    print("\nrepair requests at the sender: 1 % of frames lost at each receiver on its own, "
          "10 ms RTT; cores (1 s of data), then the vectorised model (simulations/"
          "fanout_repair.py) at the cores' frame rate", flush=True)
    print(f"{'receivers':>10} {'source':>14} {'backoff_s':>9} {'frames/s':>8} "
          f"{'lost_by_any':>11} {'requests/s':>10} {'per_lost':>8} {'sent/s':>8}", flush=True)
    fps = 1_200.0
    for n in (10, 30) if args.quick else (10, 30, 100):
        p = CoreSimParams(receivers=n, rtt_s=0.01, duration_s=1.0, data_loss=0.01)
        r = simulate_cores(p, "nak", seed=3)
        fps = r["frames"] / p.duration_s
        rq = r["repair"]["requests"] / p.duration_s
        any_lost = 1.0 - 0.99 ** n  # expected share of frames someone lost
        print(f"{n:>10} {'cores':>14} {p.repair.backoff_s:>9} {fps:>8.0f} {any_lost:>11.1%} "
              f"{rq:>10.0f} {rq / (fps * any_lost):>8.2f} {r['sent']:>8}", flush=True)
    for backoff in (RepairConfig().backoff_s, 0.2):
        for n in (10, 100, 1_000, 10_000):
            m = repair_requests(n, loss=0.01, frames_per_s=fps, rtt_s=0.01, duration_s=2.0,
                                repair=RepairConfig(backoff_s=backoff), seed=1)
            print(f"{n:>10} {'model':>14} {backoff:>9} {fps:>8.0f} "
                  f"{m['frames_lost_by_anyone'] / m['frames']:>11.1%} "
                  f"{m['requests_per_s']:>10.0f} {m['requests_per_lost_frame']:>8.2f} "
                  f"{'-':>8}", flush=True)


if __name__ == "__main__":
    main()
