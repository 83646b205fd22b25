"""Repair requests at the sender as receivers are added, vectorised for 10,000 receivers.

The core simulation (simulations/cores.py) runs a real ReceiverCore per receiver and
hands every feedback frame to every other receiver: O(N^2), minutes at a few hundred.
This model keeps only what decides the request count, with the receivers' own rule:
each DATA frame is lost at each receiver independently with probability ``loss``; the
k receivers that lost it find the gap when the next frame arrives (together: equal
delays) and each waits its hold-off, drawn by ``nakflow.policy.fill.backoff_delay`` with
RepairConfig's ``backoff_s`` as RepairRequester draws it; a receiver whose hold-off
ends before the first request reaches it (one RTT later, as multicast feedback between
receivers goes via the sender's side) asks too, the rest overhear and are suppressed.
Left out: gaps of adjacent frames merging into one request (rare at 1 %) and repeats
after a lost repair. tests/test_simulations.py checks it against the core simulation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nakflow import RepairConfig
from nakflow.policy.registry import backoff_delay

_holdoff = np.frompyfunc(backoff_delay, 2, 1)


def repair_requests(receivers: int, *, loss: float, frames_per_s: float, rtt_s: float,
                    duration_s: float = 1.0, repair: RepairConfig | None = None,
                    seed: int = 0) -> dict[str, Any]:
    """Requests per second at the sender, and per frame lost by anyone."""
    cfg = repair or RepairConfig()
    rng = np.random.default_rng(seed)
    frames = int(frames_per_s * duration_s)
    missers = rng.binomial(receivers, loss, size=frames)  # receivers that lost each frame
    lost = missers[missers > 0]
    total = int(lost.sum())
    if cfg.backoff_s > 0 and total:
        delays = np.asarray(_holdoff(rng.random(total), cfg.backoff_s), dtype=float)
    else:
        delays = np.zeros(total)
    # per lost frame: those whose hold-off ends within one RTT of the first one's ask
    starts = np.concatenate(([0], np.cumsum(lost)[:-1])).astype(int)
    first = np.minimum.reduceat(delays, starts) if total else np.zeros(0)
    asks = (delays < np.repeat(first, lost) + rtt_s).astype(int)
    per_frame = np.add.reduceat(asks, starts) if total else np.zeros(0, dtype=int)
    requests = int(per_frame.sum())
    return {"receivers": receivers, "frames": frames, "frames_lost_by_anyone": len(lost),
            "requests": requests, "requests_per_s": requests / duration_s,
            "requests_per_lost_frame": requests / len(lost) if len(lost) else 0.0,
            "messages_missing_per_s": total / duration_s}
