"""``nakflow simulate``'s scenarios run on the real protocol cores.

``simulate_on_cores(params, mode)`` takes the same ``SimParams`` as the vectorised
model and returns a result of the same shape, but every sender is a real
``SenderCore`` and every receiver a real ``ReceiverCore`` with its live
``DeliveryQueue``, moved over ``SimLink`` (``simulations/cores.py``): framing and
natural batching, HELLO and the RTT, the NAK signals that are on by default (queue fill,
queueing delay, loss, hurry, probe), history and repair, credit, END and linger, and a
dead receiver's closed connections (``connection_lost``, as ZeroMQ's socket monitor
reports them over tcp/ipc). The receivers' speeds, RTTs and roles are drawn as the model
draws them for the same seed. Left out: the CPU (a sender or receiver costs nothing per
message beyond its rate), so catching up after a pause is instant where live it competes
for the processor (see benchmarks/sim_live.py).

Its cost grows with receivers x senders x messages (about 0.05 s of wall time per
receiver per simulated second at 20,000 msgs/s on a 2-core machine), so ``engine="auto"``
runs the cores up to ``CORES_MAX_STREAMS`` receiver-sender pairs and the model above.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nakflow import ReceiverConfig, ReceiverCore, RepairConfig, SenderConfig, SenderCore, check_mode

from .cores import WAIT_RECEIVERS_MAX_S, SimLink
from .engines import MODEL_LEAVES_OUT, pick_engine
from .model import (
    SimParams,
    fault_time,
    goodput_summary,
    recovery_time,
    simulate,
    watch_traces,
)

#: After the sending time the senders END; the cores run on (consumers draining,
#: repairs, linger) at most this long to count what stays missing, simulated s.
SETTLE_S = 10.0


def run_simulation(params: SimParams, mode: str, *, seed: int = 0, engine: str = "auto",
                   progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One deployment under ``mode`` on the engine ``engine`` picks; the result says which
    (``engine``) and, for the model, what it leaves out (``leaves_out``)."""
    if pick_engine(params, engine) == "cores":
        return simulate_on_cores(params, mode, seed=seed, progress=progress)
    result = simulate(params, mode, seed=seed, progress=progress)
    result.update(engine="model", leaves_out=MODEL_LEAVES_OUT)
    return result


@dataclasses.dataclass
class _Roles:
    """Who is who, drawn as the model draws it (same seed, same RTTs and speeds)."""

    rtt: np.ndarray
    rate: np.ndarray
    roles: list[str]

    @classmethod
    def draw(cls, p: SimParams, seed: int) -> _Roles:
        rng = np.random.default_rng(seed)
        n = p.receivers
        rtt = p.rtt_s * (1.0 + p.rtt_jitter * rng.uniform(-1.0, 1.0, n))
        rate = np.full(n, float(p.consume_rate_msgs))
        if p.spread_lo < 1.0:
            rate *= np.exp(rng.uniform(np.log(p.spread_lo), 0.0, n))
        rate[:p.slow] = p.consume_rate_msgs * p.slow_fraction
        roles = (["slow"] * p.slow + ["dead"] * p.dead + ["paused"] * p.paused
                 + ["normal"] * (n - p.slow - p.dead - p.paused))
        if p.pause_for_s <= 0:
            roles = ["normal" if r == "paused" else r for r in roles]
        return cls(rtt, rate, roles)

    def stopped(self, i: int, t: float, p: SimParams) -> bool:
        role = self.roles[i]
        if role == "dead":
            return t >= p.dead_at_s
        return (role == "paused" and t >= p.pause_at_s
                and (t - p.pause_at_s) % p.pause_every_s < p.pause_for_s)


