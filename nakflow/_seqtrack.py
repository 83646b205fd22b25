"""Per-sender sequence accounting (seed 003: monotonic IDs, gaps reported explicitly).

For each (sender id, epoch) the tracker keeps apart:

* ``missed_before_join`` — seqs below the first one this receiver saw;
* ``lost`` — gaps in flight (and, once END says the final seq, the missing tail);
* ``duplicates`` — seqs seen before.

With ``drop_duplicates`` a seq already delivered for the same *sender id* (any
epoch) is not delivered again: a retried Spark task re-sends its partition
under a new epoch and is delivered once.

Memory is bounded whatever arrives (a flood of made-up sender ids included): at
most ``max_streams`` streams (the oldest ended one is forgotten first, then the
least recently heard), and seen-sets of at most ``max_streams`` sender ids with at
most MAX_INTERVALS gaps each and MAX_INTERVALS_TOTAL over all of them (the least
recently heard sender's set is forgotten first). What
is forgotten can only make a late duplicate count as new, and is counted in
``evicted``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Any

Ranges = list[tuple[int, int]]
MAX_INTERVALS = 1024  # per sender id; beyond it the oldest are merged (bounded memory)
MAX_INTERVALS_TOTAL = 65_536  # over all sender ids; beyond it the stalest set is forgotten
MAX_STREAMS = 10_000


@dataclass
class StreamState:
    """Accounting for one (sender, epoch)."""

    first_seq: int
    next_seq: int
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    final_seq: int | None = None

    @property
    def missed_before_join(self) -> int:
        return self.first_seq

    @property
    def complete(self) -> bool:
        return self.final_seq is not None and self.lost == 0 and self.first_seq == 0


class _IntervalSet:
    """Sorted, merged, half-open intervals of seqs seen."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def subtract_and_add(self, lo: int, hi: int) -> Ranges:
        """Return the parts of [lo, hi) not yet in the set, and add [lo, hi)."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(ends, lo)
        new: Ranges = []
        cur = lo
        j = i
        while j < len(starts) and starts[j] < hi:
            if starts[j] > cur:
                new.append((cur, starts[j]))
            cur = max(cur, ends[j])
            j += 1
        if cur < hi:
            new.append((cur, hi))
        # merge [lo, hi) with intervals i..j-1 (and neighbours touching it)
        m_lo = min(lo, starts[i]) if i < j else lo
        m_hi = max(hi, ends[j - 1]) if i < j else hi
        if i > 0 and ends[i - 1] == m_lo:
            i -= 1
            m_lo = starts[i]
        if j < len(starts) and starts[j] == m_hi:
            m_hi = ends[j]
            j += 1
        starts[i:j] = [m_lo]
        ends[i:j] = [m_hi]
        if len(starts) > MAX_INTERVALS:  # forget the oldest gap: treat it as seen
            starts[0:2] = [starts[0]]
            ends[0:2] = [ends[1]]
        return new


class SequenceTracker:
    """Turns (sender, epoch, seq, count) arrivals into ranges to deliver and counters."""

    def __init__(self, *, drop_duplicates: bool = False, max_streams: int = MAX_STREAMS) -> None:
        self.drop_duplicates = drop_duplicates
        self.max_streams = max_streams
        self.streams: dict[tuple[str, int], StreamState] = {}
        self._ended: dict[tuple[str, int], None] = {}  # ended streams, oldest END first
        self._seen: dict[str, _IntervalSet] = {}  # least recently heard first
        self._intervals = 0  # over all of _seen
        self.evicted = 0
        self.seen_evicted = 0

    def on_data(self, sender: str, epoch: int, seq: int, count: int) -> Ranges:
        """Account a DATA frame; return the index ranges of its payloads to deliver."""
        key = (sender, epoch)
        streams = self.streams
        st = streams.pop(key, None)  # re-inserted last: streams run least recently heard first
        if st is None:
            self._make_room()
            st = StreamState(first_seq=seq, next_seq=seq)
        streams[key] = st
        end = seq + count
        st.received += count
        if seq > st.next_seq:
            st.lost += seq - st.next_seq
        overlap = max(0, min(end, st.next_seq) - seq)
        if end > st.next_seq:
            st.next_seq = end
        if not self.drop_duplicates:
            st.duplicates += overlap
            return [(0, count)]
        seen = self._seen.pop(sender, None)
        if seen is None:
            seen = _IntervalSet()
        self._seen[sender] = seen  # (re)inserted last: the most recently heard
        before = len(seen.starts)
        fresh = seen.subtract_and_add(seq, end)
        self._intervals += len(seen.starts) - before
        while ((self._intervals > MAX_INTERVALS_TOTAL or len(self._seen) > self.max_streams)
               and len(self._seen) > 1):
            oldest = next(iter(self._seen))
            self._intervals -= len(self._seen.pop(oldest).starts)
            self.seen_evicted += 1
        st.duplicates += count - sum(hi - lo for lo, hi in fresh)
        return [(lo - seq, hi - seq) for lo, hi in fresh]

    def on_end(self, sender: str, epoch: int, final_seq: int) -> StreamState:
        """END: every seq below ``final_seq`` was sent; the missing tail is lost."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None:
            self._make_room()
            # nothing of it ever arrived: all of it was before we joined or lost
            st = self.streams[key] = StreamState(first_seq=final_seq, next_seq=final_seq)
        if st.final_seq is None:
            if final_seq > st.next_seq:
                st.lost += final_seq - st.next_seq
                st.next_seq = final_seq
            st.final_seq = final_seq
            self._ended[key] = None
        return st

    def _make_room(self) -> None:
        """Forget streams until there is room for one more: the oldest ended first."""
        while len(self.streams) >= self.max_streams:
            victim = next(iter(self._ended), None)
            if victim is None:
                victim = next(iter(self.streams))
            else:
                del self._ended[victim]
            del self.streams[victim]
            self._ended.pop(victim, None)
            self.evicted += 1

    def epochs_of(self, sender: str) -> list[int]:
        return sorted(e for s, e in self.streams if s == sender)

    def totals(self) -> dict[str, int]:
        out = {"lost": 0, "missed_before_join": 0, "duplicates": 0, "received": 0}
        for st in self.streams.values():
            out["lost"] += st.lost
            out["missed_before_join"] += st.missed_before_join
            out["duplicates"] += st.duplicates
            out["received"] += st.received
        return out

    def per_sender(self) -> list[dict[str, Any]]:
        rows = []
        epochs = Counter(s for s, _ in self.streams)
        for (sender, epoch), st in sorted(self.streams.items()):
            resent = epochs[sender] > 1
            status = "complete" if st.complete else "incomplete"
            rows.append({"sender": sender, "epoch": epoch, "status": status, "re_sent": resent,
                         "received": st.received, "lost": st.lost,
                         "missed_before_join": st.missed_before_join,
                         "duplicates": st.duplicates, "final_seq": st.final_seq})
        return rows
