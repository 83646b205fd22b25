"""Drive a SenderCore and a ReceiverCore over an in-memory link in 1 ms steps.

The link delivers each frame one step later, or drops it: DATA and RDATA with
``data_loss``, NAK and REPAIR with ``feedback_loss`` (HELLO, END and GONE pass: they
are control frames the live nodes repeat). The receiver's queue is bounded
(drop-newest) and consumed at a fixed number of messages per step. No sockets,
no clock: this is the protocol alone, as the live nodes and the simulator run it.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass

from nakflow import Message, NakConfig, ReceiverCore, RepairConfig, SenderCore

DATA_TYPES = {1, 7}  # DATA, RDATA
FEEDBACK_TYPES = {2, 8}  # NAK, REPAIR


@dataclass
class Link:
    rng: random.Random
    data_loss: float = 0.0
    feedback_loss: float = 0.0

    def passes(self, buf: bytes, lossy_types: set[int], loss: float) -> bool:
        return not (loss and buf[2] in lossy_types and self.rng.random() < loss)


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


def run_link(link: Link, *, messages: int, batch: int, capacity_msgs: int,
             consume_per_ms: int, repair: RepairConfig | None = None,
             max_ms: int = 60_000) -> Outcome:
    tx = SenderCore(mode="nak", stream="s", sender_id="p", epoch=1, repair=repair,
                    nak=NakConfig(), max_frame_bytes=1 << 20)
    rx = ReceiverCore(mode="nak", stream="s", receiver_id="r", capacity_msgs=capacity_msgs,
                      repair=repair, rng=random.Random(link.rng.random()), max_streams=16,
                      max_frame_bytes=1 << 20)
    queue: deque[Message] = deque()
    pending: list[tuple[tuple[str, int], Message]] = []
    seen: Counter[int] = Counter()
    to_rx: list[bytes] = [tx.hello(now=0.0)]  # as wait_for_receivers does
    to_tx: list[bytes] = [rx.hello(now=0.0)]
    sent, ended_at, step = 0, None, 0
    for step in range(max_ms):
        now = step / 1000
        for buf in to_tx:
            tx.on_feedback(buf, now=now)
        out = tx.repairs_due(now=now)
        while sent < messages:
            k = tx.flow.admit_up_to(min(batch, messages - sent), now=now)
            if not k:
                break
            out.append(tx.data([b"%d" % (sent + i) for i in range(k)], now=now))
            sent += k
        if sent == messages and ended_at is None:
            out.append(tx.end(now=now))
            ended_at = now
        to_tx = []
        for buf in to_rx:
            to_tx += rx.on_data(buf, pending.append, now=now)
        to_rx = [b for b in out if link.passes(b, DATA_TYPES, link.data_loss)]
        for key, msg in pending:
            if len(queue) >= capacity_msgs:
                rx.on_dropped(msg)
            else:
                queue.append(msg)
                rx.on_enqueued(key, 1)
        pending.clear()
        for _ in range(min(consume_per_ms, len(queue))):
            msg = queue.popleft()
            seen[msg.seq] += 1
            rx.on_released((msg.sender, msg.epoch), 1)
        fb = rx.poll(rx.seen_depth(len(queue), None, now=now), now=now)
        to_tx += [b for b in fb if link.passes(b, FEEDBACK_TYPES, link.feedback_loss)]
        if (ended_at is not None and now > ended_at + 0.05 and not queue and not to_rx
                and not rx.tracker.with_gaps and not tx.repairs_pending):
            break
    tot = rx.tracker.totals()
    return Outcome(sent=sent, delivered_total=sum(seen.values()), delivered_unique=len(seen),
                   repaired=tot["repaired"], lost=tot["lost"], dropped=tot["dropped"],
                   beyond_history=tot["beyond_history"], queued=len(queue),
                   missed_before_join=tot["missed_before_join"],
                   first_hand=sum(seen.values()) - tot["repaired"],
                   given_up=sum(sum(st.gaps.given_up) for st in rx.tracker.streams.values()
                                if st.gaps is not None), steps=step)
