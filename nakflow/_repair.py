"""The receiver's repair requests: when to ask for which missing seqs (SRM, NORM).

A new gap waits a random hold-off (the NAKs' truncated exponential), so that when
many receivers miss the same frame a few ask and the rest overhear them; a gap
someone else asked for is not asked for again until ``retry_s`` passed without the
repair. Seqs the receiver's own full queue dropped are asked for only once the fill
is below ``refill_below`` (room is back). After ``max_requests`` with no repair of
that stream arriving in between (a sender gone or unreachable), a gap is given up.
Requests are multicast feedback (REPAIR) like NAKs. No clock, no randomness of its
own: ``now`` and ``rng`` come in.
"""

from __future__ import annotations

from typing import Any

from ._codec import MAX_RANGES, Repair
from ._config import RepairConfig
from ._fill import Uniform, backoff_delay
from ._gaps import DROPPED
from ._seqtrack import SequenceTracker


class RepairRequester:
    """Turns a SequenceTracker's gaps into REPAIR frames."""

    def __init__(self, tracker: SequenceTracker, stream: str, receiver: str,
                 config: RepairConfig | None = None, *, rng: Uniform | None = None,
                 capacity_msgs: int = 1) -> None:
        self.tracker = tracker
        self.capacity_msgs = capacity_msgs
        self.stream = stream
        self.receiver = receiver
        self.config = config or RepairConfig()
        self._rng = rng
        self._next_due = 0.0
        self.requests_sent = 0
        self.msgs_requested = 0
        self.suppressed = 0
        self.given_up = 0

    def _holdoff(self) -> float:
        cfg = self.config
        if self._rng is None or cfg.backoff_s <= 0:
            return 0.0
        return backoff_delay(self._rng.random(), cfg.backoff_s)

    def poll(self, fill: float, *, now: float) -> list[Repair]:
        """Requests due at ``now``; ``fill`` is the queue's fill, a fraction of capacity."""
        with_gaps = self.tracker.with_gaps
        if not with_gaps or (now < self._next_due and not self.tracker.gaps_added):
            return []
        self.tracker.gaps_added = 0
        cfg = self.config
        room = fill < cfg.refill_below
        free = (1.0 - fill) * self.capacity_msgs
        out: list[Repair] = []
        next_due = float("inf")
        streams = self.tracker.streams
        for key in list(with_gaps):
            gaps = with_gaps[key]
            st = streams.get(key)
            # once its END is in, a stream sends nothing new: ask for what fits now,
            # before the sender's linger for repairs runs out
            ended = st is not None and st.final_seq is not None
            if gaps.progress:  # the sender is answering (repairs wait for its rate
                gaps.progress = False  # limit): tries count only while nothing comes
                for g in gaps:
                    g.tries = min(g.tries, 1)
            ranges: list[tuple[int, int]] = []
            for g in list(gaps):
                if g.due < 0:
                    g.due = now + self._holdoff()
                if g.due > now:
                    next_due = min(next_due, g.due)
                    continue
                if g.kind == DROPPED and not room:
                    if ended and g.hi - g.lo <= free:
                        free -= g.hi - g.lo
                    else:  # look again soon: the consumer makes room
                        next_due = min(next_due, now + cfg.retry_s / 4)
                        continue
                if g.tries >= cfg.max_requests:
                    gaps.give_up(g)
                    self.given_up += g.hi - g.lo
                    continue
                g.tries += 1
                g.due = now + cfg.retry_s
                next_due = min(next_due, g.due)
                ranges.append((g.lo, g.hi))
                self.msgs_requested += g.hi - g.lo
            if not gaps:
                del with_gaps[key]
            for i in range(0, len(ranges), MAX_RANGES):
                out.append(Repair(self.stream, self.receiver, key[0], key[1],
                                  tuple(ranges[i:i + MAX_RANGES]), now))
        self.requests_sent += len(out)
        self._next_due = next_due
        return out

    def on_overheard(self, frame: Repair, *, now: float) -> None:
        """Another receiver asked: hold back our requests for what it asked for."""
        gaps = self.tracker.with_gaps.get((frame.sender, frame.epoch))
        if gaps is None:
            return
        later = now + self.config.retry_s
        for g in gaps:
            if any(lo < g.hi and g.lo < hi for lo, hi in frame.ranges) and g.due < later:
                g.due = later + self._holdoff()
                self.suppressed += 1

    def next_deadline(self) -> float | None:
        if not self.tracker.with_gaps:
            return None
        return self._next_due

    def snapshot(self) -> dict[str, Any]:
        return {"requests_sent": self.requests_sent, "msgs_requested": self.msgs_requested,
                "requests_suppressed": self.suppressed, "given_up": self.given_up,
                "streams_missing": len(self.tracker.with_gaps)}
