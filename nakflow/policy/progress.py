"""The receiver's side of NAK's start (``policy.startup``): PROGRESS reports to each
sender whose DATA says ``startup``. Sans-I/O: every call takes ``now``."""

from __future__ import annotations

import math
from typing import Any

from ..wire import SenderKey
from ..wire.codec import Progress

__all__ = ["FORGET_S", "REPORT_S", "ProgressReporter"]

#: A receiver sends one PROGRESS per sender at most this often, s.
REPORT_S = 0.001
#: A receiver stops reporting to a sender whose DATA no longer says ``startup``, or none
#: came for this long, s.
FORGET_S = 1.0


class ProgressReporter:
    """The receiver's side: for each sender whose DATA says ``startup``, a PROGRESS at most
    every ``REPORT_S`` with the highest seq seen, the queue's room and the least delay
    since the last one; one held back by the interval, or due because the queue made room
    (``on_released``), goes out when it is over (``poll``), so a sender waiting on its
    window is never left waiting. Bounded: ``max_streams`` senders at once."""

    def __init__(self, stream: str, receiver: str, *, max_streams: int,
                 wall_offset: float = 0.0) -> None:
        self.stream, self.receiver, self.max_streams = stream, receiver, max_streams
        self.wall_offset = wall_offset
        #: sender key -> [next seq, least path delay since the last report, last report at,
        #: a report is pending, last startup DATA at, least delay seen]
        self._rows: dict[SenderKey, list[Any]] = {}
        self.sent = 0

    def on_data(self, key: SenderKey, next_seq: int, delay: float, room: tuple[int, float],
                now: float, late: float = 0.0) -> Progress | None:
        """A startup DATA frame of ``key`` ending at ``next_seq``, ``delay`` s old, of
        which up to ``late`` s this process was late to read it (descheduled, stopped: not
        the path's queue); ``room``: (the queue's room, its consumer's rate or 0).

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
            row = self._rows[key] = [next_seq, math.inf, -math.inf, True, now, delay]
        else:
            if next_seq > row[0]:
                row[0] = next_seq
            row[3], row[4] = True, now
        if delay < row[5]:
            row[5] = delay
        path = max(delay - late, row[5])
        if path < row[1]:
            row[1] = path
        if now - row[2] >= REPORT_S:
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
            elif row[3] and now - row[2] >= REPORT_S:
                out.append(self._report(key, row, room, now))
        return out

    def next_deadline(self) -> float | None:
        t = math.inf
        for row in self._rows.values():
            due = row[2] + REPORT_S if row[3] else row[4] + FORGET_S
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
