"""The sender's history: recent DATA, bounded by messages, bytes and age, for repair.

Receivers ask for the seq ranges they miss (REPAIR); the sender re-sends what its
history still holds (RDATA) and says GONE for what it no longer holds, as PGM's
transmit window and NORM's SQUELCH do (seed 003: bounded history, gaps reported).
Entries are whole DATA frames (one or many payloads); a repair re-sends only the
requested slice of a frame. No clock: ``now`` comes in.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, NamedTuple

from ._config import RepairConfig

Range = tuple[int, int]


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

    @property
    def oldest_seq(self) -> int:
        """The oldest seq still held (``next_seq`` when empty)."""
        if self._head < len(self._entries):
            return self._starts[self._head]
        return self.next_seq

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
        if (self.msgs > cfg.history_msgs or self.nbytes > cfg.history_bytes
                or entries[self._head].added < now - cfg.history_age_s):
            self.trim(now)

    def trim(self, now: float) -> None:
        """Forget what is past any bound (age measured at ``now``)."""
        cfg = self.config
        entries, head = self._entries, self._head
        oldest_kept = now - cfg.history_age_s
        while head < len(entries):
            e = entries[head]
            if (self.msgs <= cfg.history_msgs and self.nbytes <= cfg.history_bytes
                    and e.added >= oldest_kept):
                break
            self.msgs -= len(e.payloads)
            self.nbytes -= e.nbytes
            self.forgotten_msgs += len(e.payloads)
            head += 1
        if head > 1024 and head * 2 > len(entries):
            del entries[:head]
            del self._starts[:head]
            head = 0
            oldest = self.oldest_seq if entries else self.next_seq
            self._resent = {k: v for k, v in self._resent.items() if k[1] >= oldest}
        self._head = head

    def lookup(self, ranges: Sequence[Range], *, now: float,
               who: str = "") -> tuple[list[Slice], list[Range]]:
        """What to re-send for requested ``ranges``, and the parts no longer held (GONE).

        A slice still waiting to be re-sent, or re-sent within ``resend_window_s``, is not
        queued again (the request crossed the repair, or was repeated while repairs wait
        for the rate limit); seqs never sent are ignored. Call ``mark_sent`` when a slice
        went out. ``who``: the receiver a repair is for alone ("": everyone): its
        requests count apart from the others'.
        """
        self.trim(now)
        window = self.config.resend_window_s
        oldest, nxt = self.oldest_seq, self.next_seq
        out: list[Slice] = []
        gone: list[Range] = []
        for lo, hi in ranges:
            if hi > nxt:
                self.ignored_msgs += hi - max(lo, nxt)
                hi = nxt
            if lo >= hi:
                continue
            if lo < oldest:
                g_hi = min(hi, oldest)
                gone.append((lo, g_hi))
                self.gone_msgs += g_hi - lo
                lo = g_hi
            i = max(self._head, bisect.bisect_right(self._starts, lo) - 1)
            entries = self._entries
            while lo < hi and i < len(entries):
                e = entries[i]
                e_end = e.seq + len(e.payloads)
                if e.seq >= hi:
                    break
                s_lo, s_hi = max(lo, e.seq), min(hi, e_end)
                if s_lo < s_hi:
                    last = self._resent.get((who, e.seq))
                    if last is not None and now - last[0] < window and last[1] <= s_lo \
                            and s_hi <= last[2]:
                        self.resend_suppressed += s_hi - s_lo
                    else:
                        self._resent[(who, e.seq)] = [PENDING, s_lo, s_hi]
                        out.append(Slice(s_lo, e.ts, e.payloads[s_lo - e.seq:s_hi - e.seq]))
                        self.resent_msgs += s_hi - s_lo
                lo = max(lo, e_end)
                i += 1
        return out, gone

    def mark_sent(self, seq: int, *, now: float, who: str = "") -> None:
        """The slice starting at ``seq`` was re-sent at ``now`` (for ``who``): its window
        starts."""
        i = bisect.bisect_right(self._starts, seq) - 1
        if i >= self._head:
            last = self._resent.get((who, self._entries[i].seq))
            if last is not None and last[0] == PENDING:
                last[0] = now

    def snapshot(self) -> dict[str, Any]:
        return {"msgs": self.msgs, "bytes": self.nbytes, "oldest_seq": self.oldest_seq,
                "forgotten": self.forgotten_msgs, "resent": self.resent_msgs,
                "resend_suppressed": self.resend_suppressed, "gone": self.gone_msgs,
                "ignored": self.ignored_msgs}


from ._speedups import use_compiled  # noqa: E402

use_compiled(globals())
