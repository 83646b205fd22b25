"""The sender's side of repair, sans-I/O: the history, the queue of slices receivers asked
for, GONE for what is no longer held, and how long to keep answering after END.

A repair of what one receiver alone misses (``Repair.to_me``) goes to it alone, behind
its target prefix, within a budget of its own on top of new data
(``RepairConfig.share_alone`` of the rate limit; ``share`` over multicast, where it
crosses everyone's link), so a receiver catching up after a pause (tens of thousands of
messages asked for) never starves the others' new data. The core serves
them on its timer, in chunks of at most REPAIR_CHUNK_MSGS, taking turns: each audience
(everyone, or one receiver) has a queue of its own, and the audiences are served a chunk
each in turn, so a receiver that lost a few messages is not kept waiting behind one that
asks for thousands (a late joiner, a receiver back from a pause), as a switch's fair
queueing keeps a small flow from waiting behind a large one.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..config import RepairConfig
from ..policy.bucket import TokenBucket
from ..policy.registry import SenderFlow
from ..wire.codec import Repair
from .framer import Framer
from .history import SendHistory, Slice

REPAIR_CHUNK_MSGS = 256  # repairs admitted per look, at most
#: While repairs wait for the policy, the core looks again this often, s (waiting for
#: feedback instead held W1's batched NAK repairs to about 5,000 msgs/s).
REPAIR_POLL_S = 0.001


class RepairServer:
    """Answers REPAIR frames from a bounded history of what was sent."""

    def __init__(self, config: RepairConfig, *, multicast: bool = False) -> None:
        self.config = config
        # a repair for one receiver reaches the others too over multicast (their SUB
        # filters it out after it crossed the link): then it takes ``share``
        self._share_of_rate = config.share if multicast else config.share_alone
        self.history = SendHistory(config)
        #: what is asked for, by audience (None: everyone; else the receiver alone), in
        #: the order the audiences take turns: the one served last goes to the end
        self._queues: dict[str | None, deque[Slice]] = {}
        self._budget = TokenBucket(1.0, burst_s=0.005)
        self.targeted = 0  # messages re-sent to one receiver alone
        self.pending = 0  # messages asked for and not yet re-sent
        self.requests = 0
        self.holds = 0  # requests to hold (REPAIR with hold): included in requests
        self.frames = 0
        self.last_request = -1e300
        self.due_at = math.inf  # when to look at the queue again (inf: empty)

    def on_behind(self, now: float) -> None:
        """A NAK after END: a receiver is still behind (reading a socket backlog, its
        queue full) and may yet find drops to ask for; the linger goes on as after a
        request. (The fanout stop: the stopped receiver's queue first dropped 30 ms after
        the sender's linger of 0.14 s had ended, with no request heard: 311-37,802
        drops given up in 3 runs of 17; with this, 8 runs of 8 repaired or told.)"""
        self.last_request = now

    def on_request(self, frame: Repair, *, now: float) -> list[tuple[int, int]]:
        """Queue what ``frame`` asks for (or, for a hold, keep it for that receiver: see
        ``SendHistory.hold``); returns the ranges no longer held (for GONE)."""
        self.requests += 1
        self.last_request = now
        if frame.hold:
            self.holds += 1
            return self.history.hold(frame.ranges, now=now, who=frame.receiver)
        # no more queued than the history holds: the rest is asked for again (and not
        # marked as on its way: it was, and the 430 messages past the cap in
        # tests/test_close.py's stalled consumer were refused as repairs in flight till
        # the receiver gave up on them)
        target = frame.receiver if frame.to_me else None
        slices, gone = self.history.lookup(frame.ranges, now=now, who=target or "",
                                           limit=max(0, self.config.history_msgs - self.pending))
        if slices:
            queue = self._queues.get(target)
            if queue is None:
                queue = self._queues[target] = deque()
            queue.extend(slices)
            self.pending += sum(len(sl.payloads) for sl in slices)
        if self.pending:
            self.due_at = min(self.due_at, now)
        return gone

    def serve(self, policy: SenderFlow, framer: Framer, now: float) -> list[bytes]:
        """RDATA for as many queued repairs as their budget allows now, a chunk per
        audience in turn: a repair for everyone loads every receiver as new data does,
        and goes through the policy (ahead of new data); one for a receiver alone goes
        within ``share`` of the rate, on top of it. An audience whose budget is spent
        waits and the others go on. Looks again in REPAIR_POLL_S while any wait."""
        out: list[bytes] = []
        spent: set[bool] = set()  # the budgets found empty now (True: everyone's)
        while ready := [t for t in self._queues if (t is None) not in spent]:
            target = ready[0]  # the first in line whose budget may have room
            want = self._run(target)
            k = (policy.admit_up_to(want, now=now) if target is None
                 else self._share(policy, now).take_up_to(want, now=now))
            if not k:
                spent.add(target is None)
                continue
            out += [framer.rdata(sl, now, to=to) for sl, to in self.take(k, now=now, who=target)]
        self.due_at = now + REPAIR_POLL_S if self.pending else math.inf
        return out

    def _run(self, target: str | None) -> int:
        """Messages queued for ``target``, up to REPAIR_CHUNK_MSGS (its turn's most)."""
        n = 0
        for sl in self._queues[target]:
            n += len(sl.payloads)
            if n >= REPAIR_CHUNK_MSGS:
                return REPAIR_CHUNK_MSGS
        return n

    def _share(self, policy: SenderFlow, now: float) -> TokenBucket:
        rate = policy.limits(now=now)[0]
        budget = self._budget
        if rate is not None and rate * self._share_of_rate != budget.rate:
            budget.set_rate(rate * self._share_of_rate, now=now)
        return budget

    def take(self, k: int, *, now: float, who: str | None) -> list[tuple[Slice, str | None]]:
        """Up to ``k`` messages queued for ``who`` (None: everyone), as slices and for whom
        (a slice is cut where ``k`` ends); its turn is over: it goes to the end of the
        line."""
        queues = self._queues
        q = queues.pop(who)
        out: list[tuple[Slice, str | None]] = []
        while k and q:
            sl = q.popleft()
            n = len(sl.payloads)
            if n > k:  # send part now, the rest when admitted
                q.appendleft(Slice(sl.seq + k, sl.ts, sl.payloads[k:]))
                sl, n = Slice(sl.seq, sl.ts, sl.payloads[:k]), k
            k -= n
            self.pending -= n
            self.history.mark_sent(sl.seq, now=now, who=who or "")
            if who is not None:
                self.targeted += n
            out.append((sl, who))
        if q:
            queues[who] = q  # the end of the line
        self.frames += len(out)
        return out

    def linger_wait(self, start: float, *, now: float, sent_any: bool) -> float | None:
        """After END (sent at ``start``): how long from ``now`` to go on answering, or None
        when done: receivers ask for a lost tail only once END shows it, so wait until none
        came for ``linger_quiet_s`` (three ``retry_s`` if one came within the last second),
        at most ``linger_max_s``."""
        if not sent_any:
            return None
        cfg = self.config
        end = start + cfg.linger_max_s
        quiet = (cfg.linger_quiet_s if now - self.last_request > 1.0
                 else max(cfg.linger_quiet_s, 3 * cfg.retry_s))
        quiet_until = max(start, self.last_request) + quiet
        if now >= end or (now >= quiet_until and not self.pending):
            return None
        return max(0.0, min(quiet_until, end) - now)

    def snapshot(self) -> dict[str, Any]:
        return {"requests": self.requests, "holds": self.holds, "frames": self.frames,
                "pending": self.pending, "targeted": self.targeted, **self.history.snapshot()}
