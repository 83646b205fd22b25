"""The tail of a sender's stream, made known (sans-I/O): while idle after data the
sender announces its last seq (``Hello.announce``, PGM's ambient SPM), and after END it
repeats END (NORM's flush). A receiver that lost the tail counts it lost and asks for it;
one that lost END still ends. ``SenderCore`` asks when each is due and sends the frames.
"""

from __future__ import annotations

import math

#: The first announcement goes this long after the last DATA frame, the next ones at
#: doubling intervals up to ANNOUNCE_MAX_S, s: a lost tail is known within about this.
#: The announcements are also how an idle sender shows it is alive: a receiver takes one
#: silent for ReceiverConfig.sender_gone_s (10 s) as gone (core.silence).
ANNOUNCE_FIRST_S = 0.05
ANNOUNCE_MAX_S = 1.0
#: After END, END goes again this many times, at intervals doubling from
#: max(2 RTT, END_REPEAT_FIRST_S) up to END_REPEAT_MAX_S, and on at that interval while a
#: receiver's receipt is awaited (the close waits for receipts: ``_close``; with receivers
#: that send none, close() returns after the last repeat). The cap: an RTT measured across
#: a full buffer is the buffer's delay (5.2 s from an ACK sender whose TCP buffer held
#: seconds of data for the lab's 8 Mbit/s link), and uncapped its three repeats kept
#: close() waiting 72 s after every receiver had ended.
END_REPEATS = 3
END_REPEAT_FIRST_S = 0.02
END_REPEAT_MAX_S = 1.0


class TailAnnouncer:
    """When the next announcement and the next repeated END are due."""

    def __init__(self, now: float) -> None:
        self.last_data_t = now  # the core sets it per DATA frame
        self._seq, self._at, self._gap = 0, now, ANNOUNCE_FIRST_S
        self.ends_left, self.end_at, self._end_gap = 0, math.inf, END_REPEAT_FIRST_S

    def announce_at(self, seq: int) -> float:
        """When to announce ``seq`` (the next seq to send; inf: nothing sent yet)."""
        if seq == 0:
            return math.inf
        if seq != self._seq:  # data went out since the last announcement
            return self.last_data_t + ANNOUNCE_FIRST_S
        return self._at + self._gap

    def announced(self, seq: int, now: float) -> None:
        if seq != self._seq:
            self._seq, self._gap = seq, ANNOUNCE_FIRST_S
        else:
            self._gap = min(2 * self._gap, ANNOUNCE_MAX_S)
        self._at = now

    def start_ends(self, now: float, rtt_s: float) -> None:
        """END was sent at ``now``: schedule its repeats."""
        self.ends_left = END_REPEATS
        self._end_gap = min(max(2 * rtt_s, END_REPEAT_FIRST_S), END_REPEAT_MAX_S)
        self.end_at = now + self._end_gap

    def end_repeated(self, now: float, *, more: bool = False) -> None:
        """END went again at ``now``; ``more``: receivers are still awaited, so it goes on
        being repeated (every END_REPEAT_MAX_S at most) after the END_REPEATS."""
        self.ends_left = max(0, self.ends_left - 1)
        self._end_gap = min(2 * self._end_gap, END_REPEAT_MAX_S)
        self.end_at = now + self._end_gap if self.ends_left or more else math.inf