class _Source:
    """The applications: each sender offers what its CPU (sender_max_rate_msgs) and the
    source (source_rate_msgs, bursts) allow, and stops at the first 'not now'."""

    def __init__(self, p: SimParams, senders: list[SenderCore]) -> None:
        self.p, self.senders = p, senders
        self.bursty = p.burst_on_s > 0 and p.burst_off_s > 0
        self.paced = p.source_rate_msgs > 0 or self.bursty
        n = len(senders)
        self.phys_carry, self.src_carry, self.backlog = [0.0] * n, [0.0] * n, [0.0] * n
        self.waiting = [True] * n  # for its receivers' HELLO answers (``step`` skips it)
        self.backlog_peak = 0.0

    def step(self, t: float) -> None:
        p, dt = self.p, self.p.step_s
        for s, tx in enumerate(self.senders):
            if self.waiting[s]:  # as a live sender waits for its receivers' HELLO answers
                continue
            phys = p.sender_max_rate_msgs * dt + self.phys_carry[s]
            want = int(phys)
            if self.paced:
                if not self.bursty or t % (p.burst_on_s + p.burst_off_s) < p.burst_on_s:
                    offered = (p.source_rate_msgs or p.sender_max_rate_msgs) * dt \
                        + self.src_carry[s]
                    self.backlog[s] += int(offered)
                    self.src_carry[s] = offered - int(offered)
                want = min(want, int(self.backlog[s]))
                self.backlog_peak = max(self.backlog_peak, self.backlog[s])
            n = 0
            while n < want and tx.offer(b"%d" % tx.sent, t) == 0.0:
                n += 1
            tx.flush(t)  # the application then waits a step: what it admitted leaves first
            if self.paced:
                self.backlog[s] -= n
            self.phys_carry[s] = min(phys - n, 1.0) if n == want else 0.0


