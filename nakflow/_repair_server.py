"""The sender's side of repair, sans-I/O: the history, the queue of slices receivers asked
for, GONE for what is no longer held, and how long to keep answering after END.

Repairs leave through the sender's policy (the same rate limit as new data) in chunks of
at most REPAIR_CHUNK_MSGS; the core asks for them on its timer.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ._codec import Repair
from ._config import RepairConfig
from ._framer import Framer
from ._history import SendHistory, Slice
from .policies import SenderFlow

REPAIR_CHUNK_MSGS = 256  # repairs admitted per look, at most
#: While repairs wait for the policy, the core looks again this often, s (waiting for
#: feedback instead held W1's batched NAK repairs to about 5,000 msgs/s).
REPAIR_POLL_S = 0.001


class RepairServer:
    """Answers REPAIR frames from a bounded history of what was sent."""

    def __init__(self, config: RepairConfig) -> None:
        self.config = config
        self.history = SendHistory(config)
        self._queue: deque[Slice] = deque()
        self.pending = 0  # messages asked for and not yet re-sent
        self.requests = 0
        self.frames = 0
        self.last_request = -1e300
        self.due_at = math.inf  # when to look at the queue again (inf: empty)

    def on_request(self, frame: Repair, *, now: float) -> list[tuple[int, int]]:
        """Queue what ``frame`` asks for; returns the ranges no longer held (for GONE)."""
        self.requests += 1
        self.last_request = now
        slices, gone = self.history.lookup(frame.ranges, now=now)
        cap = self.config.history_msgs
        for sl in slices:
            if self.pending + len(sl.payloads) > cap:
                break  # asked for more than the history holds: the rest is asked again
            self._queue.append(sl)
            self.pending += len(sl.payloads)
        if self.pending:
            self.due_at = min(self.due_at, now)
        return gone

    def serve(self, policy: SenderFlow, framer: Framer, now: float) -> list[bytes]:
        """RDATA for as many queued repairs as ``policy`` admits now (through the same
        limit as new data); looks again in REPAIR_POLL_S while any wait."""
        k = policy.admit_up_to(min(self.pending, REPAIR_CHUNK_MSGS), now=now)
        out = [framer.rdata(sl, now) for sl in self.take(k, now=now)]
        self.due_at = now + REPAIR_POLL_S if self.pending else math.inf
        return out

    def take(self, k: int, *, now: float) -> list[Slice]:
        """Up to ``k`` queued messages, as slices (a slice is cut where ``k`` ends)."""
        out: list[Slice] = []
        q = self._queue
        while k and q:
            sl = q.popleft()
            n = len(sl.payloads)
            if n > k:  # send part now, the rest when admitted
                q.appendleft(Slice(sl.seq + k, sl.ts, sl.payloads[k:]))
                sl, n = Slice(sl.seq, sl.ts, sl.payloads[:k]), k
            k -= n
            self.pending -= n
            self.history.mark_sent(sl.seq, now=now)
            out.append(sl)
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
        return {"requests": self.requests, "frames": self.frames, "pending": self.pending,
                **self.history.snapshot()}
