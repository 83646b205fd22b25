"""The exact close, sans-I/O: whom a closing sender waits for, and what each said.

A receiver that says it sends receipts (``Hello.receipts``) answers END with a RECEIPT
once it holds the whole stream (every seq below END delivered or queued) or asks for no
more of it; until END a healthy receiver stays as silent as before, so the close costs
one frame per receiver and stream. The sender's ``close()`` returns when every receiver
it had heard before END has answered, or is gone: it said BYE, it has been silent for
``SenderConfig.receiver_gone_s``, or it stayed silent for DISCONNECT_PROBE_S after ZeroMQ
reported a closed connection (no more receivers than connections closed: a stopped
receiver beside a killed one is not taken for dead). Past ``RepairConfig.linger_max_s``
the rest are ``unconfirmed``. NORM's watermark flush with acking nodes
(``NormSetWatermark``, ``NORM_TX_WATERMARK_COMPLETED``), Kafka's ``flush()`` with
``acks=all``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..wire.codec import (
    RECEIPT_REASONS,
    Bye,
    Credit,
    Frame,
    Hello,
    Nak,
    Progress,
    Receipt,
    Repair,
)
from .repair_server import REPAIR_POLL_S, RepairServer
from .roster import ReceiverRoster
from .tail import TailAnnouncer

#: After ZeroMQ reports a closed receiver connection, receivers not heard within this
#: long are gone (``disconnected``), s: three of a receiver's HELLO intervals (0.5 s), so
#: a live receiver is always heard; a killed one costs a close this, not receiver_gone_s.
DISCONNECT_PROBE_S = 1.5
#: ... heard within this long after the report is no sign of life, s: frames a receiver
#: sent before it died are still read after its connection closed (PROGRESS in a start
#: comes every millisecond).
LOST_GRACE_S = 0.05

#: The report lists at most this many receivers (those not complete first); the counts
#: cover all of them (a flood of made-up receiver ids must not grow every report).
MAX_REPORTED = 256

COMPLETE, INCOMPLETE, GONE, UNCONFIRMED = "complete", "incomplete", "gone", "unconfirmed"
#: What a receiver can end as, at a sender's close.
STATUSES = (COMPLETE, INCOMPLETE, GONE, UNCONFIRMED)


@dataclass(frozen=True)
class Outcome:
    """What the close learnt of one receiver: ``status`` (one of STATUSES), ``why`` in
    words, and for ``incomplete`` what it lacks by reason (``RECEIPT_REASONS``)."""

    status: str
    why: str = ""
    missing: dict[str, int] = field(default_factory=dict)

    def as_dict(self, receiver: str) -> dict[str, Any]:
        return {"receiver": receiver, "status": self.status, "why": self.why,
                "missing": sum(self.missing.values()), "missing_by_reason": self.missing}


def receiver_of(frame: Frame) -> str | None:
    """The receiver a feedback frame comes from (None: a sender's frame)."""
    kind = type(frame)
    if kind is Hello or kind is Bye:
        return frame.node if frame.role == "receiver" else None  # type: ignore[union-attr]
    if kind is Nak or kind is Credit or kind is Repair or kind is Receipt or kind is Progress:
        return frame.receiver  # type: ignore[union-attr]
    return None


def _words(missing: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in missing.items())


class CloseTally:
    """The receivers a sender waits for at close (``audience``: those heard before END)
    and their outcomes. ``waiting(now)`` says who is still awaited and marks the ones
    that went meanwhile; ``finish`` marks the rest unconfirmed."""

    def __init__(self, roster: ReceiverRoster, *, gone_after_s: float) -> None:
        self.roster, self.gone_after_s = roster, gone_after_s
        self.outcomes: dict[str, Outcome] = {}
        self.audience: dict[str, None] | None = None  # set at END
        #: the receivers heard before END (``audience`` empties once the close is over)
        self.members: frozenset[str] | None = None
        #: receipts from receivers first heard after END: they joined while the close
        #: repeated END and lack what came before them; no part of this stream's close
        self.receipts_after_end = 0
        self._lost_at, self._lost_n = -math.inf, 0  # the last closed connections
        self.receipts = 0
        self._new: list[tuple[str, Outcome]] = []  # outcomes not yet taken (``take_new``)
        #: receivers heard before END that send no receipts (older ones, or made-up ids on
        #: an open channel): counted, and a few of them named, not one Outcome each
        self.older: list[str] = []
        self.older_n = 0

    def start(self) -> None:
        """END went out: the receivers heard so far are the ones the close waits for (a
        receiver first heard later did not take part in this stream)."""
        if self.audience is None:
            self.audience = dict.fromkeys(self.roster.last_heard)
            self.members = frozenset(self.audience)

    @property
    def expects_receipts(self) -> bool:
        """Whether anyone in the audience sends receipts (if nobody does, the close is
        the older one: END repeated, repairs answered while receivers ask)."""
        receipts = self.roster.receipts
        return any(r in receipts for r in self.audience or ())

    @property
    def has_older(self) -> bool:
        """Whether anyone in the audience sends no receipts (an older receiver: for it
        the older close rule applies as well)."""
        receipts, left = self.roster.receipts, self.roster.left
        return any(r not in receipts and r not in left for r in self.audience or ())

    def on_receipt(self, frame: Receipt) -> Outcome | None:
        """A receipt for this sender's stream: its outcome (None: the receiver was first
        heard after END, counted in ``receipts_after_end``)."""
        if self.members is not None and frame.receiver not in self.members:
            self.receipts_after_end += 1
            return None
        self.receipts += 1
        missing = {r: n for r, n in zip(RECEIPT_REASONS, frame.missing, strict=True) if n}
        outcome = Outcome(INCOMPLETE, _words(missing), missing) if missing else Outcome(COMPLETE)
        self._settle(frame.receiver, outcome)
        return outcome

    def _settle(self, receiver: str, outcome: Outcome) -> None:
        if self.outcomes.get(receiver) != outcome:
            self.outcomes[receiver] = outcome
            self._new.append((receiver, outcome))

    def take_new(self) -> list[tuple[str, Outcome]]:
        """Outcomes settled since the last call (for the driver's events)."""
        out, self._new = self._new, []
        return out

    def on_connection_lost(self, n: int, now: float) -> None:
        """ZeroMQ reported ``n`` receiver connections closed at ``now``."""
        if now - self._lost_at > DISCONNECT_PROBE_S:
            self._lost_n = 0
        self._lost_at, self._lost_n = now, self._lost_n + n

    def waiting(self, now: float) -> list[str]:
        """The receivers whose receipt the close still waits for; those that went since
        the last look get their outcome (``gone``) here."""
        if self.audience is None:
            return []
        roster, outcomes, out, silent = self.roster, self.outcomes, [], []
        for r in self.audience:
            if r in outcomes or r not in roster.receipts:
                continue
            if r in roster.left:
                self._settle(r, Outcome(GONE, "bye"))
                continue
            heard = roster.last_heard.get(r, -math.inf)
            if now - heard >= self.gone_after_s:
                self._settle(r, Outcome(GONE, f"silent for {self.gone_after_s:g} s"))
                continue
            if heard < self._lost_at + LOST_GRACE_S:
                silent.append(r)
            out.append(r)
        if (silent and now >= self._lost_at + DISCONNECT_PROBE_S
                and len(silent) <= self._lost_n):
            for r in silent:
                self._settle(r, Outcome(GONE, "disconnected"))
                out.remove(r)
        return out

    def next_check(self, waiting: list[str]) -> float:
        """When one of ``waiting`` may next be taken for gone (inf: never by itself)."""
        heard, t = self.roster.last_heard, math.inf
        for r in waiting:
            h = heard.get(r, -math.inf)
            t = min(t, h + self.gone_after_s)
            if h < self._lost_at + LOST_GRACE_S:
                t = min(t, self._lost_at + DISCONNECT_PROBE_S)
        return t

    def finish(self, why: str = "no receipt within linger_max_s") -> None:
        """The close is over: whoever it still waited for is ``unconfirmed`` (``why``)."""
        roster = self.roster
        for r in self.audience or ():
            if r in self.outcomes:
                continue
            if r in roster.left:
                self._settle(r, Outcome(GONE, "bye"))
            elif r in roster.receipts:
                self._settle(r, Outcome(UNCONFIRMED, why))
            else:
                self.older_n += 1
                if len(self.older) < MAX_REPORTED:
                    self.older.append(r)
        self.audience = {}  # done: nothing more is awaited

    def report(self) -> list[dict[str, Any]]:
        """Per receiver (at most MAX_REPORTED: those not complete first, then by id): its
        outcome (``Outcome.as_dict``)."""
        order = sorted(self.outcomes, key=lambda r: (self.outcomes[r].status == COMPLETE, r))
        out = [self.outcomes[r].as_dict(r) for r in order[:MAX_REPORTED]]
        older = Outcome(UNCONFIRMED, "sends no receipts (an older nakflow receiver)")
        out += [older.as_dict(r) for r in self.older[:MAX_REPORTED - len(out)]]
        return out

    def counts(self) -> dict[str, int]:
        """How many receivers ended in each status."""
        out = dict.fromkeys(STATUSES, 0)
        for o in self.outcomes.values():
            out[o.status] += 1
        out[UNCONFIRMED] += self.older_n
        return out


class SenderClose:
    """When a closing sender looks again whether its close is over, and whether it is
    (``over``): after END, until every receiver heard before END has sent its receipt or
    is gone (``tally``), answering repairs meanwhile, at most ``linger_max_s``; for
    receivers that send no receipts (older ones), also until they stop asking for repairs
    and the ENDs were repeated (``tail``). ``SenderCore`` sends the frames and the events."""

    def __init__(self, tally: CloseTally, tail: TailAnnouncer, linger_max_s: float) -> None:
        self.tally, self.tail, self.linger_max_s = tally, tail, linger_max_s
        self.since = self.next_look = 0.0  # the linger after END: since when, next look

    def begin(self, now: float, rtt_s: float) -> None:
        """The close began at ``now`` (END went out): look at once, repeat END (``tail``)."""
        self.since = self.next_look = now
        self.tail.start_ends(now, rtt_s)

    def look_now(self, now: float) -> None:
        """Something changed (a receipt, a closed connection): look again at ``now``."""
        self.next_look = min(self.next_look, now)

    @property
    def due_at(self) -> float:
        """The next look or the next repeated END, whichever comes first."""
        return min(self.next_look, self.tail.end_at)

    def end_due(self, now: float) -> bool:
        """Whether END goes again at ``now`` (repeated while receipts are awaited: a lost
        receipt is asked for again this way)."""
        if now < self.tail.end_at:
            return False
        self.tail.end_repeated(now, more=bool(self.tally.waiting(now)))
        return True

    def over(self, now: float, repairs: RepairServer | None, *, sent_any: bool) -> bool:
        """Whether the close is over at ``now`` (whoever it still waited for is then
        ``unconfirmed``); if not, ``next_look`` says when to look again."""
        tally = self.tally
        waiting = tally.waiting(now)
        older = None  # the older rule's wait (None: over, or not needed)
        if not tally.expects_receipts or tally.has_older:
            older = None if repairs is None else repairs.linger_wait(self.since, now=now,
                                                                     sent_any=sent_any)
            if older is None and self.tail.ends_left:  # the ENDs still to repeat
                older = max(0.0, self.tail.end_at - now)
        pending = repairs is not None and repairs.pending
        give_up = self.since + self.linger_max_s
        if now >= give_up or (not waiting and older is None and not pending):
            tally.finish()
            return True
        nxt = min(give_up, tally.next_check(waiting),
                  math.inf if older is None else now + older)
        if pending:
            nxt = min(nxt, now + REPAIR_POLL_S)
        self.next_look = nxt
        return False
