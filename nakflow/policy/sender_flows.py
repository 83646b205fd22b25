"""The sender side of the flow-control policies: ``SenderFlow`` answers "how many of
these n messages may go now, and if not all, how long until asking again". ``none``
(``NoFlow``, at most a fixed rate) and ``ack`` (``AckFlow``, credit) are here, ``nak``
(``NakFlow``) in ``policy.nak_flow``; ``policy.registry`` builds them by mode.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import Any, ClassVar, TypeGuard

from ..config import AckConfig
from ..wire import SenderKey
from ..wire.codec import Credit, Frame, Hello, Nak, Progress
from .bucket import TokenBucket
from .credit import CreditLedger

__all__ = ["AckFlow", "NoFlow", "SenderFlow", "is_other_modes_feedback"]


class SenderFlow(ABC):
    """Sender-side policy."""

    mode: ClassVar[str]
    #: The clock reading that snapshot times count from (the core sets its start).
    t0: float = 0.0
    #: The data path stays on this host (the core sets it, ``SenderConfig.host_local``).
    host_local: bool = False

    @abstractmethod
    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        """Ask to send ``n`` messages at ``now``.

        Returns (granted, wait): ``granted`` of them may go now and are counted
        as sent; if ``granted < n``, ask again in ``wait`` seconds (``inf``: not
        before feedback arrives or ``next_deadline()``).
        """

    @abstractmethod
    def admit_up_to(self, n: int, *, now: float) -> int:
        """Take permission for as many of ``n`` messages as may go at ``now`` (counted as
        sent); for drivers that send what they may each tick (the simulator)."""

    def refund(self, n: int) -> None:  # noqa: B027 (nothing to give back by default)
        """``n`` messages admitted (by ``admit_up_to``) were not sent after all."""

    def on_feedback(self, frame: Frame, *, now: float) -> None:  # noqa: B027 (optional hook)
        """A feedback frame for this sender's stream arrived at ``now``."""

    def next_deadline(self) -> float | None:
        """When the policy's state next changes by itself (None: only on feedback)."""
        return None

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        """(rate limit msgs/s, credit left msgs) at ``now``; None where not applicable."""
        return None, None

    def why_held(self, *, now: float) -> str:
        """What keeps the next message from going at ``now``, in a few words for an error
        (a send that timed out): "" where nothing is known to."""
        return ""

    def set_rtt(self, rtt_s: float) -> None:  # noqa: B027 (optional hook)
        """The group's round-trip time, measured from receivers' HELLO answers, s."""

    def on_receiver_bye(self, receiver: str) -> None:  # noqa: B027 (optional hook)
        """``receiver`` left on purpose (BYE)."""

    def on_timer(self, *, now: float) -> list[tuple[str, str]]:
        """Time passed: receivers the policy gave up on at ``now``, with why
        (``evicted``: silent; ``disconnected``: silent after a closed connection)."""
        return []

    def on_connection_lost(self, *, now: float) -> None:  # noqa: B027 (optional hook)
        """The transport says a receiver's connection closed (which one it does not say)."""

    def ready(self, answered: Collection[str]) -> int:
        """How many of the receivers that ``answered`` HELLO may be sent to now (``ack``:
        only those that also granted credit)."""
        return len(answered)

    def validated_rate(self, *, now: float) -> float | None:
        """A rate this sender has shown the path takes, for the next sender on it (None:
        nothing to hand on)."""
        return None

    @property
    def starting(self) -> bool:
        """In its start: DATA asks receivers for PROGRESS (``policy.startup``)."""
        return False

    @property
    def report_us(self) -> int:
        """While ``starting``: how often DATA asks each receiver for PROGRESS, µs (0: the
        receivers' default, ``progress.REPORT_S``)."""
        return 0

    def use_startup(self) -> None:  # noqa: B027 (optional hook)
        """Begin with the start (``policy.startup``), if the mode has one: only a driver
        whose receivers answer PROGRESS asks for it (the protocol cores do)."""

    def size_hint(self, msg_bytes: int) -> None:  # noqa: B027 (optional hook)
        """The size of the first message offered, bytes, before it is admitted (a start's
        first window may be counted in bytes)."""

    def frame_msgs(self, most: int) -> int:
        """How many messages a DATA frame may hold now, of the configured ``most``."""
        return most

    def on_peer_ended(self, peer: tuple[str, int], seq: int, *, now: float) -> None:  # noqa: B027
        """Another sender of this stream ended (``peer``: its id and epoch; a receiver's
        RECEIPT for it was heard); ``seq``: what this one admitted so far."""

    def on_progress(self, frame: Progress, *, now: float) -> None:  # noqa: B027
        """A receiver's PROGRESS for this sender, during the start."""

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready."""


class NoFlow(SenderFlow):
    """``none``: no flow control (at most a fixed rate cap); receivers' queues overflow
    and their drops are counted."""

    mode = "none"

    def __init__(self, max_rate_msgs: float | None = None, burst_s: float = 0.005) -> None:
        self.bucket = None if max_rate_msgs is None else TokenBucket(max_rate_msgs,
                                                                     burst_s=burst_s)

    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        if self.bucket is not None:
            wait = self.bucket.request(n, now=now)
            if wait:
                return 0, wait
        return n, 0.0

    def admit_up_to(self, n: int, *, now: float) -> int:
        return n if self.bucket is None else self.bucket.take_up_to(n, now=now)

    def refund(self, n: int) -> None:
        if self.bucket is not None:
            self.bucket.refund(n)

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        return (None if self.bucket is None else self.bucket.rate), None

    def why_held(self, *, now: float) -> str:
        return "" if self.bucket is None else f"max rate {self.bucket.rate:g} msgs/s"

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, "rate_limit": None if self.bucket is None else self.bucket.rate}


class AckFlow(SenderFlow):
    """``ack``: send only what the slowest live receiver granted."""

    mode = "ack"

    def __init__(self, stream: str, sender: str, epoch: int,
                 config: AckConfig | None = None, *, next_seq: int = 0,
                 max_rate_msgs: float | None = None) -> None:
        self.stream = stream
        self.key: SenderKey = (sender, epoch)
        self.ledger = CreditLedger(config, next_seq=next_seq)
        self.cap = NoFlow(max_rate_msgs)
        self.stalls = 0

    def admit(self, n: int, *, now: float) -> tuple[int, float]:
        ledger = self.ledger
        k = min(n, ledger.sendable(now=now))
        if k and self.cap.bucket is not None:
            capped, wait = self.cap.admit(k, now=now)
            if not capped:
                return 0, wait
        if k:
            ledger.on_sent(k, now=now)
        if k < n:
            self.stalls += 1
            return k, math.inf
        return k, 0.0

    def admit_up_to(self, n: int, *, now: float) -> int:
        ledger = self.ledger
        k = min(n, ledger.sendable(now=now))
        if k and self.cap.bucket is not None:
            k = self.cap.bucket.take_up_to(k, now=now)
        if k:
            ledger.on_sent(k, now=now)
        elif n:
            self.stalls += 1
        return k

    def refund(self, n: int) -> None:
        self.ledger.unsend(n)
        self.cap.refund(n)

    def on_feedback(self, frame: Frame, *, now: float) -> None:
        if (type(frame) is Credit and frame.stream == self.stream
                and (frame.sender, frame.epoch) == self.key):
            self.ledger.on_credit(frame.receiver, frame.limit, now=now)
        elif (type(frame) is Hello and frame.role == "receiver" and frame.mode == "ack"
              and frame.stream == self.stream):
            self.ledger.on_presence(frame.node, now=now)
            self.ledger.on_alive(frame.node)

    def on_receiver_bye(self, receiver: str) -> None:
        self.ledger.on_bye(receiver)

    def on_timer(self, *, now: float) -> list[tuple[str, str]]:
        return self.ledger.expire(now=now)

    def on_connection_lost(self, *, now: float) -> None:
        within = self.ledger.config.disconnect_probe_s
        if within is not None:
            self.ledger.suspect(now=now, within=within)

    def ready(self, answered: Collection[str]) -> int:
        granted = self.ledger.has_granted
        return sum(1 for r in answered if granted(r))

    def next_deadline(self) -> float | None:
        return self.ledger.next_deadline()

    def limits(self, *, now: float) -> tuple[float | None, int | None]:
        return self.cap.limits(now=now)[0], self.ledger.sendable(now=now)

    def why_held(self, *, now: float) -> str:
        """Which receivers' credit holds the sender, or that none is left to grant it."""
        ledger = self.ledger
        joined, least = len(ledger.receivers), ledger.config.min_receivers
        if not joined:
            return "no receiver is left to grant credit"
        if joined < least:
            return f"{joined} of the {least} receivers min_receivers asks for have joined"
        held = ledger.holders(now=now)
        if not held:
            return self.cap.why_held(now=now)
        receiver, limit, quiet_s = held[0]
        who = receiver if len(held) == 1 else f"{receiver} and {len(held) - 1} more"
        granted = (f"allows messages below {limit:,}, its last credit {quiet_s:.1f} s ago"
                   if ledger.has_granted(receiver) else "has granted nothing yet")
        return (f"waiting for credit from {who}, which {granted}; a receiver is dropped "
                f"after {ledger.config.receiver_timeout_s:g} s without credit")

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, "credit_stalls": self.stalls, **self.ledger.snapshot()}


def is_other_modes_feedback(frame: Frame, mode: str) -> TypeGuard[Nak | Credit]:
    """A NAK heard outside ``nak`` mode, or a CREDIT outside ``ack``: a misconfiguration."""
    return (type(frame) is Nak and mode != "nak") or (type(frame) is Credit and mode != "ack")

from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
