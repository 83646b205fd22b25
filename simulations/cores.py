"""The protocol itself, simulated: real SenderCores and ReceiverCores over an in-memory network.

``SimLink`` is the third driver of the cores' contract (beside the threaded and asyncio
ones): it moves frames between them over a simulated network in steps of simulated
time and makes no protocol decision of its own. Everything the live nodes do is in it
(framing, natural batching, history and repair, accounting, NAK timing and the path
signals, credit, HELLO answers and the RTT, the lifecycle after END); each receiver's
queue is the live ``DeliveryQueue``. No sockets, no clock: time is the step counter,
randomness one seeded generator. ``simulate_cores`` runs a deployment on it.

Network: receiver i sits ``rtt_s[i] / 2`` from every sender each way; feedback is
multicast, so receivers overhear each other (after the two one-way delays). A receiver
that is stopped (paused or dead) reads nothing; frames wait for it up to ``hwm_frames``
(ZeroMQ's high-water mark), later ones are dropped, as PUB drops them, and show up as
loss in flight.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nakflow import (
    AckConfig,
    DeliveryQueue,
    NakConfig,
    ReceiverConfig,
    ReceiverCore,
    RepairConfig,
    SenderConfig,
    SenderCore,
    check_mode,
)
from nakflow.wire import TARGET_MAGIC, target_prefix
from transports import SocketOptions

#: A simulated sender offers nothing until every receiver answered its HELLO (as a live
#: one in ``wait_for_receivers``: ``nakflow send`` and the Spark writer wait), or this
#: long has passed, s (a scenario whose receiver is down from the start still runs).
WAIT_RECEIVERS_MAX_S = 2.0

#: Frames that wait for a receiver that does not read, by default: what the live
#: channels queue (the PUB's send and the SUB's receive high-water marks; the kernel's
#: TCP buffers hold more still)
HWM_FRAMES = SocketOptions().sndhwm_msgs + SocketOptions().rcvhwm_msgs

DATA_TYPES = (1, 7)  # DATA, RDATA: the frames lost in flight
FEEDBACK_TYPES = (2, 8)  # NAK, REPAIR: the feedback frames lost on the way back


class SimLink:
    """An in-memory network between real cores, advanced one ``step_s`` at a time."""

    def __init__(self, senders: Sequence[SenderCore], receivers: Sequence[ReceiverCore], *,
                 step_s: float = 0.001, rtt_s: Sequence[float] | float = 0.002,
                 rng: random.Random | None = None, data_loss: float = 0.0,
                 shared_loss: float = 0.0, feedback_loss: float = 0.0,
                 hwm_frames: int = HWM_FRAMES) -> None:
        self.senders, self.receivers = list(senders), list(receivers)
        n = len(self.receivers)
        rtts = [rtt_s] * n if isinstance(rtt_s, (int, float)) else list(rtt_s)
        self.half = [max(1, round(r / 2 / step_s)) for r in rtts]  # one way, in steps
        self.step_s, self.k = step_s, 0
        self.rng = rng or random.Random(0)
        self.data_loss, self.shared_loss = data_loss, shared_loss
        self.feedback_loss, self.hwm_frames = feedback_loss, hwm_frames
        self.queues = [DeliveryQueue(rx.capacity_msgs, rx.config.overflow, wake=lambda: None,
                                     wake_every=1 << 30) for rx in self.receivers]
        self.stopped = [False] * n  # paused or dead: reads nothing, says nothing
        self.gone = [False] * n  # dead: its connections closed (``disconnect``)
        self._stopped_at: list[float | None] = [None] * n
        self.inbound: list[deque[tuple[int, bytes]]] = [deque() for _ in range(n)]
        self.overheard: list[deque[tuple[int, bytes]]] = [deque() for _ in range(n)]
        self.to_senders: deque[tuple[int, int, bytes]] = deque()  # (due step, rx, frame)
        self.in_flight_drops = [0] * n
        self.link_drops = [0] * n  # DATA and RDATA frames the link's loss took from each
        self._prefixes = [target_prefix(rx.receiver_id) for rx in self.receivers]

    @property
    def now(self) -> float:
        return self.k * self.step_s

    def disconnect(self, i: int) -> None:
        """Receiver ``i``'s process died: its connections close, what waited for it is
        gone and nothing more is queued for it (as a PUB drops a closed peer's pipe)."""
        self.gone[i] = self.stopped[i] = True
        self.inbound[i].clear()
        self.overheard[i].clear()

    def inject(self, i: int, buf: bytes) -> None:
        """Put ``buf`` on receiver ``i``'s data channel (arrives at the next step)."""
        self.inbound[i].append((self.k, buf))

    def step(self) -> None:
        """One step: feedback reaches the senders, their timers run, what they hand out
        goes on the wire; then each running receiver reads, overhears, exchanges with its
        queue and answers."""
        t, k = self.now, self.k
        for tx in self.senders:
            self._sender_step(tx, t)
        for i, rx in enumerate(self.receivers):
            box = self.inbound[i]
            if self.stopped[i]:
                if self._stopped_at[i] is None:
                    self._stopped_at[i] = t
                while len(box) > self.hwm_frames:  # PUB drops past the high-water mark
                    box.pop()
                    self.in_flight_drops[i] += 1
                continue
            since = self._stopped_at[i]
            self._stopped_at[i] = None
            rx.late(0.0 if since is None else t - since, t)  # a stopped process ran that late
            queue = self.queues[i]
            while box and box[0][0] <= k and rx.wants_data(queue.full):
                rx.receive_data(box.popleft()[1], t)
            rx.io_behind(bool(box) and box[0][0] <= k, t)  # frames due left unread
            hear = self.overheard[i]
            while hear and hear[0][0] <= k:
                rx.receive_overheard(hear.popleft()[1], t)
            rx.exchange(queue, t)
            self._feedback_out(i, rx.frames_to_send())
        self.k += 1

    def _sender_step(self, tx: SenderCore, t: float) -> None:
        k, back = self.k, self.to_senders
        for _ in range(len(back)):  # feedback is multicast: every sender hears it
            due, i, buf = back[0]
            if due > k:
                break
            back.popleft()
            for s in self.senders:
                s.receive_feedback(buf, t)
        timer = tx.get_timer()
        if timer is not None and t >= timer:
            tx.handle_timer(t)
        rng = self.rng
        for buf in tx.frames_to_send():
            only = self._target(buf)  # a repair for one receiver alone: its topic
            lossy = buf[2 + (0 if only is None else len(only))] in DATA_TYPES
            shared = lossy and self.shared_loss and rng.random() < self.shared_loss
            for i, half in enumerate(self.half):
                if (only is not None and only != self._prefixes[i]) or self.gone[i]:
                    continue  # ZeroMQ's SUB filters it out there, or no one is there
                if shared or (lossy and self.data_loss and rng.random() < self.data_loss):
                    self.link_drops[i] += 1
                else:
                    self.inbound[i].append((k + half, buf))

    @staticmethod
    def _target(buf: bytes) -> bytes | None:
        if buf[:2] != TARGET_MAGIC:
            return None
        return buf[:buf.index(b"\x00", 2) + 1]

    def _feedback_out(self, i: int, frames: list[bytes]) -> None:
        k, half = self.k, self.half
        for buf in frames:
            if (self.feedback_loss and buf[2] in FEEDBACK_TYPES
                    and self.rng.random() < self.feedback_loss):
                continue
            self.to_senders.append((k + half[i], i, buf))
            for j in range(len(self.receivers)):
                if j != i and not self.gone[j]:
                    self.overheard[j].append((k + half[i] + half[j], buf))


@dataclass(frozen=True)
class CoreSimParams:
    """One simulated deployment of the real cores (one sender)."""

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
    hwm_frames: int = HWM_FRAMES
    #: The first `paused` receivers stop reading and consuming for pause_for_s ...
    paused: int = 0
    #: ... every pause_every_s, s ...
    pause_every_s: float = 2.0
    pause_for_s: float = 0.3
    #: ... from pause_at_s on, s.
    pause_at_s: float = 1.0
    #: The paused receivers' consumers stop, not their processes: their I/O goes on
    #: reading into a queue nobody takes from (a consumer away, not a process stopped).
    consumer_away: bool = False
    #: The next `dead` receivers stop for good at dead_at_s.
    dead: int = 0
    dead_at_s: float = 2.0
    #: Fraction of DATA/RDATA frames lost on the way to each receiver (independently).
    data_loss: float = 0.0
    #: Fraction of DATA/RDATA frames lost near the sender, for every receiver at once.
    shared_loss: float = 0.0
    #: Fraction of NAK and REPAIR frames lost on the way back (HELLO, END, GONE and the
    #: rest pass: they are control frames the live nodes repeat).
    feedback_loss: float = 0.0
    #: Stop after this many messages (None: send until duration_s), then END.
    messages: int | None = None
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
    tx = SenderCore(SenderConfig(mode=mode, stream="sim", sender_id="s0", epoch=1, nak=p.nak,
                                 ack=p.ack, repair=p.repair,
                                 max_rate_msgs=p.sender_max_rate_msgs, frame_msgs=p.batch,
                                 linger_s=dt), now=0.0)
    rxs = [ReceiverCore(ReceiverConfig(mode=mode, stream="sim", receiver_id=f"r{i}",
                                       capacity_msgs=p.capacity_msgs, nak=p.nak, ack=p.ack,
                                       repair=p.repair, max_streams=16),
                        now=0.0, rng=random.Random(rng.random())) for i in range(n)]
    link = SimLink([tx], rxs, step_s=dt, rtt_s=p.rtt_s, rng=rng, data_loss=p.data_loss,
                   shared_loss=p.shared_loss, feedback_loss=p.feedback_loss,
                   hwm_frames=p.hwm_frames)
    seen: list[Counter[int]] = [Counter() for _ in range(n)]
    carry = [0.0] * n
    ended = False
    per_step = round(p.sender_max_rate_msgs * dt) + 1
    tx.want_receivers(n, 0.0)  # as a live sender waiting for its receivers
    waiting = True
    for _ in range(round((p.duration_s + 15.0) / dt)):
        t = link.now
        if waiting and (tx.receivers_ready() >= n or t >= WAIT_RECEIVERS_MAX_S):
            tx.want_receivers(0, t)
            waiting = False
        if not ended and not waiting:
            if t >= p.duration_s or (p.messages is not None and tx.sent >= p.messages):
                tx.close(t)
                ended = True
            else:
                for _ in range(per_step if p.messages is None
                               else min(per_step, p.messages - tx.sent)):
                    if tx.offer(b"%d" % tx.sent, t):  # the application sends what it may
                        break
                tx.flush(t)  # ... then waits a step: what it admitted leaves first
        for i in range(n):
            if link.gone[i]:
                continue
            away = _stopped(p, i, t)
            link.stopped[i] = away and not (p.consumer_away and i < p.paused)
            if p.paused <= i < p.paused + p.dead and link.stopped[i]:
                link.disconnect(i)  # dead
            if not away:
                carry[i] += p.consume_rate_msgs * dt
                for msg in link.queues[i].take(int(carry[i]), 0):
                    seen[i][msg.seq] += 1
                carry[i] -= int(carry[i])
        link.step()
        if ended and tx.closed and all(
                not rx.tracker.with_gaps and not len(link.queues[i]) and not link.inbound[i]
                for i, rx in enumerate(rxs) if not link.stopped[i]):
            break
    return _result(p, mode, tx, rxs, link, seen)


def _result(p: CoreSimParams, mode: str, tx: SenderCore, rxs: list[ReceiverCore],
            link: SimLink, seen: list[Counter[int]]) -> dict[str, Any]:
    rows = []
    for i, rx in enumerate(rxs):
        tot = rx.tracker.totals()
        rows.append({"receiver": f"r{i}", "role": ("paused" if i < p.paused else "dead"
                                                   if i < p.paused + p.dead else "normal"),
                     "delivered": len(seen[i]), "duplicated": sum(seen[i].values())
                     - len(seen[i]), "goodput_msgs": round(len(seen[i]) / p.duration_s, 1),
                     "queue_drops": rx.dropped, "in_flight_drops": link.in_flight_drops[i],
                     "link_drops": link.link_drops[i],
                     "repaired": tot["repaired"], "lost": tot["lost"],
                     "dropped_unrepaired": tot["dropped"],
                     "beyond_history": tot["beyond_history"],
                     "missed_before_join": tot["missed_before_join"],
                     "given_up": sum(sum(st.gaps.given_up) for st in rx.tracker.streams.values()
                                     if st.gaps is not None),
                     "queued": len(link.queues[i]), "progress_sent": rx.progress.sent})
    snap = tx.snapshot(link.now)
    return {"mode": mode, "sent": snap["sent"], "frames": snap["frames"],
            "sim_s": round(link.now, 3), "steps": link.k,
            "send_rate_msgs": round(snap["sent"] / p.duration_s, 1), "rtt_ms": snap["rtt_ms"],
            "cuts": snap["cuts"], "repair": snap["repair"], "start": snap["policy"].get("start"),
            "feedback_frames": snap["feedback_frames"], "receivers": rows}
