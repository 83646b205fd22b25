"""The protocol itself, simulated: one real SenderCore and N real ReceiverCores in 1 ms steps.

Where the vectorised model (``model.py``) scales to 10,000 receivers with the real
rate controller but counts messages, this one moves real frames between the real
sans-I/O cores of ``nakflow`` (framing, history and repair, accounting, NAK timing,
credit, HELLO answers and the RTT), so everything the live nodes do is in it: it is
slower (a few receivers, seconds of simulated time) and exact. No sockets, no clock:
time is the step counter, randomness one seeded generator.

Network: each receiver sits ``rtt_s / 2`` from the sender each way; feedback is
multicast, so receivers overhear each other after ``rtt_s``. A receiver that is paused
or dead reads nothing; frames wait for it up to ``hwm_frames`` (ZeroMQ's high-water
mark), later ones are dropped, as PUB drops them, and show up as loss in flight.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from nakflow import (
    AckConfig,
    Message,
    NakConfig,
    ReceiverCore,
    RepairConfig,
    SenderCore,
    check_mode,
)


@dataclass(frozen=True)
class CoreSimParams:
    """One simulated deployment of the real cores."""

    #: Number of receivers.
    receivers: int = 4
    #: Simulated sending time, s (then END, and time to settle).
    duration_s: float = 6.0
    #: Round-trip time between the sender and each receiver, s.
    rtt_s: float = 0.002
    #: Receiver queue bound, msgs.
    capacity_msgs: int = 5_000
    #: Each receiver consumes this many msgs/s.
    consume_rate_msgs: float = 20_000.0
    #: What the sender can send at most, msgs/s.
    sender_max_rate_msgs: float = 100_000.0
    #: Messages per DATA frame.
    batch: int = 16
    #: Frames waiting for a receiver that does not read, at most (then dropped in flight).
    hwm_frames: int = 1_000
    #: The first `paused` receivers stop reading and consuming for pause_for_s ...
    paused: int = 0
    #: ... every pause_every_s, s ...
    pause_every_s: float = 2.0
    pause_for_s: float = 0.3
    #: ... from pause_at_s on, s.
    pause_at_s: float = 1.0
    #: The next `dead` receivers stop for good at dead_at_s.
    dead: int = 0
    dead_at_s: float = 2.0
    #: Fraction of DATA/RDATA frames lost on the way to each receiver (independently).
    data_loss: float = 0.0
    #: Fraction of DATA/RDATA frames lost near the sender, for every receiver at once.
    shared_loss: float = 0.0
    #: Time step, s.
    step_s: float = 0.001
    nak: NakConfig = field(default_factory=NakConfig)
    ack: AckConfig = field(default_factory=AckConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)


def _stopped(p: CoreSimParams, i: int, t: float) -> bool:
    if i < p.paused and t >= p.pause_at_s:
        return (t - p.pause_at_s) % p.pause_every_s < p.pause_for_s
    return p.paused <= i < p.paused + p.dead and t >= p.dead_at_s


def simulate_cores(p: CoreSimParams, mode: str, *, seed: int = 0) -> dict[str, Any]:
    """Run ``mode`` on ``p``; per receiver: goodput and the full accounting."""
    check_mode(mode)
    rng = random.Random(seed)
    n, dt = p.receivers, p.step_s
    half = max(1, round(p.rtt_s / 2 / dt))  # one-way delay, steps
    tx = SenderCore(mode=mode, stream="sim", sender_id="s0", epoch=1, nak=p.nak, ack=p.ack,
                    repair=p.repair, max_rate_msgs=p.sender_max_rate_msgs,
                    max_frame_bytes=1 << 24)
    rxs = [ReceiverCore(mode=mode, stream="sim", receiver_id=f"r{i}",
                        capacity_msgs=p.capacity_msgs, nak=p.nak, ack=p.ack, repair=p.repair,
                        rng=random.Random(rng.random()), max_streams=16,
                        max_frame_bytes=1 << 24) for i in range(n)]
    inbound: list[deque[tuple[int, bytes]]] = [deque() for _ in range(n)]  # data to rx i
    overheard: list[deque[tuple[int, bytes]]] = [deque() for _ in range(n)]
    to_tx: deque[tuple[int, bytes]] = deque()
    queues: list[deque[Message]] = [deque() for _ in range(n)]
    seen: list[Counter[int]] = [Counter() for _ in range(n)]
    carry = [0.0] * n
    in_flight_drops = [0] * n
    sent, end_step, step = 0, None, 0
    last_step = round((p.duration_s + 15.0) / dt)
    next_hello = 0
    while step < last_step:
        t = step * dt
        # -- sender ----------------------------------------------------------------
        while to_tx and to_tx[0][0] <= step:
            tx.on_feedback(to_tx.popleft()[1], now=t)
        out = tx.repairs_due(now=t)
        if step >= next_hello and end_step is None:  # as a sender waiting for receivers
            out.append(tx.hello(now=t))
            next_hello = step + round(0.1 / dt)
        if end_step is None:
            if t >= p.duration_s:
                out.append(tx.end(now=t))
                end_step = step
            else:
                k = tx.flow.admit_up_to(round(p.sender_max_rate_msgs * dt) + 1, now=t)
                for lo in range(0, k, p.batch):
                    m = min(p.batch, k - lo)
                    out.append(tx.data([b"%d" % (sent + j) for j in range(m)], now=t))
                    sent += m
        elif step % round(0.1 / dt) == 0 and step - end_step < round(1.0 / dt):
            out.append(tx.end(now=t))  # END repeated for a second, as close() re-sends it
        for buf in out:
            lossy = buf[2] in (1, 7)  # DATA, RDATA
            if lossy and p.shared_loss and rng.random() < p.shared_loss:
                continue
            for i in range(n):
                if not (lossy and p.data_loss and rng.random() < p.data_loss):
                    inbound[i].append((step + half, buf))
        # -- receivers -------------------------------------------------------------
        for i, rx in enumerate(rxs):
            box = inbound[i]
            if _stopped(p, i, t):
                while len(box) > p.hwm_frames:  # PUB drops past the high-water mark
                    box.pop()
                    in_flight_drops[i] += 1
                continue
            pending: list[tuple[tuple[str, int], Message]] = []
            fb: list[bytes] = []
            while box and box[0][0] <= step:
                fb += rx.on_data(box.popleft()[1], pending.append, now=t)
            while overheard[i] and overheard[i][0][0] <= step:
                rx.on_overheard(overheard[i].popleft()[1], now=t)
            q = queues[i]
            for key, msg in pending:
                if len(q) >= p.capacity_msgs:
                    rx.on_dropped(msg)
                else:
                    q.append(msg)
                    rx.on_enqueued(key, 1)
            carry[i] += p.consume_rate_msgs * dt
            take = min(int(carry[i]), len(q))
            carry[i] -= int(carry[i])
            for _ in range(take):
                msg = q.popleft()
                seen[i][msg.seq] += 1
            if take:
                rx.on_released(("s0", 1), take)
            fb += rx.poll(rx.seen_depth(len(q), None, now=t), now=t)
            for buf in fb:
                to_tx.append((step + half, buf))
                for j in range(n):
                    if j != i:
                        overheard[j].append((step + 2 * half, buf))
        step += 1
        if end_step is not None and step - end_step > round(1.0 / dt) and all(
                not rx.tracker.with_gaps and not queues[i] and not inbound[i]
                for i, rx in enumerate(rxs) if not _stopped(p, i, step * dt)):
            break
    rows = []
    for i, rx in enumerate(rxs):
        tot = rx.tracker.totals()
        rows.append({"receiver": f"r{i}", "role": ("paused" if i < p.paused else "dead"
                                                   if i < p.paused + p.dead else "normal"),
                     "delivered": len(seen[i]), "duplicated": sum(seen[i].values())
                     - len(seen[i]), "goodput_msgs": round(len(seen[i]) / p.duration_s, 1),
                     "queue_drops": rx.dropped, "in_flight_drops": in_flight_drops[i],
                     "repaired": tot["repaired"], "lost": tot["lost"],
                     "dropped_unrepaired": tot["dropped"],
                     "beyond_history": tot["beyond_history"],
                     "missed_before_join": tot["missed_before_join"],
                     "queued": len(queues[i])})
    snap = tx.snapshot()
    return {"mode": mode, "sent": sent, "sim_s": round(step * dt, 3),
            "send_rate_msgs": round(sent / p.duration_s, 1), "rtt_ms": snap["rtt_ms"],
            "cuts": snap["cuts"], "repair": snap["repair"],
            "feedback_frames": snap["feedback_frames"], "receivers": rows}
