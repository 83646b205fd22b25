"""Time-stepped, numpy-vectorised model of S senders multicasting to N receivers.

The sender side runs the real nakflow policies (``make_sender_flow``: the
NakRateController with its TokenBucket, or the CreditLedger); the receiver side
runs ``VecFillMonitor`` / ``VecCreditGranter``, which decide exactly what the
scalar FillMonitor / CreditGranter decide. Topology: a star. Receiver i sits
``rtt_i / 2`` away from the senders, one way, for data and for feedback, and a
NAK multicast by receiver j reaches receiver i after ``(rtt_j + rtt_i) / 2``, so
suppression is modelled as it happens. Messages are whole numbers; a receiver
consumes ``rate_i * step_s`` per step (the fraction carried), and a consumer's
unused capacity is not banked. All randomness comes from one seeded generator.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nakflow import AckConfig, NakConfig, check_mode
from nakflow.policies import AckFlow, NakFlow, make_sender_flow

from .vectorized import IntArray, VecCreditGranter, VecFillMonitor

OVERFLOW_POLICIES = ("drop-newest", "drop-oldest")


@dataclass(frozen=True)
class SimParams:
    """One simulated deployment. Every scalar field can be set with ``--param name=value``."""

    #: Number of receivers.
    receivers: int = 10
    #: Number of senders (all multicast to every receiver).
    senders: int = 1
    #: Simulated time, s.
    duration_s: float = 10.0
    #: Round-trip time between the senders and a receiver, s.
    rtt_s: float = 0.002
    #: Per-receiver RTT spread: drawn uniformly in rtt_s * (1 +- rtt_jitter).
    rtt_jitter: float = 0.0
    #: Receiver queue bound, msgs.
    capacity_msgs: int = 5_000
    #: Time step, s.
    step_s: float = 0.001
    #: Consume rate of a normal receiver, msgs/s.
    consume_rate_msgs: float = 50_000.0
    #: What one sender (its CPU and link) can send at most, msgs/s.
    sender_max_rate_msgs: float = 100_000.0
    #: Offered load per sender, msgs/s (0: always backlogged).
    source_rate_msgs: float = 0.0
    #: Bursty source: on for this long (0: not bursty), s ...
    burst_on_s: float = 0.0
    #: ... then off for this long, s.
    burst_off_s: float = 0.0
    #: Queue overflow policy.
    overflow: str = "drop-newest"
    #: The first `slow` receivers consume at slow_fraction of the normal rate.
    slow: int = 0
    #: Consume rate of a slow receiver relative to a normal one.
    slow_fraction: float = 0.2
    #: Heterogeneous speeds: rates drawn log-uniformly in [rate * spread_lo, rate] (1: off).
    spread_lo: float = 1.0
    #: The first `dead` receivers (after the slow ones) die at dead_at_s and never return.
    dead: int = 0
    #: When the dead receivers die, s.
    dead_at_s: float = 3.0
    #: How many receivers (after the slow and dead ones) take stop-the-world pauses.
    paused: int = 0
    #: A pausing receiver stops every pause_every_s ...
    pause_every_s: float = 2.0
    #: ... for pause_for_s (no reads, no consumption, no feedback), s.
    pause_for_s: float = 0.0
    #: First pause at this time (later ones every pause_every_s), s.
    pause_at_s: float = 1.0
    #: ACK: receiver eviction timeout at the sender, s.
    receiver_timeout_s: float = 5.0
    #: Trace sampling interval, s.
    trace_every_s: float = 0.01
    #: NAK parameters (not settable with --param; use the Python API).
    nak: NakConfig = field(default_factory=NakConfig)
    #: ACK parameters other than receiver_timeout_s.
    ack: AckConfig = field(default_factory=AckConfig)

    def __post_init__(self) -> None:
        checks = [
            (self.receivers >= 1, "receivers must be >= 1"),
            (self.senders >= 1, "senders must be >= 1"),
            (self.duration_s > 0, "duration_s must be > 0"),
            (self.rtt_s >= 0 and 0 <= self.rtt_jitter < 1, "rtt_s >= 0, rtt_jitter in [0, 1)"),
            (self.capacity_msgs >= 1, "capacity_msgs must be >= 1"),
            (0 < self.step_s <= 0.1, "step_s must lie in (0, 0.1]"),
            (self.consume_rate_msgs > 0, "consume_rate_msgs must be > 0"),
            (self.sender_max_rate_msgs > 0, "sender_max_rate_msgs must be > 0"),
            (self.source_rate_msgs >= 0, "source_rate_msgs must be >= 0"),
            (self.overflow in OVERFLOW_POLICIES, f"overflow must be one of {OVERFLOW_POLICIES}"),
            (self.slow + self.dead + self.paused <= self.receivers,
             "slow + dead + paused must not exceed receivers"),
            (0 < self.slow_fraction <= 1 and 0 < self.spread_lo <= 1,
             "slow_fraction and spread_lo must lie in (0, 1]"),
            (self.pause_every_s > 0 and self.pause_for_s >= 0,
             "pause_every_s > 0, pause_for_s >= 0"),
            (self.receiver_timeout_s > 0 and self.trace_every_s > 0,
             "receiver_timeout_s and trace_every_s must be > 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)

    def replace(self, **changes: Any) -> SimParams:
        return dataclasses.replace(self, **changes)

    def scalars(self) -> dict[str, Any]:
        """The --param-settable fields and their values."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("nak", "ack")}


