"""The missing seqs of one stream, each range with the state of its repair requests.

A range is ``LOST`` (a gap in flight: ZeroMQ PUB dropped at its high-water mark, or PGM
gave up), ``DROPPED`` (it arrived, but this receiver's full queue dropped it),
``DROPPED_OWN`` (the same, while this receiver was held up on its own: its consumer away,
its process stopped, a backlog it was catching up on: nobody else misses it) or
``JOINED`` (sent before this receiver first heard the stream: late join asks the sender's
history for it, as PGM and NORM offer late joiners). Ranges
are kept sorted and apart; at most MAX_GAPS per stream (bounded memory whatever
arrives): past it the oldest range is given up and stays reported as lost or dropped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator

LOST, DROPPED, JOINED, DROPPED_OWN = 0, 1, 2, 3
KINDS = ("lost", "dropped", "missed_before_join", "dropped")
#: Kinds only this receiver misses: their repair may come to it alone.
OWN_KINDS = (JOINED, DROPPED_OWN)
MAX_GAPS = 512


class Gap:
    """``[lo, hi)`` of one ``kind``; ``due``: when to ask next; ``tries``: requests so far;
    ``held_to``: the seq below which the sender was asked to hold it (own drops)."""

    __slots__ = ("due", "held_to", "hi", "kind", "lo", "tries")

    def __init__(self, lo: int, hi: int, kind: int, due: float, tries: int = 0,
                 held_to: int = 0) -> None:
        self.lo, self.hi, self.kind, self.due, self.tries = lo, hi, kind, due, tries
        self.held_to = held_to


class GapList:
    """Sorted, disjoint missing ranges ``[lo, hi)`` of one stream."""

    def __init__(self) -> None:
        self.gaps: list[Gap] = []
        self._starts: list[int] = []
        self.given_up = [0, 0, 0, 0]  # msgs per kind no longer asked for (bound or max requests)
        self.overflowed = 0  # msgs given up past MAX_GAPS, not yet taken (``take_overflowed``)
        self.progress = False  # the stream's sender was heard since the requester last looked
        self.heard_at = math.nan  # when the requester last found it heard (nan: not yet)

    def __len__(self) -> int:
        return len(self.gaps)

    def __iter__(self) -> Iterator[Gap]:
        return iter(self.gaps)

    def add(self, lo: int, hi: int, kind: int, due: float) -> None:
        """``[lo, hi)`` went missing (it must not overlap a range already held)."""
        gaps, starts = self.gaps, self._starts
        i = bisect.bisect_right(starts, lo)
        prev = gaps[i - 1] if i else None
        if prev is not None and prev.hi == lo and prev.kind == kind and prev.tries == 0:
            prev.hi = hi  # extends the newest range (drops come one by one)
            return
        gaps.insert(i, Gap(lo, hi, kind, due))
        starts.insert(i, lo)
        if len(gaps) > MAX_GAPS:
            g = gaps.pop(0)
            del starts[0]
            self.given_up[g.kind] += g.hi - g.lo
            self.overflowed += g.hi - g.lo

    def take(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """Remove ``[lo, hi)`` from the missing ranges; return the parts that were
        missing as ``(lo, hi, kind)``."""
        gaps, starts = self.gaps, self._starts
        i = max(0, bisect.bisect_right(starts, lo) - 1)
        out: list[tuple[int, int, int]] = []
        while i < len(gaps) and gaps[i].lo < hi:
            g = gaps[i]
            o_lo, o_hi = max(lo, g.lo), min(hi, g.hi)
            if o_lo >= o_hi:
                i += 1
                continue
            out.append((o_lo, o_hi, g.kind))
            left = Gap(g.lo, o_lo, g.kind, g.due, g.tries, g.held_to) if g.lo < o_lo else None
            right = Gap(o_hi, g.hi, g.kind, g.due, g.tries, g.held_to) if o_hi < g.hi else None
            parts = [p for p in (left, right) if p is not None]
            gaps[i:i + 1] = parts
            starts[i:i + 1] = [p.lo for p in parts]
            i += len(parts)
        if out:
            self.progress = True
        return out

    def split(self, gap: Gap, at: int) -> Gap:
        """Cut ``gap`` at seq ``at`` (inside it); returns the upper part, which keeps the
        lower part's kind and tries (a large gap is asked for a piece at a time)."""
        i = self.gaps.index(gap)
        upper = Gap(at, gap.hi, gap.kind, gap.due, gap.tries, gap.held_to)
        gap.hi = at
        self.gaps.insert(i + 1, upper)
        self._starts.insert(i + 1, at)
        return upper

    def take_overflowed(self) -> int:
        """Messages given up past MAX_GAPS since the last call."""
        n, self.overflowed = self.overflowed, 0
        return n

    def give_up(self, gap: Gap) -> None:
        i = self.gaps.index(gap)
        del self.gaps[i]
        del self._starts[i]
        self.given_up[gap.kind] += gap.hi - gap.lo


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
