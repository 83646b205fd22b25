"""What a failed flow-control assertion needs to say (shared by the test modules)."""

from __future__ import annotations

from typing import Any


def why_dropped(run: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """What a failure needs to tell a queue the flow control let fill from one its process
    could not read in time: the queue over time, how late the receiving process ran, the
    sender's start and cuts."""
    tl = r["timeline"]
    return {"receiver": r["receiver_id"], "late_max_ms": r["late_max_ms"],
            "io_behind_polls": r["io_behind_polls"], "queue_peak": r["queue_peak"],
            "timeline": {k: tl[k] for k in ("t", "depth", "dropped", "received")},
            "start": run["sender"]["policy"]["start"],
            "cut_events": run["sender"]["policy"]["cut_events"][:10]}