def simulate_on_cores(params: SimParams, mode: str, *, seed: int = 0,
                      progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Run ``mode`` on ``params`` with the real cores; the model's result shape, plus
    ``unrepaired`` (missing at the receivers alive at the end once the cores settled)."""
    check_mode(mode)
    p, wall0 = params, time.perf_counter()
    n, dt = p.receivers, p.step_s
    who = _Roles.draw(p, seed)
    ack = dataclasses.replace(p.ack, receiver_timeout_s=p.receiver_timeout_s)
    txs = [SenderCore(SenderConfig(mode=mode, stream="sim", sender_id=f"s{s}", epoch=1,
                                   nak=p.nak, ack=ack, repair=RepairConfig(),
                                   max_rate_msgs=p.sender_max_rate_msgs, frame_msgs=16,
                                   linger_s=dt), now=0.0) for s in range(p.senders)]
    rng = random.Random(seed)
    rxs = [ReceiverCore(ReceiverConfig(mode=mode, stream="sim", receiver_id=f"r{i}",
                                       capacity_msgs=p.capacity_msgs, overflow=p.overflow,
                                       nak=p.nak, ack=ack, max_streams=max(16, p.senders)),
                        now=0.0, rng=random.Random(rng.random())) for i in range(n)]
    link = SimLink(txs, rxs, step_s=dt, rtt_s=[float(r) for r in who.rtt], rng=rng)
    source = _Source(p, txs)
    run = _Run(p, who, link)
    for tx in txs:
        tx.want_receivers(n, 0.0)  # as a live sender waiting for its receivers
    steps = max(1, round(p.duration_s / dt))
    for k in range(steps):
        t = link.now
        for s, tx in enumerate(txs):
            if source.waiting[s] and (tx.receivers_ready() >= n or t >= WAIT_RECEIVERS_MAX_S):
                tx.want_receivers(0, t)
                source.waiting[s] = False
        source.step(t)
        run.consume(t)
        link.step()
        run.trace(k, txs, sum(source.backlog))
        if progress is not None and k % max(1, steps // 50) == 0:
            progress(k / steps)
    at_end = [tx.snapshot(link.now) for tx in txs]
    delivered = list(run.consumed)
    for tx in txs:
        tx.close(link.now)
    for _ in range(round(SETTLE_S / dt)):  # END, repairs, linger: what stays missing
        if all(tx.closed for tx in txs) and run.settled(rxs):
            break
        run.consume(link.now)
        link.step()
    if progress is not None:
        progress(1.0)
    return run.result(mode, seed, delivered, at_end, source, wall0)


class _Run:
    """The consumers, the trace and the figures of one run on the cores."""

    def __init__(self, p: SimParams, who: _Roles, link: SimLink) -> None:
        self.p, self.who, self.link = p, who, link
        n = p.receivers
        self.consumed = [0] * n
        self.carry = [0.0] * n
        self.qpeak = [0] * n
        self.sent_at_death: int | None = None
        self.every = max(1, round(p.trace_every_s / p.step_s))
        self.watch = list(range(min(n, p.slow + p.dead + p.paused + 1, 6)))
        self.normal = [i for i, r in enumerate(who.roles) if r == "normal"]
        self.tr: dict[str, list[Any]] = {"t": [], "rate_limit": [], "credit": [], "sent": [],
                                         "delivered_normal": [], "backlog": []}
        self.tr_q: list[list[int]] = []
        self.tr_c: list[list[int]] = []

    def consume(self, t: float) -> None:
        link, p, who = self.link, self.p, self.who
        if p.dead and self.sent_at_death is None and t >= p.dead_at_s:
            self.sent_at_death = sum(tx.sent for tx in link.senders)
            dead = [i for i, role in enumerate(self.who.roles) if role == "dead"]
            for i in dead:
                link.disconnect(i)
            for tx in link.senders:  # over tcp/ipc its connections close: ZeroMQ's socket
                if tx.watches_connections:  # monitor tells the live sender at once
                    tx.connection_lost(t, len(dead))
        for i, queue in enumerate(link.queues):
            stopped = link.stopped[i] = link.gone[i] or who.stopped(i, t, p)
            self.qpeak[i] = max(self.qpeak[i], len(queue))
            if stopped:
                continue
            self.carry[i] += who.rate[i] * p.step_s
            take = int(self.carry[i])
            if take:
                self.consumed[i] += len(queue.take(take, 0))
                self.carry[i] -= take

    def settled(self, rxs: list[ReceiverCore]) -> bool:
        link = self.link
        return all(not rx.tracker.with_gaps and not len(link.queues[i]) and not link.inbound[i]
                   for i, rx in enumerate(rxs) if not link.stopped[i])

    def trace(self, k: int, txs: list[SenderCore], backlog: float) -> None:
        if k % self.every:
            return
        now, tr = self.link.now, self.tr
        limit, credit = txs[0].policy.limits(now=now)
        tr["t"].append(round(now, 6))
        tr["rate_limit"].append(None if limit is None else round(limit, 1))
        tr["credit"].append(credit)
        tr["sent"].append(sum(tx.sent for tx in txs))
        tr["delivered_normal"].append(sum(self.consumed[i] for i in self.normal))
        tr["backlog"].append(backlog)
        self.tr_q.append([len(self.link.queues[i]) for i in self.watch])
        self.tr_c.append([self.consumed[i] for i in self.watch])

    def result(self, mode: str, seed: int, delivered: list[int], at_end: list[dict[str, Any]],
               source: _Source, wall0: float) -> dict[str, Any]:
        p, who, link = self.p, self.who, self.link
        dur = max(1, round(p.duration_s / p.step_s)) * p.step_s
        names = [f"r{i}" for i in range(p.receivers)]
        goodput = np.asarray(delivered, dtype=np.float64) / dur
        alive = np.asarray([r != "dead" for r in who.roles])
        normal = np.asarray([r == "normal" for r in who.roles])
        drops = [rx.dropped for rx in link.receivers]
        sent = sum(s["sent"] for s in at_end)
        lost = [0 if r != "dead" or self.sent_at_death is None else sent - self.sent_at_death
                for r in who.roles]
        missing = [link.receivers[i].tracker.totals() for i in range(p.receivers)]
        unrepaired = sum(m["dropped"] + m["lost"] + m["beyond_history"]
                         for i, m in enumerate(missing) if alive[i])
        trace: dict[str, Any] = dict(self.tr)
        trace.update(watch_traces(names, self.watch, self.tr_q, self.tr_c))
        ft = fault_time(p)
        snap = at_end[0]
        return {
            "engine": "cores", "mode": mode, "seed": seed, "params": p.scalars(),
            "duration_s": dur,
            "goodput": goodput_summary(goodput, alive, normal),
            "receivers": [{"id": names[i], "role": who.roles[i],
                           "consume_rate": float(who.rate[i]), "rtt_s": float(who.rtt[i]),
                           "goodput": round(float(goodput[i]), 1), "delivered": delivered[i],
                           "dropped": drops[i], "lost": lost[i], "queue_peak": self.qpeak[i],
                           "repaired": missing[i]["repaired"]} for i in self.watch],
            "delivered": int(sum(delivered)),
            "dropped": int(sum(drops)),
            "dropped_normal": int(sum(d for d, nm in zip(drops, normal, strict=True) if nm)),
            "unrepaired": int(unrepaired),
            "lost": int(sum(lost)),
            "queue_peak": int(max(self.qpeak)),
            "sent": int(sent),
            "send_rate": round(sent / dur, 1),
            "feedback_per_s_at_sender": round(
                sum(s["feedback_frames"] for s in at_end) / p.senders / dur, 2),
            "cuts": snap["cuts"],
            "repair": snap["repair"],
            "source_backlog_peak": source.backlog_peak,
            "recovery_s": recovery_time(self.tr, ft, p),
            "fault_t": ft,
            "sender": snap,
            "trace": trace,
            "wall_s": round(time.perf_counter() - wall0, 3),
        }
