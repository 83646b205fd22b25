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
from nakflow.policy.registry import AckFlow, NakFlow, make_sender_flow

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
        for f in dataclasses.fields(self):  # inf passed every bound and failed deep inside
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, not {value!r}")
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


@dataclass
class _Deployment:
    """Where each receiver sits and how it behaves: fixed for the whole run."""

    rtt: np.ndarray
    delay: IntArray  # one way, in steps
    fb_delay: IntArray  # feedback is acted on one step later at the soonest
    rate: np.ndarray  # consume rate, msgs/s
    roles: np.ndarray
    death: IntArray  # the step a receiver dies at (steps + 1: never)
    pausing: np.ndarray  # takes stop-the-world pauses

    @classmethod
    def draw(cls, p: SimParams, rng: np.random.Generator, steps: int) -> _Deployment:
        n, dt = p.receivers, p.step_s
        rtt = p.rtt_s * (1.0 + p.rtt_jitter * rng.uniform(-1.0, 1.0, n))
        delay = np.maximum(0, np.round(rtt / 2 / dt)).astype(np.int64)
        rate = np.full(n, float(p.consume_rate_msgs))
        if p.spread_lo < 1.0:
            rate *= np.exp(rng.uniform(math.log(p.spread_lo), 0.0, n))
        roles = np.array(["normal"] * n, dtype=object)
        rate[:p.slow] = p.consume_rate_msgs * p.slow_fraction
        roles[:p.slow] = "slow"
        dead_lo, dead_hi = p.slow, p.slow + p.dead
        death = np.full(n, steps + 1, np.int64)
        death[dead_lo:dead_hi] = round(p.dead_at_s / dt)
        roles[dead_lo:dead_hi] = "dead"
        pausing = np.zeros(n, np.bool_)
        pausing[dead_hi:dead_hi + p.paused] = p.pause_for_s > 0
        roles[dead_hi:dead_hi + p.paused] = "paused"
        return cls(rtt, delay, np.maximum(1, delay), rate, roles, death, pausing)

    @property
    def watch(self) -> list[int]:
        """The receivers traced one by one: the special ones and one normal."""
        return list(range(min(len(self.rtt), int((self.roles != "normal").sum()) + 1, 6)))


class _InFlight:
    """Feedback on its way: NAKs and credits to the senders, NAKs overheard by the other
    receivers, each due at the step it arrives (rings of ``ring`` steps)."""

    def __init__(self, d: _Deployment, ring: int, levels_desc: list[int]) -> None:
        self.d, self.ring, self.levels_desc = d, ring, levels_desc
        n = len(d.delay)
        self.nak_ring = np.zeros((ring, len(levels_desc)), np.int64)  # at the senders
        self.nak_fill = np.zeros((ring, len(levels_desc)))  # ... the highest fill
        self.heard_ring = np.zeros((ring, n), np.int64)  # level overheard by receivers
        self.credit_ring: dict[int, list[tuple[int, IntArray, IntArray]]] = {}
        self.naks_at_sender = {lv: 0 for lv in levels_desc}
        self.credits_at_sender = 0
        self.frames = 0  # feedback frames the senders heard

    def hear_naks(self, k: int, now: float, flows: list[Any]) -> None:
        row, fills = self.nak_ring[k % self.ring], self.nak_fill[k % self.ring]
        if not row.any():
            return
        for j, lv in enumerate(self.levels_desc):  # strongest first, as a window would
            for _ in range(int(row[j])):
                self.naks_at_sender[lv] += 1
                for f in flows:
                    assert isinstance(f, NakFlow)
                    f.controller.on_nak(lv, now=now, fill=float(fills[j]))
        self.frames += int(row.sum())
        row[:] = 0
        fills[:] = 0.0

    def hear_credits(self, k: int, now: float, flows: list[Any], names: list[str]) -> None:
        for s, who, lim in self.credit_ring.pop(k, ()):
            flow = flows[s]
            assert isinstance(flow, AckFlow)
            for i, limit in zip(who.tolist(), lim.tolist(), strict=True):
                flow.ledger.on_credit(names[i], limit, now=now)
            self.credits_at_sender += len(who)
            self.frames += len(who)

    def post_naks(self, k: int, levels: IntArray, fill_pct: np.ndarray) -> None:
        """Receivers with a nonzero ``levels`` entry multicast a NAK of that level."""
        em = np.flatnonzero(levels)
        lvl = levels[em]
        for j, lv in enumerate(self.levels_desc):
            mine = em[lvl == lv]
            if mine.size:
                at = (k + self.d.fb_delay[mine]) % self.ring
                np.add.at(self.nak_ring, (at, j), 1)
                np.maximum.at(self.nak_fill, (at, j), fill_pct[mine])
                self.overhear(k, mine, lv)

    def overhear(self, k: int, mine: IntArray, lv: int) -> None:
        """The nearest emitter's NAK reaches receiver i after delay[emitter] + delay[i];
        the emitter itself hears the next nearest."""
        delay = self.d.delay
        order = mine[np.argsort(delay[mine], kind="stable")[:2]]
        via = np.full(len(delay), delay[order[0]])
        if order.size > 1:
            via[order[0]] = delay[order[1]]
        hear_at = (k + np.maximum(1, via + delay)) % self.ring
        mask = np.ones(len(delay), np.bool_)
        if order.size == 1:
            mask[order[0]] = False
        rows, cols = hear_at[mask], np.flatnonzero(mask)
        self.heard_ring[rows, cols] = np.maximum(self.heard_ring[rows, cols], lv)

    def post_credits(self, k: int, due: np.ndarray, limit: IntArray) -> None:
        """Each due (sender, receiver) grant reaches its sender one way later."""
        for s in range(due.shape[0]):
            who = np.flatnonzero(due[s])
            if not who.size:
                continue
            at = k + self.d.fb_delay[who]
            for a in np.unique(at).tolist():
                sel = who[at == a]
                self.credit_ring.setdefault(int(a), []).append((s, sel, limit[s, sel]))


