"""The start's rounds (``policy.startup``): what each round trip confirmed, and BBR's
full-pipe and the unfilled exits. Sans-I/O: every call takes ``now``."""

from __future__ import annotations

import math

__all__ = ["FULL_GROWTH", "FULL_MIN_MSGS", "FULL_ROUNDS", "KEPT_UP", "StartRounds"]

#: Rounds without 1.25x growth (window-limited), or not filled, that end the start.
FULL_ROUNDS = 3
FULL_GROWTH = 1.25
#: A full pipe's or a delay rise's rate is measured over at least this many messages in
#: the last FULL_ROUNDS rounds; over fewer it is a guess, and the limit ramps on from it
#: (two tasks starting at once on ``nakflow eval``'s slow receiver, 1-2 messages a 10 ms
#: round: one ended on a full pipe at 58 of its 78 msgs/s share and stayed near it for
#: 2 s; another on a delay rise at 40 and took 4.3 s for its 198 messages).
FULL_MIN_MSGS = 8
#: A queue that took at least this share of what arrived in the last rounds kept up.
KEPT_UP = 0.9


class StartRounds:
    """The start's round trips. A round ends (``due``) when the slowest receiver has
    everything sent when it began, and lasts a minimum (``ROUND_MIN_S``, an RTT) at
    least; ``close`` records its delivery rate (``bws``: what the slowest receiver
    confirmed over it, msgs/s), what it confirmed (``msgs``) and how fast the least room
    edge moved (``took``: the slowest queue's consumer, where ``bws`` is what arrived),
    and counts the rounds toward the exits: ``pipe_full`` (FULL_ROUNDS window-limited
    rounds growing less than FULL_GROWTH, BBR's full pipe) and ``unfilled`` (FULL_ROUNDS
    rounds the sender did not fill the window). ``held`` says the window (``roomed``: the
    receivers' room) held the sender back this round."""

    def __init__(self, base: int) -> None:
        self.count = 0
        self._end = base  # the round ends when this is confirmed (sent when it began)
        self._t = 0.0  # when it began
        self._acked = base  # what was confirmed when it began
        self._credit = math.inf  # the least room edge when it began
        self.limited = False  # the window held the sender back this round
        self._roomed = False  # ... and the receivers' room, not the window, held it
        self.room_rounds = 0  # the last rounds in a row the room held the sender back
        self.bws: list[float] = []
        self.msgs: list[int] = []
        self.took: list[float] = []
        self._full_bw = 0.0
        self._full_count = 0
        self._unfilled = 0

    def begin(self, now: float) -> None:
        """The first round begins (the start's first admission or report)."""
        self._t = now

    def held(self, *, roomed: bool) -> None:
        self.limited = True
        if roomed:
            self._roomed = True

    def due(self, acked: int, now: float, min_s: float) -> bool:
        """The round is over: ``acked`` covers what was sent when it began, something
        more was confirmed, and ``min_s`` has passed."""
        return acked >= self._end and acked > self._acked and now - self._t >= min_s

    def close(self, now: float, *, acked: int, sent: int, credit: float) -> None:
        """The round is over (``due``): record it, and begin the next."""
        span = now - self._t
        if span > 0:
            bw = (acked - self._acked) / span
            self.bws.append(bw)
            self.msgs.append(acked - self._acked)
            if self._credit < math.inf and credit < math.inf:
                self.took.append(max(0.0, credit - self._credit) / span)
            if self.limited:
                self._unfilled = 0
                if bw >= self._full_bw * FULL_GROWTH:
                    self._full_bw, self._full_count = bw, 0
                else:
                    self._full_count += 1
            else:
                self._unfilled += 1
        self.count += 1
        self._end, self._t, self._acked, self._credit = sent, now, acked, credit
        self.room_rounds = self.room_rounds + 1 if self._roomed else 0
        self.limited = self._roomed = False

    @property
    def pipe_full(self) -> bool:
        return self._full_count >= FULL_ROUNDS

    @property
    def unfilled(self) -> bool:
        return self._unfilled >= FULL_ROUNDS

    def recent(self, after: int | None = None) -> list[float]:
        """The delivery rates of the last FULL_ROUNDS rounds (of those begun after round
        ``after``, if given)."""
        bws = self.bws if after is None else self.bws[after + 1:]
        return bws[-FULL_ROUNDS:]

    def recent_took(self) -> list[float]:
        """What the slowest queue took in the last FULL_ROUNDS rounds, msgs/s."""
        return self.took[-FULL_ROUNDS:]

    @property
    def measured(self) -> bool:
        """The last FULL_ROUNDS rounds confirmed FULL_MIN_MSGS at least: their rate is
        a measurement, not a guess from a message or two a round."""
        return sum(self.msgs[-FULL_ROUNDS:]) >= FULL_MIN_MSGS

    def kept_up(self) -> bool:
        """The last FULL_ROUNDS rounds the receivers' room held the sender back and the
        slowest queue took what arrived (KEPT_UP of it)."""
        bws, took = self.bws[-FULL_ROUNDS:], self.took[-FULL_ROUNDS:]
        return (self.room_rounds >= FULL_ROUNDS and bool(bws) and bool(took)
                and max(took) >= KEPT_UP * sum(bws) / len(bws))
