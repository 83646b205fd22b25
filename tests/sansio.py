"""A SenderCore and a ReceiverCore over an in-memory lossy link in 1 ms steps.

The link is the simulator's driver of the cores (``simulations.cores``): DATA and RDATA
are lost with ``data_loss``, NAK and REPAIR with ``feedback_loss`` (HELLO, END and GONE
pass: they are control frames the live nodes repeat). The receiver's queue is the live
``DeliveryQueue`` (drop-newest), consumed at a fixed number of messages per step. No
sockets, no clock: this is the protocol alone, as the live nodes run it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nakflow import RepairConfig
from simulations.cores import CoreSimParams, simulate_cores


@dataclass
class Link:
    rng: random.Random
    data_loss: float = 0.0
    feedback_loss: float = 0.0


@dataclass
class Outcome:
    sent: int
    delivered_total: int
    delivered_unique: int
    repaired: int
    lost: int
    dropped: int
    beyond_history: int
    queued: int
    missed_before_join: int
    first_hand: int
    given_up: int
    steps: int
    link_drops: int  # DATA and RDATA frames the link lost on the way


def run_link(link: Link, *, messages: int, batch: int, capacity_msgs: int,
             consume_per_ms: int, repair: RepairConfig | None = None,
             max_ms: int = 60_000) -> Outcome:
    params = CoreSimParams(receivers=1, duration_s=max_ms / 1000 - 15.0, messages=messages,
                           batch=batch, capacity_msgs=capacity_msgs,
                           consume_rate_msgs=consume_per_ms * 1000.0, rtt_s=0.002,
                           data_loss=link.data_loss, feedback_loss=link.feedback_loss,
                           repair=repair or RepairConfig())
    out = simulate_cores(params, "nak", seed=link.rng.randrange(1 << 32))
    (r,) = out["receivers"]
    return Outcome(sent=out["sent"], delivered_total=r["delivered"] + r["duplicated"],
                   delivered_unique=r["delivered"], repaired=r["repaired"], lost=r["lost"],
                   dropped=r["dropped_unrepaired"], beyond_history=r["beyond_history"],
                   queued=r["queued"], missed_before_join=r["missed_before_join"],
                   first_hand=r["delivered"] + r["duplicated"] - r["repaired"],
                   given_up=r["given_up"], steps=out["steps"], link_drops=r["link_drops"])
