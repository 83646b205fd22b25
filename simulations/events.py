"""An independent event-driven model (SimPy) of the same deployments, for cross-checks.

Message by message in continuous time, with the scalar nakflow objects on both
sides: the SenderFlow (``admit`` with its waits, as the live Sender uses it) and
the ReceiverFlow (FillMonitor / CreditGranter, polled on every arrival and
consumption, and at the policy's deadlines). It supports what the small
cross-check cases need: S senders, N receivers, per-receiver RTT, slow receivers
and drop-newest queues. Slow (about 10 µs per event): meant for small cases.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import simpy

from nakflow.policy.registry import make_receiver_flow, make_sender_flow
from nakflow.wire import Credit, Frame, Nak

from .model import SimParams


class _Receiver:
    def __init__(self, env: simpy.Environment, model: _Model, i: int, rate: float,
                 one_way: float) -> None:
        self.env, self.model, self.i = env, model, i
        self.rate, self.one_way = rate, one_way
        self.name = f"r{i}"
        p = model.p
        self.flow = make_receiver_flow(model.mode, stream="sim", receiver=self.name,
                                       capacity_msgs=p.capacity_msgs, nak=p.nak, ack=model.ack,
                                       rng=model.rng)
        self.queue: list[tuple[str, int]] = []  # sender keys, FIFO
        self.cap = p.capacity_msgs
        self.consumed = self.dropped = self.peak = 0
        self.position: dict[tuple[str, int], int] = {}
        self.wake = env.event()
        for s in range(p.senders):
            self.flow.on_sender((f"s{s}", 1), 0, now=0.0)
        env.process(self._consume())
        env.process(self._ticker())

    def arrive(self, key: tuple[str, int], seq: int) -> None:
        now = self.env.now
        self.flow.on_sender(key, seq + 1, now=now)
        if len(self.queue) >= self.cap:
            self.dropped += 1  # drop-newest
            self.model.overflowed[self.i] = True
        else:
            self.queue.append(key)
            self.flow.on_enqueued(key, 1)
            self.peak = max(self.peak, len(self.queue))
            if not self.wake.triggered:
                self.wake.succeed()
        self.poll()

    def poll(self) -> None:
        depth = self.cap if self.model.overflowed[self.i] else len(self.queue)
        self.model.overflowed[self.i] = False
        for frame in self.flow.poll(depth, now=self.env.now):
            self.model.feedback(self, frame)

    def _consume(self) -> Any:
        while True:
            if not self.queue:
                self.wake = self.env.event()
                yield self.wake
            yield self.env.timeout(1.0 / self.rate)
            key = self.queue.pop(0)
            self.flow.on_released(key, 1)
            self.consumed += 1
            self.poll()

    def _ticker(self) -> Any:
        while True:  # deadlines of the policy (repeats, heartbeats): checked every ms
            yield self.env.timeout(0.001)
            self.poll()


class _Sender:
    def __init__(self, env: simpy.Environment, model: _Model, s: int) -> None:
        self.env, self.model = env, model
        p = model.p
        self.key = (f"s{s}", 1)
        self.flow = make_sender_flow(model.mode, stream="sim", sender=self.key[0], epoch=1,
                                     nak=p.nak, ack=model.ack)
        self.sent = 0
        self.fb = env.event()
        self.feedback_frames = 0
        env.process(self._run())

    def on_feedback(self, frame: Frame) -> None:
        self.feedback_frames += 1
        self.flow.on_feedback(frame, now=self.env.now)
        if not self.fb.triggered:
            self.fb.succeed()

    def _run(self) -> Any:
        gap = 1.0 / self.model.p.sender_max_rate_msgs
        while True:
            granted, wait = self.flow.admit(1, now=self.env.now)
            if not granted:
                deadline = self.flow.next_deadline()
                limit = wait if math.isfinite(wait) else 1.0
                if deadline is not None:
                    limit = min(limit, max(0.0, deadline - self.env.now))
                self.fb = self.env.event()
                yield self.env.timeout(max(limit, 1e-6)) | self.fb
                continue
            seq = self.sent
            self.sent += 1
            for r in self.model.receivers:
                self.env.process(self.model.deliver(r, self.key, seq))
            yield self.env.timeout(gap)


class _Model:
    def __init__(self, p: SimParams, mode: str, seed: int) -> None:
        self.p, self.mode = p, mode
        self.ack = dataclasses.replace(p.ack, receiver_timeout_s=p.receiver_timeout_s)
        self.env = env = simpy.Environment()
        self.rng = rng = np.random.default_rng(seed)
        rtt = p.rtt_s * (1.0 + p.rtt_jitter * rng.uniform(-1.0, 1.0, p.receivers))
        rates = np.full(p.receivers, float(p.consume_rate_msgs))
        rates[:p.slow] *= p.slow_fraction
        self.overflowed = [False] * p.receivers
        self.receivers = [_Receiver(env, self, i, float(rates[i]), float(rtt[i]) / 2)
                          for i in range(p.receivers)]
        self.senders = [_Sender(env, self, s) for s in range(p.senders)]

    def deliver(self, r: _Receiver, key: tuple[str, int], seq: int) -> Any:
        yield self.env.timeout(r.one_way)
        r.arrive(key, seq)

    def feedback(self, r: _Receiver, frame: Frame) -> None:
        self.env.process(self._feedback(r, frame))

    def _feedback(self, r: _Receiver, frame: Frame) -> Any:
        yield self.env.timeout(r.one_way)
        for s in self.senders:
            if isinstance(frame, Credit) and (frame.sender, frame.epoch) != s.key:
                continue
            s.on_feedback(frame)
        if isinstance(frame, Nak):  # multicast: the others overhear it one leg later
            for other in self.receivers:
                if other is not r:
                    self.env.process(self._overhear(other, frame))

    def _overhear(self, r: _Receiver, frame: Frame) -> Any:
        yield self.env.timeout(r.one_way)
        r.flow.on_overheard(frame, now=self.env.now)


def simulate_events(p: SimParams, mode: str, *, seed: int = 0) -> dict[str, Any]:
    """Run the event-driven model; the same summary keys as ``simulate``."""
    if p.dead or p.paused or p.source_rate_msgs or p.burst_on_s or p.spread_lo < 1:
        raise ValueError("the event-driven model covers slow receivers only")
    wall0 = time.perf_counter()
    m = _Model(p, mode, seed)
    m.env.run(until=p.duration_s)
    d = p.duration_s
    goodput = np.array([r.consumed / d for r in m.receivers])
    s0 = m.senders[0]
    return {
        "mode": mode,
        "goodput": {"overall": round(float(goodput.mean()), 1),
                    "min": round(float(goodput.min()), 1)},
        "receivers": [{"id": r.name, "goodput": round(r.consumed / d, 1), "dropped": r.dropped,
                       "queue_peak": r.peak} for r in m.receivers],
        "dropped": sum(r.dropped for r in m.receivers),
        "lost": 0,
        "queue_peak": max(r.peak for r in m.receivers),
        "sent": sum(s.sent for s in m.senders),
        "feedback_per_s_at_sender": round(s0.feedback_frames / d, 2),
        "wall_s": round(time.perf_counter() - wall0, 3),
    }
