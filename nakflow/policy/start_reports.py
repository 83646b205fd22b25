"""What the receivers said in the start (``policy.startup``): how far each got, how much
room its queue has, and what its consumer takes once it has a backlog."""

from __future__ import annotations

import math

__all__ = ["MAX_RECEIVERS", "StartReports"]

#: Receivers a start follows at most (PROGRESS from more is ignored: bounded whatever
#: ids arrive).
MAX_RECEIVERS = 4096


class StartReports:
    """Per receiver, from its PROGRESS: ``pos`` (the next seq it expects, never past
    what was sent), ``room`` (the seq its queue has room up to), ``most_room`` (the most
    room it reported) and ``take`` (its consumer's rate, msgs/s, while it reports a
    backlog or its NAK said so); ``credit``, the least room edge (ACK's credit)."""

    def __init__(self) -> None:
        self.pos: dict[str, int] = {}
        self.room: dict[str, int] = {}
        self.most_room: dict[str, int] = {}
        self.take: dict[str, float] = {}
        self.credit = math.inf

    def report(self, receiver: str, next_seq: int, room: int, rate: float,
               sent: int) -> tuple[bool, int] | None:
        """Take ``receiver``'s PROGRESS: (whether its position moved, by how much; its
        first report counts from 0), or None for a receiver past MAX_RECEIVERS (ignored)."""
        pos = self.pos
        before = pos.get(receiver)
        if before is None and len(pos) >= MAX_RECEIVERS:
            return None
        moved, covered = before is None or next_seq > before, 0
        if moved:
            pos[receiver] = min(next_seq, sent)
            covered = pos[receiver] - (before or 0)
        self.room[receiver] = pos[receiver] + room
        self.most_room[receiver] = max(room, self.most_room.get(receiver, 0))
        if rate > 0:
            self.take[receiver] = rate
        else:
            self.take.pop(receiver, None)
        self.credit = min(self.room.values())
        return moved, covered

    def said_rate(self, receiver: str, rate: float) -> None:
        """``receiver``'s NAK reported what it takes from each sender: the least holds."""
        if receiver in self.take or len(self.take) < MAX_RECEIVERS:
            self.take[receiver] = min(rate, self.take.get(receiver, rate))

    def gone(self, receiver: str) -> None:
        self.pos.pop(receiver, None)
        self.room.pop(receiver, None)
        self.most_room.pop(receiver, None)
        self.take.pop(receiver, None)
        self.credit = min(self.room.values(), default=math.inf)

    def least(self) -> int | None:
        """The least position (None: no receiver reported)."""
        return min(self.pos.values(), default=None)

    def short(self) -> bool:
        """A queue that another sender filled or whose consumer has a backlog: one
        reports a consumer's rate, or room below half the most it reported (or none)."""
        return bool(self.take) or any(2 * (self.room[r] - self.pos[r]) < max(most, 1)
                                      for r, most in self.most_room.items())

    @property
    def filling(self) -> bool:
        """A receiver's queue is a quarter full (of the room it reported at most)."""
        return any(4 * (edge - self.pos[r]) < 3 * self.most_room[r]
                   for r, edge in self.room.items())
