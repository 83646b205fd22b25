"""The sender's history: recent DATA, bounded by messages, bytes and age, for repair.

Receivers ask for the seq ranges they miss (REPAIR); the sender re-sends what its
history still holds (RDATA) and says GONE for what it no longer holds, as PGM's
transmit window and NORM's SQUELCH do (seed 003: bounded history, gaps reported).
Entries are whole DATA frames (one or many payloads); a repair re-sends only the
requested slice of a frame. No clock: ``now`` comes in.

A receiver whose own queue dropped messages asks at once to have them held (``hold``), as
does a late joiner for what came before it: the frames holding them are pinned for that
receiver for ``history_age_s`` (PIN_MIN_S at least) from its last hold and survive the
bounds meanwhile (``kept``), so what the history still held then stays repairable however
fast the history moves on, until the receiver has room to take it. A receiver renews its
holds every HOLD_RENEW_S while it is owed them (``RepairRequester``),
so one that consumes more slowly than the history's age is not cut off; one that dies
stops renewing and its pins end.
Pins share the byte bound: what is kept shortens the history of everything else, one
receiver may pin at most PIN_SHARE of it, and when what is kept fills the bound
(``over``) the sender slows (``SenderCore``) rather than forget what is owed.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..config import RepairConfig

Range = tuple[int, int]
#: One receiver may keep at most this share of ``history_bytes`` pinned at a time (its
#: holds past it are not kept): a receiver whose consumer stopped for good cannot take
#: the history from the others' repairs, nor make the sender slow on its own.
PIN_SHARE = 0.25
#: A receiver renews its holds this often while it is owed them, s (``RepairRequester``).
HOLD_RENEW_S = 1.0
#: A pin lasts ``history_age_s`` from its hold, but no less than this, s: three renewals,
#: so a pin outlives the renewal period and a lost renewal or two. With a history of 1 s
#: (``--history-age 1``) pins lapsed between renewals: a late joiner away for 2.5 s got
#: 5,621 of its own drops back as GONE (beyond_history), though it held them all along.
PIN_MIN_S = 3 * HOLD_RENEW_S


class Slice(NamedTuple):
    """Payloads to re-send: ``payloads[i]`` is seq ``seq + i``, first sent at ``ts``."""

    seq: int
    ts: float
    payloads: Sequence[bytes]


PENDING = float("inf")  # an entry's last_t while a slice of it waits to be re-sent


class _Entry(NamedTuple):
    seq: int
    ts: float
    payloads: Sequence[bytes]
    nbytes: int
    added: float


class SendHistory:
    """Recent frames by seq. ``add`` in seq order; ``lookup`` answers a REPAIR."""

    def __init__(self, config: RepairConfig | None = None) -> None:
        self.config = config or RepairConfig()
        self._entries: list[_Entry] = []
        #: entry seq -> [when a slice of it was last re-sent (PENDING: queued), lo, hi];
        #: only frames that were repaired have one (add stays cheap)
        #: (for whom: "" for everyone, entry seq) -> [when a slice of it was last re-sent
        #: (PENDING: queued), lo, hi]; only frames that were repaired have one
        self._resent: dict[tuple[str, int], list[float]] = {}
        self._starts: list[int] = []  # seq of each entry, for bisect
        self._head = 0  # entries before it are forgotten (compacted now and then)
        self.msgs = 0
        self.nbytes = 0
        self.next_seq = 0  # one past the newest seq added
        self.forgotten_msgs = 0
        self.resent_msgs = 0
        self.resend_suppressed = 0
        self.gone_msgs = 0
        self.ignored_msgs = 0  # asked for seqs never sent (confused or forged requests)
        # pins: entry seq -> {receiver: until}; entries past the bounds that a pin keeps
        self._pins: dict[int, dict[str, float]] = {}
        self._kept: dict[int, _Entry] = {}
        self._kept_starts: list[int] = []  # sorted seqs of _kept
        self._kept_until: list[tuple[float, int]] = []  # heap: (a pin's end, entry seq)
        # per receiver: entry seq -> (until, bytes) of what it pins (renewed pins counted once)
        self._pin_log: dict[str, dict[int, tuple[float, int]]] = {}
        self.kept_bytes = 0
        self.held_msgs = 0  # messages receivers asked to have held
        self.hold_refused_msgs = 0  # ... that were past their PIN_SHARE (not held)
        self.kept_served_msgs = 0  # re-sent from frames only a pin still held

    @property
    def oldest_seq(self) -> int:
        """The oldest seq still held (``next_seq`` when empty)."""
        if self._head < len(self._entries):
            return self._starts[self._head]
        return self.next_seq

    def over(self, now: float) -> bool:
        """What pins keep fills the byte bound: new data would find no room, and what
        receivers are owed would be forgotten; the sender slows until pins end."""
        self._expire(now)
        return self.kept_bytes >= self.config.history_bytes

    def add(self, seq: int, ts: float, payloads: Sequence[bytes], nbytes: int, *,
            now: float) -> None:
        """Remember a DATA frame sent at ``now`` (``nbytes``: its payload bytes)."""
        entries = self._entries
        if self._head == len(entries):  # empty: a gap in seqs starts afresh
            entries.clear()
            self._starts.clear()
            self._resent.clear()
            self._head = 0
        entries.append(_Entry(seq, ts, payloads, nbytes, now))
        self._starts.append(seq)
        n = len(payloads)
        self.msgs += n
        self.nbytes += nbytes
        self.next_seq = seq + n
        cfg = self.config
        if (self.msgs > cfg.history_msgs or self.nbytes + self.kept_bytes > cfg.history_bytes
                or entries[self._head].added < now - cfg.history_age_s):
            self.trim(now)

    def trim(self, now: float) -> None:
        """Forget what is past any bound (age measured at ``now``); a pinned frame is kept
        (``kept``) until its pins end."""
        cfg = self.config
        if self._kept_until:
            self._expire(now)
        entries, head = self._entries, self._head
        oldest_kept = now - cfg.history_age_s
        pins = self._pins
        while head < len(entries):
            e = entries[head]
            if (self.msgs <= cfg.history_msgs
                    and self.nbytes + self.kept_bytes <= cfg.history_bytes
                    and e.added >= oldest_kept):
                break
            self.msgs -= len(e.payloads)
            self.nbytes -= e.nbytes
            self.forgotten_msgs += len(e.payloads)
            head += 1
            if pins and e.seq in pins:
                until = max(pins[e.seq].values(), default=0.0)
                if until > now:
                    self._keep(e, until)
                else:
                    del pins[e.seq]
        if head > 1024 and head * 2 > len(entries):
            del entries[:head]
            del self._starts[:head]
            head = 0
            oldest = self.oldest_seq if entries else self.next_seq
            self._resent = {k: v for k, v in self._resent.items()
                            if k[1] >= oldest or k[1] in self._kept}
        self._head = head

    # -- pins ---------------------------------------------------------------------------
    def _keep(self, e: _Entry, until: float) -> None:
        self._kept[e.seq] = e
        bisect.insort(self._kept_starts, e.seq)
        heapq.heappush(self._kept_until, (until, e.seq))
        self.kept_bytes += e.nbytes

    def _expire(self, now: float) -> None:
        """Forget kept frames whose pins all ended by ``now``."""
        heap, pins = self._kept_until, self._pins
        while heap and heap[0][0] <= now:
            _until, seq = heapq.heappop(heap)
            e = self._kept.get(seq)
            if e is None:
                continue
            until = max(pins.get(seq, {}).values(), default=0.0)
            if until > now:  # held again meanwhile
                heapq.heappush(heap, (until, seq))
                continue
            del self._kept[seq]
            pins.pop(seq, None)
            del self._kept_starts[bisect.bisect_left(self._kept_starts, seq)]
            self.kept_bytes -= e.nbytes

    def _pinned_bytes(self, who: str, now: float) -> int:
        log = self._pin_log.get(who)
        if log is None:
            return 0
        for seq in [seq for seq, (until, _n) in log.items() if until <= now]:
            del log[seq]
        if not log:
            del self._pin_log[who]
            return 0
        return sum(n for _u, n in log.values())

    def hold(self, ranges: Sequence[Range], *, now: float, who: str) -> list[Range]:
        """Keep what ``ranges`` hold for receiver ``who`` until ``now + history_age_s``
        (PIN_MIN_S at least: its queue dropped them, or they came before it joined; it
        asks for them once it has room); returns the parts no longer held (GONE). Past
        the receiver's PIN_SHARE nothing more is pinned."""
        self.trim(now)
        cfg = self.config
        until = now + max(cfg.history_age_s, PIN_MIN_S)
        budget = PIN_SHARE * cfg.history_bytes - self._pinned_bytes(who, now)
        gone: list[Range] = []
        for lo, hi in ranges:
            hi = min(hi, self.next_seq)
            if lo >= hi:
                continue
            self.held_msgs += hi - lo
            log = self._pin_log.setdefault(who, {})
            for e, s_lo, s_hi in self._covering(lo, hi, gone):
                mine = self._pins.setdefault(e.seq, {})
                if mine.get(who, 0.0) > now:  # pinned already (a renewal): for longer now
                    mine[who] = until
                    log[e.seq] = (until, e.nbytes)
                elif budget >= e.nbytes:
                    mine[who] = until
                    budget -= e.nbytes
                    log[e.seq] = (until, e.nbytes)
                else:
                    if not mine:
                        del self._pins[e.seq]
                    self.hold_refused_msgs += s_hi - s_lo
                    continue
                if e.seq in self._kept:
                    heapq.heappush(self._kept_until, (mine[who], e.seq))
            if not log:
                del self._pin_log[who]
        for g_lo, g_hi in gone:
            self.gone_msgs += g_hi - g_lo
        return gone

    def release(self, who: str) -> None:
        """``who`` left (BYE): its pins end now (a kept frame nobody else pins goes)."""
        for seq, mine in list(self._pins.items()):
            if mine.pop(who, None) is None or mine:
                continue
            del self._pins[seq]
            e = self._kept.pop(seq, None)
            if e is not None:  # its heap entry finds it gone (``_expire``)
                del self._kept_starts[bisect.bisect_left(self._kept_starts, seq)]
                self.kept_bytes -= e.nbytes
        self._pin_log.pop(who, None)

    def _covering(self, lo: int, hi: int, gone: list[Range],
                  ) -> list[tuple[_Entry, int, int]]:
        """The frames holding seqs [lo, hi) (kept, then in the history) with the slice of
        each that lies in it; what none holds is appended to ``gone``."""
        out: list[tuple[_Entry, int, int]] = []
        oldest = self.oldest_seq
        if lo < oldest:  # below the history: only kept frames may hold it
            top = min(hi, oldest)
            starts, kept = self._kept_starts, self._kept
            i = max(0, bisect.bisect_right(starts, lo) - 1)
            at = lo
            while at < top and i < len(starts):
                e = kept[starts[i]]
                e_end = e.seq + len(e.payloads)
                if e.seq >= top:
                    break
                s_lo, s_hi = max(at, e.seq), min(top, e_end)
                if s_lo < s_hi:
                    if s_lo > at:
                        gone.append((at, s_lo))
                    out.append((e, s_lo, s_hi))
                    at = s_hi
                i += 1
            if at < top:
                gone.append((at, top))
            lo = top
        entries = self._entries
        i = max(self._head, bisect.bisect_right(self._starts, lo) - 1)
        while lo < hi and i < len(entries):
            e = entries[i]
            e_end = e.seq + len(e.payloads)
            if e.seq >= hi:
                break
            s_lo, s_hi = max(lo, e.seq), min(hi, e_end)
            if s_lo < s_hi:
                out.append((e, s_lo, s_hi))
            lo = max(lo, e_end)
            i += 1
        return out

    def lookup(self, ranges: Sequence[Range], *, now: float, who: str = "",
               limit: int = 1 << 62) -> tuple[list[Slice], list[Range]]:
        """What to re-send for requested ``ranges``, no more than ``limit`` messages, and
        the parts no longer held (GONE).

        A slice still waiting to be re-sent, or re-sent within ``resend_window_s``, is not
        queued again (the request crossed the repair, or was repeated while repairs wait
        for the rate limit); seqs never sent are ignored. Call ``mark_sent`` when a slice
        went out. ``who``: the receiver a repair is for alone ("": everyone): its
        requests count apart from the others'. What ``limit`` leaves out is not marked
        (it is asked for again, and must not be taken for a repair on its way).
        """
        self.trim(now)
        window = self.config.resend_window_s
        nxt = self.next_seq
        out: list[Slice] = []
        gone: list[Range] = []
        for lo, hi in ranges:
            if hi > nxt:
                self.ignored_msgs += hi - max(lo, nxt)
                hi = nxt
            if lo >= hi:
                continue
            for e, s_lo, s_hi in self._covering(lo, hi, gone):
                if s_hi - s_lo > limit:
                    limit = 0
                    continue
                last = self._resent.get((who, e.seq))
                if last is not None and now - last[0] < window and last[1] <= s_lo \
                        and s_hi <= last[2]:
                    self.resend_suppressed += s_hi - s_lo
                    continue
                self._resent[(who, e.seq)] = [PENDING, s_lo, s_hi]
                limit -= s_hi - s_lo
                out.append(Slice(s_lo, e.ts, e.payloads[s_lo - e.seq:s_hi - e.seq]))
                self.resent_msgs += s_hi - s_lo
                if e.seq in self._kept:
                    self.kept_served_msgs += s_hi - s_lo
        for g_lo, g_hi in gone:
            self.gone_msgs += g_hi - g_lo
        return out, gone

    def mark_sent(self, seq: int, *, now: float, who: str = "") -> None:
        """The slice starting at ``seq`` was re-sent at ``now`` (for ``who``): its window
        starts."""
        i = bisect.bisect_right(self._starts, seq) - 1
        if i >= self._head:
            entry_seq = self._entries[i].seq
        else:  # a kept frame's
            k = bisect.bisect_right(self._kept_starts, seq) - 1
            if k < 0:
                return
            entry_seq = self._kept_starts[k]
        last = self._resent.get((who, entry_seq))
        if last is not None and last[0] == PENDING:
            last[0] = now

    def snapshot(self) -> dict[str, Any]:
        return {"msgs": self.msgs, "bytes": self.nbytes, "oldest_seq": self.oldest_seq,
                "forgotten": self.forgotten_msgs, "resent": self.resent_msgs,
                "resend_suppressed": self.resend_suppressed, "gone": self.gone_msgs,
                "ignored": self.ignored_msgs, "held": self.held_msgs,
                "hold_refused": self.hold_refused_msgs, "kept_frames": len(self._kept),
                "kept_bytes": self.kept_bytes, "kept_served": self.kept_served_msgs}


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
