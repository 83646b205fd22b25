"""What a protocol core tells its driver, one at a time (``core.next_event()``), as h11's
events: plain frozen objects. Drivers log them and hand them to ``on_event`` if given.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Base class."""


@dataclass(frozen=True)
class ReceiverJoined(Event):
    """(sender) ``receiver`` answered this sender's HELLO for the first time."""

    receiver: str


@dataclass(frozen=True)
class ReceiverLeft(Event):
    """(sender) ``receiver`` left: ``bye`` (on purpose), ``evicted`` (ack: silent too long),
    or ``disconnected`` (ack: its connection closed and it stayed silent)."""

    receiver: str
    reason: str


@dataclass(frozen=True)
class BeyondHistory(Event):
    """(sender) a receiver asked for seqs [lo, hi) the history no longer held (GONE);
    (receiver) ``missing`` of them are missing here for good, from (``sender``,
    ``epoch``): this receiver could not catch up within the sender's history."""

    lo: int
    hi: int
    sender: str = ""
    epoch: int = 0
    missing: int = 0


@dataclass(frozen=True)
class Mismatch(Event):
    """(both) a peer runs another mode (``what`` "mode") or key (``what`` "key")."""

    what: str
    detail: str


@dataclass(frozen=True)
class StreamEnded(Event):
    """(receiver) END arrived from a stream this receiver heard: every seq below
    ``final_seq`` was sent."""

    sender: str
    epoch: int
    final_seq: int


@dataclass(frozen=True)
class SenderLeft(Event):
    """(receiver) a sender this receiver heard left without END: ``why`` is ``bye`` (it
    aborted) or ``silent`` (nothing heard for ``ReceiverConfig.sender_gone_s``: killed, or
    cut off)."""

    sender: str
    epoch: int
    why: str = "bye"


@dataclass(frozen=True)
class Confirmed(Event):
    """(sender) the close learnt how this stream ended at ``receiver``: ``status`` is
    ``complete`` (its receipt: it holds every message through END), ``incomplete`` (its
    receipt says what it lacks, ``why``), ``gone`` (BYE, silent, disconnected) or
    ``unconfirmed`` (no receipt before ``linger_max_s``, or an older receiver)."""

    receiver: str
    status: str
    why: str = ""


@dataclass(frozen=True)
class Closed(Event):
    """(sender) the stream is over here: END answered for long enough (or aborted), BYE
    sent. Nothing more will come out of the core."""


def log_level(event: Event) -> int:
    """The level a driver logs ``event`` at: WARNING for a stream that did not end
    complete at a receiver (``Confirmed`` other than ``complete``: an application that
    reads no snapshot and handles no event still hears of it), INFO for the rest."""
    if type(event) is Confirmed and event.status != "complete":
        return logging.WARNING
    return logging.INFO
