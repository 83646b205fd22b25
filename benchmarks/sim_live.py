"""Simulation against a live run: the same deployment on the real cores in simulated time
(``nakflow simulate``'s engine, ``simulations/scenario_cores.py``) and live (receiver
processes, an in-process ``Sender``, ZeroMQ over loopback), for a slow, a dead and a
paused (SIGSTOP) receiver among three.

    .venv/bin/python benchmarks/sim_live.py [--duration-s 6] [--modes nak,ack]

Prints, per scenario and mode, the stream's goodput (messages sent per second: every
receiver that is alive at the end gets every one, nothing is missing in either run) and
the queue drops (repaired in nak), simulated and live, and their ratio. A live run shares
this machine's cores with everything else: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from nakflow import Sender
from nakflow.tables import format_table
from nakflow.testing import LocalReceivers, ReceiverSpec
from simulations import SimParams
from simulations.scenario_cores import simulate_on_cores

FAST = 10_000.0  # msgs/s each receiver consumes
SENDER_MAX = 15_000.0  # msgs/s the sender may send at most (below what it can: not CPU-bound)
CAPACITY = 5_000
PAYLOAD = b"x" * 100


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    slow: int = 0
    dead: int = 0
    paused: int = 0
    at_s: float = 2.0  # when the dead one dies, the paused one stops
    pause_for_s: float = 1.0


SCENARIOS = [
    Scenario("slow", "r0 consumes 2,500 msgs/s, the others 10,000", slow=1),
    Scenario("dead", "r0 killed (SIGKILL) at 2 s", dead=1),
    Scenario("paused", "r0 stopped (SIGSTOP) from 2 s to 3 s", paused=1),
]


def sim(sc: Scenario, mode: str, duration: float) -> dict[str, Any]:
    p = SimParams(receivers=3, duration_s=duration, rtt_s=0.001, capacity_msgs=CAPACITY,
                  consume_rate_msgs=FAST, sender_max_rate_msgs=SENDER_MAX, slow=sc.slow,
                  slow_fraction=0.25, dead=sc.dead, dead_at_s=sc.at_s, paused=sc.paused,
                  pause_at_s=sc.at_s, pause_for_s=sc.pause_for_s if sc.paused else 0.0,
                  pause_every_s=duration + 1.0)
    r = simulate_on_cores(p, mode, seed=1)
    return {"goodput": r["sent"] / r["duration_s"], "drops": r["dropped"],
            "missing": r["unrepaired"]}


def live(sc: Scenario, mode: str, duration: float) -> dict[str, Any]:
    rates = [FAST * 0.25 if sc.slow else FAST, FAST, FAST]
    specs = [ReceiverSpec(f"r{i}", consume_rate_msgs=rate, capacity_msgs=CAPACITY)
             for i, rate in enumerate(rates)]
    with LocalReceivers(specs, mode=mode, duration_s=duration + 60) as rx:
        rx.wait_ready()
        victim = rx.procs[0]
        with Sender(rx.data, rx.feedback, mode=mode, max_rate_msgs=SENDER_MAX) as tx:
            tx.wait_for_receivers(3, timeout=15)
            t0 = time.monotonic()
            fault = resumed = False
            while (now := time.monotonic() - t0) < duration:
                if not fault and (sc.dead or sc.paused) and now >= sc.at_s:
                    victim.send_signal(signal.SIGKILL if sc.dead else signal.SIGSTOP)
                    fault = True
                if sc.paused and fault and not resumed and now >= sc.at_s + sc.pause_for_s:
                    victim.send_signal(signal.SIGCONT)
                    resumed = True
                try:
                    tx.send(PAYLOAD, timeout=0.05)
                except TimeoutError:  # ack waiting for a stopped receiver's credit
                    pass
            sent = tx.snapshot()["sent"]
        if sc.dead:  # its report is gone with it: the others'
            victim.wait()
            rx.procs = rx.procs[1:]
        reports = rx.results(timeout_s=120)
    return {"goodput": sent / duration, "drops": sum(r["dropped"] for r in reports),
            "missing": sum(sent - r["delivered"] for r in reports)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--duration-s", type=float, default=6.0)
    ap.add_argument("--modes", default="nak,ack")
    args = ap.parse_args(argv)
    rows = []
    for sc in SCENARIOS:
        for mode in args.modes.split(","):
            s = sim(sc, mode, args.duration_s)
            print(f"[sim_live] {sc.name} {mode}: simulated", file=sys.stderr, flush=True)
            lv = live(sc, mode, args.duration_s)
            print(f"[sim_live] {sc.name} {mode}: live", file=sys.stderr, flush=True)
            rows.append({"scenario": sc.name, "mode": mode,
                         "sim_goodput": round(s["goodput"]), "live_goodput": round(lv["goodput"]),
                         "sim/live": round(s["goodput"] / lv["goodput"], 3),
                         "sim_drops": s["drops"], "live_drops": lv["drops"],
                         "sim_missing": s["missing"], "live_missing": lv["missing"]})
    print(f"three receivers consuming {FAST:,.0f} msgs/s, queues of {CAPACITY:,}, sender at "
          f"most {SENDER_MAX:,.0f} msgs/s, {args.duration_s:g} s")
    for sc in SCENARIOS:
        print(f"  {sc.name}: {sc.summary}")
    print(format_table(rows, notes=NOTES))
    return 0


NOTES = {
    "sim_goodput": "simulated: messages sent per second (every receiver alive at the end "
                   "got every one)",
    "live_goodput": "live, the same",
    "sim/live": "their ratio",
    "sim_drops": "messages the receivers' queues dropped, simulated (nak repairs them)",
    "live_drops": "live, the same",
    "sim_missing": "messages a receiver alive at the end never got, simulated",
    "live_missing": "live, the same",
}


if __name__ == "__main__":
    raise SystemExit(main())
