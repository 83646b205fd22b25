"""What the receivers' use of the advertised group RTT does, in the vectorised simulator.

    .venv/bin/python benchmarks/rtt_feedback.py

Runs the latency-sweep (10 receivers, queue 2,000, RTT 1-200 ms) and gc-pauses
scenarios in nak mode: receivers ignoring the RTT (``predict_rtts=0``,
``backoff_rtts=0``: decisions on today's fill, fixed 10 ms hold-off), with the
RTT-scaled hold-off only, with the fill predicted one or two RTTs ahead (one is the
default), and with both. Prints goodput per receiver, drops (this model has no
repair) and NAKs.
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nakflow.tables import format_table
from simulations import SCENARIOS, simulate

VARIANTS = {"ignore RTT": {"predict_rtts": 0.0, "backoff_rtts": 0.0},
            "hold-off x 0.5 RTT": {"predict_rtts": 0.0, "backoff_rtts": 0.5},
            "predict 1 RTT (default)": {"predict_rtts": 1.0, "backoff_rtts": 0.0},
            "predict 2 RTT": {"predict_rtts": 2.0, "backoff_rtts": 0.0},
            "predict 1 RTT + hold-off": {"predict_rtts": 1.0, "backoff_rtts": 0.5}}


def main() -> int:
    rows = []
    for scenario, overrides in (("latency-sweep", {}), ("gc-pauses", {})):
        for label, params in SCENARIOS[scenario].points(overrides):
            for name, nak_kw in VARIANTS.items():
                p = dataclasses.replace(params, nak=dataclasses.replace(params.nak, **nak_kw))
                r = simulate(p, "nak", seed=0)
                rows.append({"scenario": scenario, "point": label, "receivers": name,
                             "goodput": r["goodput"]["overall"], "dropped": r["dropped"],
                             "naks_at_sender": sum(int(v) for v in r["naks_at_sender"].values()),
                             "predicted": r["naks_predicted"]})
                print(f"[rtt_feedback] {scenario} {label} {name}: done", file=sys.stderr,
                      flush=True)
    print(format_table(rows, notes={
        "scenario": "the simulated deployment (nakflow simulate --list), in nak mode",
        "receivers": "how receivers use the group RTT senders advertise",
        "dropped": "messages dropped by full queues, all receivers (no repair here)",
        "naks_at_sender": "NAKs that reached the sender",
        "predicted": "NAKs whose level only the predicted fill reached"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
