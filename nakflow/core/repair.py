"""The receiver's repair requests: when to ask for which missing seqs (SRM, NORM).

A new gap waits a random hold-off (the NAKs' truncated exponential), so that when
many receivers miss the same frame a few ask and the rest overhear them; a gap
someone else asked for is not asked for again until ``retry_s`` passed without the
repair. Seqs the receiver's own full queue dropped are asked for only once the fill
is below ``refill_below`` (room is back); meanwhile, at once, the sender is asked to
hold them (a REPAIR with ``hold``: at most one every HOLD_EVERY_S per stream, and all
that is still owed again every HOLD_RENEW_S), so the history still has them when room
comes however fast it moves on and however slowly the consumer gets there; so is
what was sent before the receiver joined (late join), from its first look. After
``max_requests`` with nothing of that stream arriving in between, no repair, no DATA,
no repeated END, for ``SENDER_SILENT_S`` at least (a sender gone or unreachable), the
stream's gaps are given up, all of them at once (what was not yet asked for will not come
either): a sender that still sends, or lingers after END, is answering, however long its
repairs wait for its rate limit. Requests are
multicast feedback (REPAIR) like NAKs. No clock, no randomness of its own: ``now`` and
``rng`` come in.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from ..config import RepairConfig
from ..policy.fill import Uniform, backoff_delay
from ..wire.codec import MAX_RANGES, Repair
from .gaps import DROPPED, DROPPED_OWN, JOINED, LOST, OWN_KINDS, GapList
from .history import HOLD_RENEW_S
from .seqtrack import SequenceTracker
from .tail import END_REPEAT_MAX_S

#: A stream's own drops are asked to be held at most this often, s: a queue that
#: overflows drops message by message, and one hold frame per look would flood the
#: feedback channel; the history keeps far longer than this.
HOLD_EVERY_S = 0.01
#: The gaps the sender is asked to hold: this receiver's own drops, and what was sent
#: before it joined (late join: a joiner that fell behind, its process stopped for 1 s,
#: asked for the first 498-3,700 of a 20,000-message stream after the history's 5 s had
#: forgotten them, and they stayed ``missed_before_join``). While owed, their hold is
#: renewed every HOLD_RENEW_S (``history``: a pin lasts three of them at least): a
#: consumer slower than the history's age (a data source's 1,024-row messages to a
#: receiver taking 5 a second) is still owed them at the end, and a sender's pin without
#: renewal ended and said GONE (beyond_history).
HELD_KINDS = (DROPPED, DROPPED_OWN, JOINED)
#: A gap is given up only once its sender has not been heard for this long, s, however
#: many tries went unanswered: a sender that lingers after END for this receiver says so
#: no more often than every END_REPEAT_MAX_S (its END repeated while it awaits receipts),
#: so this is two of those missed and a late one's margin. Ten tries 0.1 s apart raced
#: that repeat: in the epgm chaos round a slow receiver's repairs waited behind the late
#: joiners' in the sender's queue, and it gave up on 37-49 of its own drops of a stream
#: whose sender still lingered for it (2 rounds of 4).
SENDER_SILENT_S = 2.5 * END_REPEAT_MAX_S


class RepairRequester:
    """Turns a SequenceTracker's gaps into REPAIR frames."""

    def __init__(self, tracker: SequenceTracker, stream: str, receiver: str,
                 config: RepairConfig | None = None, *, rng: Uniform | None = None,
                 capacity_msgs: int | None = None) -> None:
        self.tracker = tracker
        self.capacity_msgs = capacity_msgs
        self.stream = stream
        self.receiver = receiver
        self.config = config or RepairConfig()
        self._rng = rng
        self._heap: list[tuple[float, tuple[str, int]]] = []  # (due, stream), may be stale
        self._scheduled: dict[tuple[str, int], float] = {}  # stream -> its live heap entry
        self.retry_s = self.config.retry_s  # at least 1.5 group RTTs (set_rtt)
        self.requests_sent = 0
        self.msgs_requested = 0
        self.suppressed = 0
        self.given_up = 0  # msgs given up after max_requests unanswered
        self.given_up_max_gaps = 0  # msgs given up past MAX_GAPS ranges in one stream
        #: (stream, msgs, why) given up since the last ``take_given_up``: ``unanswered``
        #: or ``max_gaps``, for the receiver's log
        self._given_up_news: list[tuple[tuple[str, int], int, str]] = []
        self.keepalives = 0  # one-message requests sent while the queue had no room
        self._kept_alive_at = -math.inf
        self.holds_sent = 0  # REPAIR frames asking the sender to hold own drops
        self.msgs_held = 0
        self._held_at: dict[tuple[str, int], float] = {}  # stream -> its last hold
        self._renewed_at: dict[tuple[str, int], float] = {}  # stream -> its holds' last renewal

    def set_rtt(self, rtt_s: float) -> None:
        """The senders' group RTT: a request is asked again no sooner than its repair can
        come back (retry_s, but at least 1.5 RTTs)."""
        self.retry_s = max(self.config.retry_s, 1.5 * rtt_s)

    def _holdoff(self) -> float:
        cfg = self.config
        if self._rng is None or cfg.backoff_s <= 0:
            return 0.0
        return backoff_delay(self._rng.random(), cfg.backoff_s)

    def poll(self, fill: float, *, now: float) -> list[Repair]:
        """Requests due at ``now``; ``fill`` is the queue's fill, a fraction of capacity.

        Only streams whose gaps changed since the last call, or whose next request is
        due, are looked at (a heap of due times): a flood of made-up streams with gaps
        costs what it adds, not a scan of every stream at every call.
        """
        tracker, heap, scheduled = self.tracker, self._heap, self._scheduled
        keys, tracker.dirty = tracker.dirty, set()
        while heap and heap[0][0] <= now:
            due, key = heapq.heappop(heap)
            if scheduled.get(key) == due:
                del scheduled[key]
                keys.add(key)
        out: list[Repair] = []
        for key in keys:
            gaps = tracker.with_gaps.get(key)
            if gaps is None:
                continue
            if overflowed := gaps.take_overflowed():
                self.given_up_max_gaps += overflowed
                self._given_up_news.append((key, overflowed, "max_gaps"))
            before = self.given_up
            holds, hold_due = self._holds(key, gaps, fill, now)
            ranges, due = self._due_ranges(key, gaps, fill, now)
            if self.given_up > before:
                self._given_up_news.append((key, self.given_up - before, "unanswered"))
            due = min(due, hold_due)
            if not gaps:
                del tracker.with_gaps[key]
                self._held_at.pop(key, None)
                self._renewed_at.pop(key, None)
            elif due < scheduled.get(key, math.inf):
                scheduled[key] = due
                heapq.heappush(heap, (due, key))
            for i in range(0, len(holds), MAX_RANGES):
                out.append(Repair(self.stream, self.receiver, key[0], key[1],
                                  tuple(holds[i:i + MAX_RANGES]), now, True, True))
                self.holds_sent += 1
            for to_me in (False, True):  # others may miss these too; these only I miss
                mine = [(lo, hi) for lo, hi, own in ranges if own == to_me]
                for i in range(0, len(mine), MAX_RANGES):
                    out.append(Repair(self.stream, self.receiver, key[0], key[1],
                                      tuple(mine[i:i + MAX_RANGES]), now, to_me))
        if len(heap) > 4 * len(scheduled) + 64:  # drop stale entries now and then
            self._heap = [(d, k) for d, k in heap if scheduled.get(k) == d]
            heapq.heapify(self._heap)
        if len(self._held_at) > 2 * len(tracker.with_gaps) + 64:
            self._held_at = {k: v for k, v in self._held_at.items() if k in tracker.with_gaps}
            self._renewed_at = {k: v for k, v in self._renewed_at.items()
                                if k in tracker.with_gaps}
        self.requests_sent += len(out)
        return out

    def _holds(self, key: tuple[str, int], gaps: GapList, fill: float,
               now: float) -> tuple[list[tuple[int, int]], float]:
        """What this receiver's own queue dropped and the sender has not yet been asked to
        hold, while there is no room to ask for it (below ``refill_below`` it is asked for
        at once anyway), and what was sent before it joined, from the first look (it is
        asked for a piece at a time, as room comes); every HOLD_RENEW_S all of it that is
        still owed, room or not (the sender's pin lasts ``history_age_s`` from the last
        hold); and when to look again."""
        if self.capacity_msgs is None:
            return [], math.inf
        own = [g for g in gaps if g.kind in HELD_KINDS]
        if not own:
            self._renewed_at.pop(key, None)
            return [], math.inf
        renew = self._renewed_at.setdefault(key, now) + HOLD_RENEW_S
        if now >= renew:  # still owed: hold all of it for longer
            self._renewed_at[key] = now
            renew = now + HOLD_RENEW_S
            for g in own:
                g.held_to = 0
        elif fill < self.config.refill_below:
            own = [g for g in own if g.kind == JOINED]
            if not own:
                return [], renew
        todo = [g for g in own if g.held_to < g.hi]
        if not todo:
            return [], renew
        last = self._held_at.get(key, -math.inf)
        if now - last < HOLD_EVERY_S:
            return [], min(renew, last + HOLD_EVERY_S)
        self._held_at[key] = now
        out: list[tuple[int, int]] = []
        for g in todo:
            lo = max(g.lo, g.held_to)
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], g.hi)
            else:
                out.append((lo, g.hi))
            self.msgs_held += g.hi - lo
            g.held_to = g.hi
        return out, renew

    def _due_ranges(self, key: tuple[str, int], gaps: GapList, fill: float,
                    now: float) -> tuple[list[tuple[int, int, bool]], float]:
        """The ranges of ``key`` to ask for at ``now`` (and whether only this receiver
        misses them: its own drops, or what came before it joined), and when to look at
        it next.

        Gaps in flight are asked for at once. What this receiver's own queue dropped, and
        what was sent before it joined, is asked for only once the fill is below
        ``refill_below``, and no more of it per ``retry_s`` than the queue has room for:
        the repairs are clocked by the consumer, so catching up never overflows the queue
        again (a large gap is asked for a piece at a time)."""
        cfg = self.config
        room = fill < cfg.refill_below
        free = (1 << 62 if self.capacity_msgs is None
                else int((1.0 - fill) * self.capacity_msgs))
        st = self.tracker.streams.get(key)
        # once its END is in, a stream sends nothing new: ask for what fits now, before
        # the sender's linger for repairs runs out
        ended = st is not None and st.final_seq is not None
        # No room (below refill_below, or after END none at all): one message per retry_s
        # all the same, not counted as a try. Senders answer after END only while requests
        # come (their linger), and cannot know that a receiver is behind a socket backlog
        # (back from a stop, it reads seconds of data before it reaches END): without it
        # the fanout stop's 12,000-54,000 drops were never repaired, and the Spark eval
        # once ended 32 rows short. Its repair may wait behind the same backlog, so it is
        # no try (counted, the one message ran out of tries and was given up).
        starved = not (room or ended) or free <= 0
        keepalive = starved and now - self._kept_alive_at >= self.retry_s
        if gaps.progress or math.isnan(gaps.heard_at):
            gaps.heard_at = now
        if gaps.progress:  # the sender is answering or still sends (repairs wait for
            gaps.progress = False  # its rate limit): tries count only while nothing comes
            for g in gaps:
                g.tries = min(g.tries, 1)
        silent = now - gaps.heard_at >= SENDER_SILENT_S
        if silent and any(g.tries >= cfg.max_requests for g in gaps):
            # its sender is gone: what else the stream lacks will not come either. Asked
            # for a queue's room at a time, one gap after another, a queue of 1 gave up
            # 2,000 drops one message per max_requests tries: minutes, while a wait for
            # the stream's end waited (a live test found it after the sender's close)
            for g in list(gaps):
                gaps.give_up(g)
                self.given_up += g.hi - g.lo
            return [], math.inf
        ranges: list[tuple[int, int, bool]] = []
        next_due = math.inf
        for g in list(gaps):
            if g.due < 0:
                g.due = now + self._holdoff()
            if g.due > now:
                next_due = min(next_due, g.due)
                continue
            kept = False
            if g.kind != LOST:
                if keepalive:
                    keepalive, free, self._kept_alive_at, kept = False, 1, now, True
                    self.keepalives += 1
                elif starved or free <= 0:  # look again soon: room comes
                    next_due = min(next_due, now + self.retry_s / 4)
                    continue
                if g.hi - g.lo > free:  # ask for what fits; the rest when room is back
                    rest = gaps.split(g, g.lo + free)
                    rest.due = now + self.retry_s / 4
                    next_due = min(next_due, rest.due)
                free -= g.hi - g.lo
            g.tries += not kept
            g.due = now + self.retry_s
            next_due = min(next_due, g.due)
            ranges.append((g.lo, g.hi, g.kind in OWN_KINDS))
            self.msgs_requested += g.hi - g.lo
        return ranges, next_due

    def on_overheard(self, frame: Repair, *, now: float) -> None:
        """Another receiver asked: hold back our requests for what it asked for (unless it
        asked for itself alone: the repair will not reach us)."""
        if frame.to_me:
            return
        gaps = self.tracker.with_gaps.get((frame.sender, frame.epoch))
        if gaps is None:
            return
        later = now + self.retry_s
        for g in gaps:
            if any(lo < g.hi and g.lo < hi for lo, hi in frame.ranges) and g.due < later:
                g.due = later + self._holdoff()
                self.suppressed += 1
        self.tracker.dirty.add((frame.sender, frame.epoch))

    def next_deadline(self) -> float | None:
        if self.tracker.dirty:
            return 0.0  # new gaps: look at once (any time in the past)
        return self._heap[0][0] if self._heap else None

    def take_given_up(self) -> list[tuple[tuple[str, int], int, str]]:
        """(stream, messages, why) given up since the last call; ``why``: ``unanswered``
        (``max_requests`` while its sender was silent) or ``max_gaps`` (more than MAX_GAPS
        separate missing ranges in one stream: the oldest went)."""
        news, self._given_up_news = self._given_up_news, []
        return news

    def snapshot(self) -> dict[str, Any]:
        return {"requests_sent": self.requests_sent, "msgs_requested": self.msgs_requested,
                "requests_suppressed": self.suppressed, "given_up": self.given_up,
                "given_up_max_gaps": self.given_up_max_gaps,
                "keepalives": self.keepalives, "holds_sent": self.holds_sent,
                "msgs_held": self.msgs_held,
                "streams_missing": len(self.tracker.with_gaps)}


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