def _split(total: IntArray, weights: IntArray) -> IntArray:
    """Split total[i] over rows s in proportion to weights[s, i], in whole messages."""
    wsum = weights.sum(axis=0)
    safe = np.where(wsum > 0, wsum, 1)
    part = (total * weights) // safe
    rest = total - part.sum(axis=0)
    if rest.any():
        top = weights.argmax(axis=0)
        part[top, np.arange(part.shape[1])] += rest
    return part


def simulate(params: SimParams, mode: str, *, seed: int = 0,
             progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Run one deployment under ``mode``; return its metrics and traces (JSON-ready)."""
    check_mode(mode)
    p = params
    wall0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    S, N, dt = p.senders, p.receivers, p.step_s
    steps = max(1, round(p.duration_s / dt))
    idx = np.arange(N)

    # -- receivers: latency, speed, faults -------------------------------------------------
    rtt = p.rtt_s * (1.0 + p.rtt_jitter * rng.uniform(-1.0, 1.0, N))
    delay = np.maximum(0, np.round(rtt / 2 / dt)).astype(np.int64)  # one way, in steps
    fb_delay = np.maximum(1, delay)  # feedback is acted on one step later at the soonest
    ring = int(2 * delay.max() + 4)
    rate = np.full(N, float(p.consume_rate_msgs))
    if p.spread_lo < 1.0:
        rate *= np.exp(rng.uniform(math.log(p.spread_lo), 0.0, N))
    roles = np.array(["normal"] * N, dtype=object)
    rate[:p.slow] = p.consume_rate_msgs * p.slow_fraction
    roles[:p.slow] = "slow"
    dead_lo, dead_hi = p.slow, p.slow + p.dead
    death = np.full(N, steps + 1, np.int64)
    death[dead_lo:dead_hi] = round(p.dead_at_s / dt)
    roles[dead_lo:dead_hi] = "dead"
    pausing = np.zeros(N, np.bool_)
    pausing[dead_hi:dead_hi + p.paused] = p.pause_for_s > 0
    roles[dead_hi:dead_hi + p.paused] = "paused"
    per_step = rate * dt
    cap = np.full(N, p.capacity_msgs, np.int64)
    watch = list(range(min(N, dead_hi + p.paused + 1, 6)))  # the special ones and one normal
    faulted = roles != "normal"

    # -- senders: the real policies --------------------------------------------------------
    ack_cfg = dataclasses.replace(p.ack, receiver_timeout_s=p.receiver_timeout_s)
    flows = [make_sender_flow(mode, stream="sim", sender=f"s{s}", epoch=1, nak=p.nak,
                              ack=ack_cfg) for s in range(S)]
    for f in flows:  # as a live sender measures it from its receivers' HELLO answers
        if isinstance(f, NakFlow):
            f.controller.set_rtt(float(rtt.max()))
    names = [f"r{i}" for i in range(N)]
    send_hist = np.zeros((S, ring), np.int64)
    src_carry = np.zeros(S)
    phys_carry = np.zeros(S)
    backlog = np.zeros(S)  # messages the application has produced but not yet sent
    sent = np.zeros(S, np.int64)
    backlog_peak = 0.0
    feedback_frames = 0
    bursty = p.burst_on_s > 0 and p.burst_off_s > 0

    # -- receiver state (S x N where per sender matters) -----------------------------------
    q = np.zeros((S, N), np.int64)
    sock = np.zeros((S, N), np.int64)  # unread socket backlog while paused
    pos = np.zeros((S, N), np.int64)
    consumed = np.zeros(N, np.int64)
    dropped = np.zeros(N, np.int64)
    lost = np.zeros(N, np.int64)
    qpeak = np.zeros(N, np.int64)
    carry = np.zeros(N)
    fill = VecFillMonitor(cap, p.nak, rng=rng) if mode == "nak" else None
    if fill is not None:  # the group RTT the senders advertise in DATA
        fill.set_rtt(float(rtt.max()))
    granter = VecCreditGranter(S, cap, ack_cfg) if mode == "ack" else None
    if granter is not None:  # receivers learn of the senders from their HELLO
        granter.on_sender(np.ones((S, N), np.bool_), np.zeros((S, N), np.int64), 0.0)
    levels_desc = sorted(p.nak.levels, reverse=True)
    nak_ring = np.zeros((ring, len(levels_desc)), np.int64)  # NAKs arriving at the senders
    nak_fill = np.zeros((ring, len(levels_desc)))  # ... and the highest fill they report
    heard_ring = np.zeros((ring, N), np.int64)  # NAK level overheard by each receiver
    credit_ring: dict[int, list[tuple[int, IntArray, IntArray]]] = {}
    naks_at_sender = {lv: 0 for lv in levels_desc}
    credits_at_sender = 0

    # -- traces -----------------------------------------------------------------------------
    trace_every = max(1, round(p.trace_every_s / dt))
    tr: dict[str, list[Any]] = {"t": [], "rate_limit": [], "credit": [], "sent": [],
                                "delivered_normal": [], "backlog": []}
    tr_q: list[list[int]] = []
    tr_c: list[list[int]] = []
    any_pausing = bool(pausing.any())
    any_dead = p.dead > 0
    reading = np.ones(N, np.bool_)
    alive = reading
    next_progress = 0

    for k in range(steps):
        now = k * dt
        # senders ------------------------------------------------------------------------
        if nak_ring[k % ring].any():
            row = nak_ring[k % ring]
            fills = nak_fill[k % ring]
            for j, lv in enumerate(levels_desc):  # strongest first, as a window would
                for _ in range(int(row[j])):
                    naks_at_sender[lv] += 1
                    for f in flows:
                        assert isinstance(f, NakFlow)
                        f.controller.on_nak(lv, now=now, fill=float(fills[j]))
            feedback_frames += int(row.sum())
            row[:] = 0
            fills[:] = 0.0
        credits = credit_ring.pop(k, None)
        if credits:
            for s, who, lim in credits:
                flow = flows[s]
                assert isinstance(flow, AckFlow)
                ledger = flow.ledger
                for i, limit in zip(who.tolist(), lim.tolist(), strict=True):
                    ledger.on_credit(names[i], limit, now=now)
                credits_at_sender += len(who)
                feedback_frames += len(who)
        slot = k % ring
        for s, flow in enumerate(flows):
            phys = p.sender_max_rate_msgs * dt + phys_carry[s]
            want = int(phys)
            if p.source_rate_msgs > 0 or bursty:
                on = not bursty or (now % (p.burst_on_s + p.burst_off_s)) < p.burst_on_s
                if on:
                    offered = (p.source_rate_msgs or p.sender_max_rate_msgs) * dt + src_carry[s]
                    backlog[s] += int(offered)
                    src_carry[s] = offered - int(offered)
                want = min(want, int(backlog[s]))
                backlog_peak = max(backlog_peak, backlog[s])
            n = flow.admit_up_to(want, now=now) if want else 0
            if p.source_rate_msgs > 0 or bursty:
                backlog[s] -= n
            phys_carry[s] = min(phys - n, 1.0) if n == want else 0.0
            send_hist[s, slot] = n
            sent[s] += n

        # receivers: arrivals -----------------------------------------------------------------
        arr = send_hist[:, (k - delay) % ring]
        if any_dead:
            alive = death > k
            if not alive.all():
                lost += np.where(alive, 0, arr.sum(axis=0))
                arr = np.where(alive, arr, 0)
        if any_pausing:
            in_pause = pausing & (now >= p.pause_at_s) & (
                ((now - p.pause_at_s) % p.pause_every_s) < p.pause_for_s)
            reading = alive & ~in_pause
            if in_pause.any():
                sock += np.where(in_pause, arr, 0)
                arr = np.where(in_pause, 0, arr)
            if sock.any():
                arr = arr + np.where(reading, sock, 0)
                sock = np.where(reading, 0, sock)
        elif any_dead:
            reading = alive
        overflowed = False
        if arr.any():
            pos += arr
            if granter is not None:
                granter.on_sender(arr > 0, pos, now)
            q += arr
            qtot = q.sum(axis=0) if S > 1 else q[0]
            over = qtot - cap
            if (over > 0).any():
                over = np.maximum(over, 0)
                overflowed = True
                drop = _split(over, arr if p.overflow == "drop-newest" else q) if S > 1 \
                    else over[None, :]
                q -= drop
                dropped += over
                if granter is not None:
                    granter.on_enqueued(arr - drop if p.overflow == "drop-newest" else arr)
                    if p.overflow == "drop-oldest":
                        granter.on_released(drop)
            elif granter is not None:
                granter.on_enqueued(arr)
        # consume -----------------------------------------------------------------------------
        qtot = q.sum(axis=0) if S > 1 else q[0]
        np.maximum(qpeak, qtot, out=qpeak)
        budget = np.where(reading, per_step + carry, 0.0)
        c = np.minimum(budget.astype(np.int64), qtot)
        carry = np.where(reading, np.minimum(budget - c, 1.0), carry)
        if c.any():
            take = _split(c, q) if S > 1 else c[None, :]
            q -= take
            consumed += c
            qtot = q.sum(axis=0) if S > 1 else q[0]
            if granter is not None:
                granter.on_released(take)
        # feedback ----------------------------------------------------------------------------
        if fill is not None:
            heard = heard_ring[slot]
            if heard.any():
                fill.on_heard(heard, now)
                heard[:] = 0
            # a queue that overflowed this step is full, whatever the consumer took since
            seen = np.where(over > 0, cap, qtot) if overflowed else qtot
            levels = fill.update(seen, now, reading if any_dead or any_pausing else None)
            if levels.any():
                em = np.flatnonzero(levels)
                lvl = levels[em]
                for j, lv in enumerate(levels_desc):
                    mine = em[lvl == lv]
                    if not mine.size:
                        continue
                    at = (k + fb_delay[mine]) % ring
                    np.add.at(nak_ring, (at, j), 1)
                    np.maximum.at(nak_fill, (at, j), 100.0 * qtot[mine] / cap[mine])
                    # overheard: the nearest emitter's NAK reaches receiver i after
                    # delay[emitter] + delay[i]; the emitter itself hears the next nearest
                    order = mine[np.argsort(delay[mine], kind="stable")[:2]]
                    first = delay[order[0]]
                    via = np.full(N, first)
                    if order.size > 1:
                        via[order[0]] = delay[order[1]]
                    hear_at = (k + np.maximum(1, via + delay)) % ring
                    mask = np.ones(N, np.bool_)
                    if order.size == 1:
                        mask[order[0]] = False
                    rows, cols = hear_at[mask], idx[mask]
                    heard_ring[rows, cols] = np.maximum(heard_ring[rows, cols], lv)
        elif granter is not None:
            due, limit = granter.poll(now, reading)
            if due.any():
                for s in range(S):
                    who = np.flatnonzero(due[s])
                    if not who.size:
                        continue
                    at = k + fb_delay[who]
                    for a in np.unique(at).tolist():
                        sel = who[at == a]
                        credit_ring.setdefault(int(a), []).append((s, sel, limit[s, sel]))

        # trace ---------------------------------------------------------------------------
        if k % trace_every == 0:
            r_lim, cred = flows[0].limits(now=now)
            tr["t"].append(round(now, 6))
            tr["rate_limit"].append(None if r_lim is None else round(r_lim, 1))
            tr["credit"].append(cred)
            tr["sent"].append(int(sent.sum()))
            tr["delivered_normal"].append(int(consumed[~faulted].sum()))
            tr["backlog"].append(float(backlog.sum()))
            tr_q.append(qtot[watch].tolist())
            tr_c.append(consumed[watch].tolist())
        if progress is not None and k >= next_progress:
            progress(k / steps)
            next_progress = k + max(1, steps // 50)

    if progress is not None:
        progress(1.0)
    duration = steps * dt
    goodput = consumed / duration
    alive_end = death > steps - 1
    normal = ~faulted
    trace: dict[str, Any] = dict(tr)
    trace.update(watch_traces(names, watch, tr_q, tr_c))
    fault_t = fault_time(p)
    result: dict[str, Any] = {
        "mode": mode,
        "seed": seed,
        "params": p.scalars(),
        "duration_s": duration,
        "goodput": goodput_summary(goodput, alive_end, normal),
        "receivers": [{"id": names[i], "role": str(roles[i]), "consume_rate": float(rate[i]),
                       "rtt_s": float(rtt[i]), "goodput": round(float(goodput[i]), 1),
                       "delivered": int(consumed[i]), "dropped": int(dropped[i]),
                       "lost": int(lost[i]), "queue_peak": int(qpeak[i])} for i in watch],
        "delivered": int(consumed.sum()),
        "dropped": int(dropped.sum()),
        "dropped_normal": int(dropped[normal].sum()),
        "unrepaired": int(dropped[alive_end].sum()),  # the model does not repair
        "lost": int(lost.sum()),
        "queue_peak": int(qpeak.max()),
        "sent": int(sent.sum()),
        "send_rate": round(float(sent.sum()) / duration, 1),
        "feedback_per_s_at_sender": round(feedback_frames / S / duration, 2),
        "naks_at_sender": {str(k): v for k, v in naks_at_sender.items()},
        "credits_at_sender": credits_at_sender,
        "naks_suppressed": 0 if fill is None else fill.suppressed,
        "naks_predicted": 0 if fill is None else fill.predicted,
        "source_backlog_peak": backlog_peak,
        "recovery_s": recovery_time(tr, fault_t, p),
        "fault_t": fault_t,
        "sender": flows[0].snapshot(),
        "trace": trace,
        "wall_s": round(time.perf_counter() - wall0, 3),
    }
    return result


def goodput_summary(goodput: Any, alive: Any, normal: Any) -> dict[str, float | None]:
    """Per-receiver goodput (an array) summed up over the receivers ``alive`` at the end
    (``normal``: those with no fault), as every simulation result reports it."""
    return {
        "overall": round(float(goodput[alive].mean()), 1),
        "normal_mean": round(float(goodput[normal].mean()), 1) if normal.any() else None,
        "min": round(float(goodput[alive].min()), 1),
        "p50": round(float(np.median(goodput[alive])), 1),
        "max": round(float(goodput.max()), 1),
    }


def watch_traces(names: list[str], watch: list[int], queue_rows: list[list[int]],
                 delivered_rows: list[list[int]]) -> dict[str, dict[str, list[int]]]:
    """The watched receivers' queue and delivered samples, by receiver id."""
    return {"queue": {names[i]: [row[j] for row in queue_rows] for j, i in enumerate(watch)},
            "delivered": {names[i]: [row[j] for row in delivered_rows]
                          for j, i in enumerate(watch)}}


def fault_time(p: SimParams) -> float | None:
    if p.dead:
        return p.dead_at_s
    if p.paused and p.pause_for_s > 0:
        return p.pause_at_s
    return None


def recovery_time(tr: dict[str, Any], fault_t: float | None, p: SimParams) -> float | None:
    """Time from the fault until the normal receivers' goodput (over 100 ms) is back at
    90 % of its mean over the second before the fault, after first falling below it
    (0 if it never fell); None without a fault or if it never came back."""
    if fault_t is None:
        return None
    t = np.asarray(tr["t"])
    d = np.asarray(tr["delivered_normal"], dtype=np.float64)
    if len(t) < 3:
        return None
    pre = (t >= fault_t - 1.0) & (t <= fault_t)
    if pre.sum() < 2:
        return None
    ref = (d[pre][-1] - d[pre][0]) / max(t[pre][-1] - t[pre][0], 1e-9)
    win = max(1, round(0.1 / (t[1] - t[0])))
    fell = False
    for j in range(int(np.searchsorted(t, fault_t)), len(t) - win):
        ok = (d[j + win] - d[j]) / (t[j + win] - t[j]) >= 0.9 * ref
        if not ok:
            fell = True
        elif fell:
            return round(float(t[j] - fault_t), 4)
    return None if fell else 0.0
