"""The receiver's side of NAK's start (``policy.startup``): PROGRESS reports to each
sender whose DATA says ``startup``. Sans-I/O: every call takes ``now``."""

from __future__ import annotations

import math
import zlib
from typing import Any

from ..wire import SenderKey
from ..wire.codec import Progress

__all__ = ["FORGET_S", "PROGRESS_RATE", "REPORT_MAX_S", "REPORT_S", "ProgressReporter",
           "report_interval_us"]

#: A receiver sends one PROGRESS per sender at most this often, s (where the sender asks
#: for no longer interval).
REPORT_S = 0.001
#: The PROGRESS a starting sender asks for from all its receivers together, frames/s: the
#: interval its DATA asks for (``Data.report_us``) grows with the receivers that reported,
#: as NORM scales its feedback timers by the group's size (RFC 5740 5.5.2). Up to 50
#: receivers, REPORT_S; 100, 2 ms; 1,000, 20 ms. A report costs the sender about 8 µs
#: (``StartReports``), so this is some 40 % of a core while a start lasts. With 20,000,
#: 50 receivers' slowest queue peaked at 75 % instead of 56 % in the heterogeneous
#: simulation (docs/known-limits.md).
PROGRESS_RATE = 50_000
#: ... but never longer than this, s (a round waits for the slowest receiver's report:
#: the start stalls without one for ``startup.STALL_REPORTS`` of the longest intervals).
#: Past 2,500 receivers the start's PROGRESS passes PROGRESS_RATE.
REPORT_MAX_S = 0.05


def report_interval_us(receivers: int) -> int:
    """The interval a starting sender asks of each of its ``receivers``, µs (0: REPORT_S,
    the default a DATA frame leaves out)."""
    s = min(REPORT_MAX_S, receivers / PROGRESS_RATE)
    return round(s * 1e6) if s > REPORT_S else 0


#: A receiver stops reporting to a sender whose DATA no longer says ``startup``, or none
#: came for this long, s.
FORGET_S = 1.0


class ProgressReporter:
    """The receiver's side: for each sender whose DATA says ``startup``, a PROGRESS at most
    every ``REPORT_S`` (or the longer interval its DATA asks for, ``Data.report_us``) with
    the highest seq seen, the queue's room and the least delay since the last one; one
    held back by the interval, or due because the queue made room (``on_released``), goes
    out when it is over (``poll``), so a sender waiting on its window is never left
    waiting. Bounded: ``max_streams`` senders at once.

    A longer interval is stretched by a share of it fixed by the receiver's id, from 0 up
    to all of it (``spread``): every receiver reads the same DATA at about the same time,
    and without it all would report on the same frame, a burst of every receiver's report
    at the sender each interval."""

    def __init__(self, stream: str, receiver: str, *, max_streams: int,
                 wall_offset: float = 0.0) -> None:
        self.stream, self.receiver, self.max_streams = stream, receiver, max_streams
        self.wall_offset = wall_offset
        #: a longer interval than REPORT_S is this many times longer here, in [1, 2)
        self.spread = 1.0 + zlib.crc32(receiver.encode()) / 2**32
        #: sender key -> [next seq, least path delay since the last report, last report at,
        #: a report is pending, last startup DATA at, least delay seen, interval s]
        self._rows: dict[SenderKey, list[Any]] = {}
        self.sent = 0

    def on_data(self, key: SenderKey, next_seq: int, delay: float, room: tuple[int, float],
                now: float, late: float = 0.0, report_us: int = 0) -> Progress | None:
        """A startup DATA frame of ``key`` ending at ``next_seq``, ``delay`` s old, of
        which up to ``late`` s this process was late to read it (descheduled, stopped: not
        the path's queue); ``room``: (the queue's room, its consumer's rate or 0);
        ``report_us``: the interval the frame asks for, µs (0: REPORT_S).

        The delay reported is the path's: ``delay - late``, as the fill's delay signal
        judges it, but never below the least delay this receiver saw of the stream (a
        frame that came in the middle of the lateness waited less than all of it, and a
        sample below the path's own delay would lower the least a sender compares with,
        and make the next frames look queued). On two shared cores the receivers' I/O
        threads ran 20-60 ms late at times, and the start read that as a path filling."""
        row = self._rows.get(key)
        if row is None:
            if len(self._rows) >= self.max_streams:
                del self._rows[next(iter(self._rows))]
            row = self._rows[key] = [next_seq, math.inf, -math.inf, True, now, delay,
                                     REPORT_S]
        else:
            if next_seq > row[0]:
                row[0] = next_seq
            row[3], row[4] = True, now
        asked = min(report_us * 1e-6, FORGET_S)  # (a second at most, whatever it says)
        row[6] = asked * self.spread if asked > REPORT_S else REPORT_S
        if delay < row[5]:
            row[5] = delay
        path = max(delay - late, row[5])
        if path < row[1]:
            row[1] = path
        if now - row[2] >= row[6]:
            return self._report(key, row, room, now)
        return None

    @property
    def reporting(self) -> bool:
        """Some sender is in its start here."""
        return bool(self._rows)

    def on_released(self) -> None:
        """The queue made room: every sender in its start hears of it."""
        for row in self._rows.values():
            row[3] = True

    def forget(self, key: SenderKey) -> None:
        """``key`` ended, left, or sends DATA without ``startup``: its start is over."""
        self._rows.pop(key, None)

    def poll(self, room: tuple[int, float], now: float) -> list[Progress]:
        """The reports held back whose interval is over (``room`` as for ``on_data``)."""
        out = []
        for key, row in list(self._rows.items()):
            if now - row[4] >= FORGET_S:
                del self._rows[key]
            elif row[3] and now - row[2] >= row[6]:
                out.append(self._report(key, row, room, now))
        return out

    def next_deadline(self) -> float | None:
        t = math.inf
        for row in self._rows.values():
            due = row[2] + row[6] if row[3] else row[4] + FORGET_S
            if due < t:
                t = due
        return None if math.isinf(t) else t

    def _report(self, key: SenderKey, row: list[Any], room: tuple[int, float],
                now: float) -> Progress:
        delay = row[1] if math.isfinite(row[1]) else 0.0  # room made, no frame since
        frame = Progress(self.stream, self.receiver, key[0], key[1], row[0], room[0],
                         round(room[1], 1), delay, now + self.wall_offset)
        row[1], row[2], row[3] = math.inf, now, False
        self.sent += 1
        return frame
