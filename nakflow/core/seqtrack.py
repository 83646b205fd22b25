"""Per-sender sequence accounting (seed 003: monotonic IDs, gaps reported explicitly).

For each (sender id, epoch) the tracker keeps apart:

* ``missed_before_join`` — seqs below the first one this receiver saw (with repair and
  ``late_join`` they are asked for from the sender's history, and only what it no
  longer holds stays missed);
* ``lost`` — gaps in flight (and, once END says the final seq, the missing tail);
* ``duplicates`` — seqs seen before;
* ``dropped`` — seqs this receiver's full queue dropped (``on_dropped``).

With ``repair`` each stream also keeps its missing seqs (a GapList, for repair
requests): a repair (``on_repair``) moves seqs from ``lost``, ``dropped`` or
``missed_before_join`` to ``repaired`` (delivered), a GONE (``on_gone``) of lost or
dropped seqs to ``beyond_history``. So for every
(sender, epoch) that ended, ``final_seq - missed_before_join`` is exactly the messages
delivered (``repaired`` of them by repair) plus ``lost + dropped + beyond_history``
(and any still queued).

With ``drop_duplicates`` a seq already delivered for the same *sender id* (any
epoch) is not delivered again: a retried Spark task re-sends its partition
under a new epoch and is delivered once.

Memory is bounded whatever arrives (a flood of made-up sender ids included): at
most ``max_streams`` streams (the oldest ended one is forgotten first, then the
least recently heard), and seen-sets of at most ``max_streams`` sender ids with at
most MAX_INTERVALS gaps each and MAX_INTERVALS_TOTAL over all of them (the least
recently heard sender's set is forgotten first). What
is forgotten can only make a late duplicate count as new, and is counted in
``evicted``. A forgotten stream's counts of what happened (``received``, ``repaired``,
``duplicates``, ``beyond_history``, ``redundant``) stay in ``totals()``, which only ever
grow; what is missing now (``lost``, ``dropped``, ``missed_before_join``) is of the
streams kept.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .gaps import DROPPED, DROPPED_OWN, JOINED, LOST, GapList

Ranges = list[tuple[int, int]]
MAX_INTERVALS = 1024  # per sender id; beyond it the oldest are merged (bounded memory)
MAX_INTERVALS_TOTAL = 65_536  # over all sender ids; beyond it the stalest set is forgotten
MAX_STREAMS = 10_000
#: The totals that count what happened, and so only grow: a forgotten stream's stay.
HAPPENED = ("received", "repaired", "duplicates", "beyond_history", "redundant")
#: Late join asks for a stream's past only once this many of its frames that say how far
#: it went arrived (DATA, an idle sender's announcement), or its END after at least one
#: of them: a flood of made-up senders sends one frame each and costs no repair requests.
#: Announcements count: a sender that did not wait for its receivers loses its first
#: frames to ZeroMQ's slow joiner (a PUB drops until the subscription is in), and one then
#: idle sends no more DATA; its receiver heard it only so and kept those seqs as missed
#: before it joined, though the sender's history held them.
LATE_JOIN_FRAMES = 3


@dataclass
class StreamState:
    """Accounting for one (sender, epoch)."""

    first_seq: int
    next_seq: int
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    final_seq: int | None = None
    dropped: int = 0
    repaired: int = 0
    beyond_history: int = 0
    redundant: int = 0  # repaired seqs this receiver did not miss
    gaps: GapList | None = None
    #: seqs sent before this receiver first heard the stream, not (yet) repaired
    missed_before_join: int = 0
    frames: int = 0  # DATA frames heard
    signs: int = 0  # an idle sender's announcements heard (they say how far it went)

    def __post_init__(self) -> None:
        self.missed_before_join = self.first_seq

    @property
    def missing(self) -> int:
        """Seqs up to the last known one not delivered here, for any reason."""
        return self.lost + self.dropped + self.beyond_history + self.missed_before_join

    @property
    def complete(self) -> bool:
        """END arrived and every seq below it was delivered (none lost, dropped, beyond
        the history or missed before this receiver joined)."""
        return self.final_seq is not None and self.missing == 0

    def missing_by_reason(self) -> dict[str, int]:
        return {k: v for k, v in (("lost", self.lost), ("dropped", self.dropped),
                                  ("beyond_history", self.beyond_history),
                                  ("missed_before_join", self.missed_before_join)) if v}


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

    def __init__(self, *, drop_duplicates: bool = False, max_streams: int = MAX_STREAMS,
                 repair: bool = False, late_join: bool = True) -> None:
        self.drop_duplicates = drop_duplicates
        self.repair = repair
        self.late_join = repair and late_join
        self.with_gaps: dict[tuple[str, int], GapList] = {}  # streams missing something
        self.dirty: set[tuple[str, int]] = set()  # streams whose gaps grew since last looked
        self.max_streams = max_streams
        self.streams: dict[tuple[str, int], StreamState] = {}
        self._ended: dict[tuple[str, int], None] = {}  # ended streams, oldest END first
        self._seen: dict[str, _IntervalSet] = {}  # least recently heard first
        self._intervals = 0  # over all of _seen
        self.arrived = 0  # messages in DATA frames, ever (repairs not included)
        self.gap_msgs = 0  # messages found missing in flight (a gap in a stream), ever
        self.frames = 0  # DATA frames accounted, ever
        self.gap_events = 0  # gaps found in flight, ever (one may span many frames)
        self.evicted = 0
        self.seen_evicted = 0
        #: what the forgotten streams counted, of the totals that only grow (HAPPENED)
        self.forgotten = dict.fromkeys(HAPPENED, 0)

    def on_data(self, sender: str, epoch: int, seq: int, count: int) -> Ranges:
        """Account a DATA frame; return the index ranges of its payloads to deliver."""
        key = (sender, epoch)
        streams = self.streams
        st = streams.pop(key, None)  # re-inserted last: streams run least recently heard first
        if st is None:
            st = self._new_stream(key, seq)
        streams[key] = st
        end = seq + count
        st.received += count
        self.arrived += count
        self.frames += 1
        st.frames += 1
        if st.frames + st.signs == LATE_JOIN_FRAMES:
            self._join(key, st)
        gaps = st.gaps
        if gaps:  # its sender is alive and sending: repairs may wait for its rate limit
            gaps.progress = True
        if seq > st.next_seq:
            st.lost += seq - st.next_seq
            self.gap_msgs += seq - st.next_seq
            self.gap_events += 1
            if self.repair:
                self._gaps(key, st).add(st.next_seq, seq, LOST, -1.0)
        overlap = max(0, min(end, st.next_seq) - seq)
        if end > st.next_seq:
            st.next_seq = end
        if not self.drop_duplicates:
            st.duplicates += overlap
            return [(0, count)]
        fresh = self._fresh(sender, seq, end)
        st.duplicates += count - sum(hi - lo for lo, hi in fresh)
        return [(lo - seq, hi - seq) for lo, hi in fresh]

    def _fresh(self, sender: str, seq: int, end: int) -> Ranges:
        """The parts of [seq, end) this sender id has not sent before (any epoch)."""
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
        return fresh

    def _new_stream(self, key: tuple[str, int], first_seq: int) -> StreamState:
        self._make_room()
        st = self.streams[key] = StreamState(first_seq=first_seq, next_seq=first_seq)
        return st

    def _join(self, key: tuple[str, int], st: StreamState) -> None:
        """With late join, what came before the stream was first heard becomes a gap to
        ask the sender's history for."""
        if self.late_join and st.first_seq > 0 and st.missed_before_join == st.first_seq:
            self._gaps(key, st).add(0, st.first_seq, JOINED, -1.0)

    def _gaps(self, key: tuple[str, int], st: StreamState) -> GapList:
        if st.gaps is None:
            st.gaps = GapList()
        self.with_gaps[key] = st.gaps
        self.dirty.add(key)
        return st.gaps

    def on_repair(self, sender: str, epoch: int, seq: int, count: int) -> Ranges:
        """Account a repair (RDATA); return the index ranges of its payloads to deliver:
        the seqs this receiver misses (``repaired``) and any past all it has seen."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None or st.gaps is None:
            if st is not None:
                st.redundant += count
            return []
        end = seq + count
        out: Ranges = []
        for lo, hi, kind in st.gaps.take(seq, min(end, st.next_seq)):
            n = hi - lo
            if kind in (LOST, JOINED):  # lost in flight, or sent before we joined
                if kind == LOST:
                    st.lost -= n
                else:
                    st.missed_before_join -= n
                parts = self._fresh(sender, lo, hi) if self.drop_duplicates else [(lo, hi)]
                st.duplicates += n - sum(b - a for a, b in parts)
            else:  # dropped here after it was accounted as fresh: deliver it now
                st.dropped -= n
                parts = [(lo, hi)]
            st.repaired += sum(b - a for a, b in parts)
            out += [(a - seq, b - seq) for a, b in parts]
        if not st.gaps:
            self.with_gaps.pop(key, None)
        used = sum(b - a for a, b in out)
        if end > st.next_seq:  # newer than anything seen: new data, as DATA would bring
            first = max(seq, st.next_seq)
            out += [(lo + first - seq, hi + first - seq)
                    for lo, hi in self.on_data(sender, epoch, first, end - first)]
            st.received -= end - first  # counted by on_data, but came by repair
            used += end - first
        st.redundant += count - used
        return out

    def on_hello(self, sender: str, epoch: int, next_seq: int) -> None:
        """A sender's HELLO before any of its DATA: with repair, its stream starts here,
        so a first message lost in flight is a gap to repair, not a late join."""
        key = (sender, epoch)
        if self.repair and key not in self.streams:
            self._new_stream(key, next_seq)

    def on_dropped(self, sender: str, epoch: int, seq: int, own: bool = False) -> None:
        """The queue dropped seq ``seq``, accounted as fresh by ``on_data`` before;
        ``own``: while this receiver alone was held up (others are unlikely to miss it)."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None:
            return  # evicted meanwhile
        st.dropped += 1
        if self.repair:
            self._gaps(key, st).add(seq, seq + 1, DROPPED_OWN if own else DROPPED, -1.0)

    def on_gone(self, sender: str, epoch: int, lo: int, hi: int) -> int:
        """The sender can no longer repair [lo, hi): what of it was lost or dropped here is
        ``beyond_history`` (what was sent before we joined stays ``missed_before_join``);
        returns how many became beyond history."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None or st.gaps is None:
            return 0
        n_all = 0
        for g_lo, g_hi, kind in st.gaps.take(lo, hi):
            n = g_hi - g_lo
            if kind == JOINED:
                continue  # it stays missed before join: never ours to lose
            if kind == LOST:
                st.lost -= n
            else:
                st.dropped -= n
            st.beyond_history += n
            n_all += n
        if not st.gaps:
            self.with_gaps.pop(key, None)
        return n_all

    def on_end(self, sender: str, epoch: int, final_seq: int) -> StreamState:
        """END: every seq below ``final_seq`` was sent; the missing tail is lost."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None:  # nothing of it ever arrived: all of it was before we joined
            st = self._new_stream(key, final_seq)
        if st.final_seq is None:
            if 0 < st.frames + st.signs < LATE_JOIN_FRAMES:  # heard, not joined yet: ask
                self._join(key, st)
            self._lose_tail(key, st, final_seq)
            st.final_seq = final_seq
            self._ended[key] = None
        elif st.gaps:  # END repeated: its sender lingers, answering requests
            st.gaps.progress = True
        return st

    def on_announce(self, sender: str, epoch: int, next_seq: int) -> None:
        """The sender says every seq below ``next_seq`` was sent (idle, ``Hello.announce``):
        a tail not heard here is lost (with repair: asked for). A stream never heard
        starts as at a HELLO."""
        key = (sender, epoch)
        st = self.streams.get(key)
        if st is None:
            self.on_hello(sender, epoch, next_seq)
            st = self.streams.get(key)
            if st is None:  # without repair: nothing to ask for
                return
        elif st.final_seq is None:
            self._lose_tail(key, st, next_seq)
        st.signs += 1
        if st.frames + st.signs == LATE_JOIN_FRAMES:  # an idle sender heard only so: ask
            self._join(key, st)

    def _lose_tail(self, key: tuple[str, int], st: StreamState, upto: int) -> None:
        if upto > st.next_seq:
            st.lost += upto - st.next_seq
            if self.repair:
                self._gaps(key, st).add(st.next_seq, upto, LOST, -1.0)
            st.next_seq = upto

    def _make_room(self) -> None:
        """Forget streams until there is room for one more: the oldest ended first."""
        while len(self.streams) >= self.max_streams:
            victim = next(iter(self._ended), None)
            if victim is None:
                victim = next(iter(self.streams))
            else:
                del self._ended[victim]
            gone = self.streams.pop(victim)
            for name in HAPPENED:
                self.forgotten[name] += getattr(gone, name)
            self._ended.pop(victim, None)
            self.with_gaps.pop(victim, None)
            self.dirty.discard(victim)
            self.evicted += 1

    def epochs_of(self, sender: str) -> list[int]:
        return sorted(e for s, e in self.streams if s == sender)

    def totals(self) -> dict[str, int]:
        """What happened to every stream since the start (HAPPENED: the forgotten ones
        too, so these only grow), and what is missing now in the streams kept."""
        out = dict.fromkeys(("lost", "missed_before_join", "dropped"), 0)
        out.update(self.forgotten)
        for st in self.streams.values():
            out["lost"] += st.lost
            out["missed_before_join"] += st.missed_before_join
            out["duplicates"] += st.duplicates
            out["received"] += st.received
            out["dropped"] += st.dropped
            out["repaired"] += st.repaired
            out["beyond_history"] += st.beyond_history
            out["redundant"] += st.redundant
        return out

    def per_sender(self) -> list[dict[str, Any]]:
        rows = []
        epochs = Counter(s for s, _ in self.streams)
        for (sender, epoch), st in sorted(self.streams.items()):
            resent = epochs[sender] > 1
            status = "complete" if st.complete else "incomplete"
            rows.append({"sender": sender, "epoch": epoch, "status": status, "re_sent": resent,
                         "missing": st.missing, "missing_by_reason": st.missing_by_reason(),
                         "received": st.received, "lost": st.lost,
                         "missed_before_join": st.missed_before_join,
                         "duplicates": st.duplicates, "final_seq": st.final_seq,
                         "next_seq": st.next_seq,
                         "dropped": st.dropped, "repaired": st.repaired,
                         "beyond_history": st.beyond_history})
        return rows


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
