"""A sender its application held back, then a burst: what reaches a slow consumer.

    .venv/bin/python benchmarks/app_limited.py [--runs 3] [--modes nak,ack]

One receiver, a queue of 2,000 and a consumer that takes ~20,000 msgs/s; one sender
whose application sends 20,000 msgs/s of 100 B for ``--paced-s`` (1 s), then 20,000
messages as fast as ``send`` lets it. Prints, per run, the sender's NAK limit just
before the burst, how long the burst took, and what the receiver's queue dropped (NAK
repairs them: every stream must end complete). A limit that grew unused lets the burst
through at once (docs/design/history.md, "an unused limit does not grow"). Real
sockets on 127.0.0.1, bounded: each run ends within about 3 s or fails at 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nakflow import Receiver, Sender
from nakflow.tables import format_table

RATE = 20_000  # msgs/s: what the application sends at first, and what the consumer takes
BURST = 20_000  # messages sent as fast as the limit lets them
CAPACITY = 2_000  # the receiver's queue
PAYLOAD = b"x" * 100
NOTES = {"limit_before": "the sender's NAK limit just before the burst, msgs/s (- in ack)",
         "burst_s": "s the burst of 20,000 took",
         "status": "the stream at the receiver: complete when every seq up to END came"}


def paced(count: int, t0: float, every: int) -> None:
    """Sleep until ``count`` items at RATE from ``t0`` are due, every ``every`` items."""
    if count % every == 0 and (ahead := count / RATE - (time.monotonic() - t0)) > 0:
        time.sleep(ahead)


def one_run(mode: str, paced_s: float) -> dict[str, Any]:
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode=mode,
                  capacity_msgs=CAPACITY) as rx:
        got = [0]

        def consume() -> None:
            t0 = time.monotonic()
            for _ in rx.messages(senders=1, timeout=30):
                got[0] += 1
                paced(got[0], t0, 200)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        with Sender(rx.data_endpoints, rx.feedback_endpoints, mode=mode) as tx:
            tx.wait_for_receivers(1, timeout=10)
            t0, sent = time.monotonic(), 0
            while time.monotonic() - t0 < paced_s:
                tx.send(PAYLOAD)
                sent += 1
                paced(sent, t0, 100)
            limit = (tx.snapshot().get("policy") or {}).get("rate_limit")
            b0 = time.monotonic()
            for _ in range(BURST):
                tx.send(PAYLOAD)
            burst_s = time.monotonic() - b0
        consumer.join(timeout=30)
        snap = rx.snapshot()
    stream = snap["senders"][0]
    return {"mode": mode, "limit_before": "-" if limit is None else round(limit),
            "burst_s": round(burst_s, 3), "sent": sent + BURST, "delivered": got[0],
            "dropped": snap.get("dropped"), "repaired": snap.get("repaired"),
            "status": stream.get("status"), "missing": stream.get("missing")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    ap.add_argument("--modes", default="nak,ack", help="modes, comma-separated")
    ap.add_argument("--paced-s", type=float, default=1.0,
                    help="how long the application sends at 20,000 msgs/s first (default 1)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the rows")
    args = ap.parse_args(argv)
    rows = []
    for i in range(args.runs):
        for mode in args.modes.split(","):
            print(f"[app_limited] run {i + 1}/{args.runs}, {mode} ...", file=sys.stderr,
                  flush=True)
            rows.append(one_run(mode.strip(), args.paced_s))
    print(format_table(rows, notes=NOTES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    incomplete = [r for r in rows if r["status"] != "complete" or r["delivered"] != r["sent"]]
    return 1 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