class _Model:
    """One run of the model, one method per phase of a time step (``step``)."""

    def __init__(self, p: SimParams, mode: str, seed: int) -> None:
        check_mode(mode)
        self.p, self.mode, self.seed = p, mode, seed
        self.rng = rng = np.random.default_rng(seed)
        S, N = p.senders, p.receivers
        self.steps = max(1, round(p.duration_s / p.step_s))
        self.d = d = _Deployment.draw(p, rng, self.steps)
        self.ring = int(2 * d.delay.max() + 4)
        self.cap = np.full(N, p.capacity_msgs, np.int64)
        self.per_step = d.rate * p.step_s
        self.names = [f"r{i}" for i in range(N)]
        self.watch = d.watch
        self.faulted = d.roles != "normal"
        self._init_senders(mode)
        # receiver state (S x N where the sender matters)
        self.q = np.zeros((S, N), np.int64)
        self.sock = np.zeros((S, N), np.int64)  # unread socket backlog while paused
        self.pos = np.zeros((S, N), np.int64)
        self.consumed = np.zeros(N, np.int64)
        self.dropped = np.zeros(N, np.int64)
        self.lost = np.zeros(N, np.int64)
        self.qpeak = np.zeros(N, np.int64)
        self.qtot = np.zeros(N, np.int64)
        self.carry = np.zeros(N)
        self.everyone = np.ones(N, np.bool_)
        self.reading = self.everyone
        self.fill = VecFillMonitor(self.cap, p.nak, rng=rng) if mode == "nak" else None
        if self.fill is not None:  # the group RTT the senders advertise in DATA
            self.fill.set_rtt(float(d.rtt.max()))
        self.granter = VecCreditGranter(S, self.cap, self.ack_cfg) if mode == "ack" else None
        if self.granter is not None:  # receivers learn of the senders from their HELLO
            self.granter.on_sender(np.ones((S, N), np.bool_), np.zeros((S, N), np.int64), 0.0)
        self.fb = _InFlight(d, self.ring, sorted(p.nak.levels, reverse=True))
        # traces
        self.trace_every = max(1, round(p.trace_every_s / p.step_s))
        self.tr: dict[str, list[Any]] = {"t": [], "rate_limit": [], "credit": [], "sent": [],
                                         "delivered_normal": [], "backlog": []}
        self.tr_q: list[list[int]] = []
        self.tr_c: list[list[int]] = []

    def _init_senders(self, mode: str) -> None:
        """The real sender policies, one per sender, and what feeds them."""
        p, S = self.p, self.p.senders
        self.ack_cfg = dataclasses.replace(p.ack, receiver_timeout_s=p.receiver_timeout_s)
        self.flows = [make_sender_flow(mode, stream="sim", sender=f"s{s}", epoch=1, nak=p.nak,
                                       ack=self.ack_cfg) for s in range(S)]
        for f in self.flows:  # as a live sender measures it from its receivers' HELLO answers
            if isinstance(f, NakFlow):
                f.controller.set_rtt(float(self.d.rtt.max()))
        self.send_hist = np.zeros((S, self.ring), np.int64)
        self.src_carry = np.zeros(S)
        self.phys_carry = np.zeros(S)
        self.backlog = np.zeros(S)  # messages the application has produced but not yet sent
        self.sent = np.zeros(S, np.int64)
        self.backlog_peak = 0.0
        self.bursty = p.burst_on_s > 0 and p.burst_off_s > 0
        self.sourced = p.source_rate_msgs > 0 or self.bursty

    def run(self, progress: Callable[[float], None] | None) -> dict[str, Any]:
        wall0 = time.perf_counter()
        next_progress = 0
        for k in range(self.steps):
            self.step(k)
            if progress is not None and k >= next_progress:
                progress(k / self.steps)
                next_progress = k + max(1, self.steps // 50)
        if progress is not None:
            progress(1.0)
        return _summary(self, time.perf_counter() - wall0)

    def step(self, k: int) -> None:
        now = k * self.p.step_s
        self.fb.hear_naks(k, now, self.flows)
        self.fb.hear_credits(k, now, self.flows, self.names)
        self.send(k, now)
        arr = self.arrivals(k, now)
        over = self.enqueue(arr, now) if arr.any() else None
        self.consume()
        if self.fill is not None:
            self.emit_naks(k, now, over)
        elif self.granter is not None:
            self.emit_credits(k, now)
        if k % self.trace_every == 0:
            self.sample(now)

    # -- senders ---------------------------------------------------------------------------
    def send(self, k: int, now: float) -> None:
        p, slot = self.p, k % self.ring
        for s, flow in enumerate(self.flows):
            phys = p.sender_max_rate_msgs * p.step_s + self.phys_carry[s]
            want = int(phys)
            if self.sourced:
                want = min(want, self.produce(s, now))
            due = flow.next_deadline()
            if due is not None and due <= now:  # the policy's timer, as a driver runs it
                flow.on_timer(now=now)  # (ack: evictions)
            n = flow.admit_up_to(want, now=now) if want else 0
            if self.sourced:
                self.backlog[s] -= n
            self.phys_carry[s] = min(phys - n, 1.0) if n == want else 0.0
            self.send_hist[s, slot] = n
            self.sent[s] += n

    def produce(self, s: int, now: float) -> int:
        """The application's offered load for sender s this step; its whole backlog."""
        p = self.p
        on = not self.bursty or (now % (p.burst_on_s + p.burst_off_s)) < p.burst_on_s
        if on:
            offered = (p.source_rate_msgs or p.sender_max_rate_msgs) * p.step_s \
                + self.src_carry[s]
            self.backlog[s] += int(offered)
            self.src_carry[s] = offered - int(offered)
        self.backlog_peak = max(self.backlog_peak, self.backlog[s])
        return int(self.backlog[s])

    # -- receivers -------------------------------------------------------------------------
    def arrivals(self, k: int, now: float) -> IntArray:
        """What reaches the receivers' queues this step (dead ones lose it, paused ones
        leave it in their socket until they read again)."""
        p, d = self.p, self.d
        arr = self.send_hist[:, (k - d.delay) % self.ring]
        alive = self.everyone
        if p.dead:
            alive = d.death > k
            if not alive.all():
                self.lost += np.where(alive, 0, arr.sum(axis=0))
                arr = np.where(alive, arr, 0)
        if d.pausing.any():
            in_pause = d.pausing & (now >= p.pause_at_s) & (
                ((now - p.pause_at_s) % p.pause_every_s) < p.pause_for_s)
            self.reading = alive & ~in_pause
            if in_pause.any():
                self.sock += np.where(in_pause, arr, 0)
                arr = np.where(in_pause, 0, arr)
            if self.sock.any():
                arr = arr + np.where(self.reading, self.sock, 0)
                self.sock = np.where(self.reading, 0, self.sock)
        elif p.dead:
            self.reading = alive
        return arr

    def _total(self, per_sender: IntArray) -> IntArray:
        total: IntArray = per_sender.sum(axis=0) if self.p.senders > 1 else per_sender[0]
        return total

    def enqueue(self, arr: IntArray, now: float) -> IntArray | None:
        """Queue the arrivals; the overflow per receiver if any queue overflowed."""
        p, granter = self.p, self.granter
        self.pos += arr
        if granter is not None:
            granter.on_sender(arr > 0, self.pos, now)
        self.q += arr
        over: IntArray = self._total(self.q) - self.cap
        if not (over > 0).any():
            if granter is not None:
                granter.on_enqueued(arr)
            return None
        over = np.maximum(over, 0)
        newest = p.overflow == "drop-newest"
        drop = _split(over, arr if newest else self.q) if p.senders > 1 else over[None, :]
        self.q -= drop
        self.dropped += over
        if granter is not None:
            granter.on_enqueued(arr - drop if newest else arr)
            if not newest:
                granter.on_released(drop)
        return over

    def consume(self) -> None:
        qtot = self._total(self.q)
        np.maximum(self.qpeak, qtot, out=self.qpeak)
        budget = np.where(self.reading, self.per_step + self.carry, 0.0)
        c = np.minimum(budget.astype(np.int64), qtot)
        self.carry = np.where(self.reading, np.minimum(budget - c, 1.0), self.carry)
        if c.any():
            take = _split(c, self.q) if self.p.senders > 1 else c[None, :]
            self.q -= take
            self.consumed += c
            qtot = self._total(self.q)
            if self.granter is not None:
                self.granter.on_released(take)
        self.qtot = qtot

    # -- feedback --------------------------------------------------------------------------
    def emit_naks(self, k: int, now: float, over: IntArray | None) -> None:
        fill, qtot = self.fill, self.qtot
        assert fill is not None
        heard = self.fb.heard_ring[k % self.ring]
        if heard.any():
            fill.on_heard(heard, now)
            heard[:] = 0
        # a queue that overflowed this step is full, whatever the consumer took since
        seen = qtot if over is None else np.where(over > 0, self.cap, qtot)
        levels = fill.update(seen, now, self.reading if self.p.dead or self.d.pausing.any()
                             else None)
        if levels.any():
            self.fb.post_naks(k, levels, 100.0 * qtot / self.cap)

    def emit_credits(self, k: int, now: float) -> None:
        assert self.granter is not None
        due, limit = self.granter.poll(now, self.reading)
        if due.any():
            self.fb.post_credits(k, due, limit)

    # -- results ---------------------------------------------------------------------------
    def sample(self, now: float) -> None:
        tr = self.tr
        r_lim, cred = self.flows[0].limits(now=now)
        tr["t"].append(round(now, 6))
        tr["rate_limit"].append(None if r_lim is None else round(r_lim, 1))
        tr["credit"].append(cred)
        tr["sent"].append(int(self.sent.sum()))
        tr["delivered_normal"].append(int(self.consumed[~self.faulted].sum()))
        tr["backlog"].append(float(self.backlog.sum()))
        self.tr_q.append(self.qtot[self.watch].tolist())
        self.tr_c.append(self.consumed[self.watch].tolist())


def _summary(m: _Model, wall_s: float) -> dict[str, Any]:
    """A run's metrics and traces, JSON-ready."""
    p, d, fill, names, fb = m.p, m.d, m.fill, m.names, m.fb
    duration = m.steps * p.step_s
    goodput = m.consumed / duration
    alive_end = d.death > m.steps - 1
    normal = ~m.faulted
    trace: dict[str, Any] = dict(m.tr)
    trace.update(watch_traces(names, m.watch, m.tr_q, m.tr_c))
    fault_t = fault_time(p)
    sent = int(m.sent.sum())
    return {
        "mode": m.mode,
        "seed": m.seed,
        "params": p.scalars(),
        "duration_s": duration,
        "goodput": goodput_summary(goodput, alive_end, normal),
        "receivers": [{"id": names[i], "role": str(d.roles[i]),
                       "consume_rate": float(d.rate[i]), "rtt_s": float(d.rtt[i]),
                       "goodput": round(float(goodput[i]), 1),
                       "delivered": int(m.consumed[i]), "dropped": int(m.dropped[i]),
                       "lost": int(m.lost[i]), "queue_peak": int(m.qpeak[i])}
                      for i in m.watch],
        "delivered": int(m.consumed.sum()),
        "dropped": int(m.dropped.sum()),
        "dropped_normal": int(m.dropped[normal].sum()),
        "unrepaired": int(m.dropped[alive_end].sum()),  # the model does not repair
        "lost": int(m.lost.sum()),
        "queue_peak": int(m.qpeak.max()),
        "sent": sent,
        "send_rate": round(sent / duration, 1),
        "feedback_per_s_at_sender": round(fb.frames / p.senders / duration, 2),
        "naks_at_sender": {str(k): v for k, v in fb.naks_at_sender.items()},
        "credits_at_sender": fb.credits_at_sender,
        "naks_suppressed": 0 if fill is None else fill.suppressed,
        "naks_predicted": 0 if fill is None else fill.predicted,
        "source_backlog_peak": m.backlog_peak,
        "recovery_s": recovery_time(m.tr, fault_t, p),
        "fault_t": fault_t,
        "sender": m.flows[0].snapshot(),
        "trace": trace,
        "wall_s": round(wall_s, 3),
    }


def simulate(params: SimParams, mode: str, *, seed: int = 0,
             progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Run one deployment under ``mode``; return its metrics and traces (JSON-ready).

    Each time step: the senders hear the feedback due now and send what their policy
    admits; the receivers take what arrives (a dead one loses it, a paused one leaves it
    in its socket), overflow, consume and send feedback (``_Model.step``)."""
    return _Model(params, mode, seed).run(progress)


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
