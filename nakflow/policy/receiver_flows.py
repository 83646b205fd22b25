"""The receiver side of the flow-control policies: ``ReceiverFlow`` turns what the
receiver sees into the feedback frames it should send. ``none`` says nothing
(``NoFeedback``), ``nak`` NAKs as its queue fills (``NakFeedback``), ``ack`` grants credit
(``AckFeedback``); ``policy.registry`` builds them by mode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from ..config import AckConfig, NakConfig
from ..wire import SenderKey
from ..wire.codec import SIGNAL_CODES, SIGNALS, Credit, Frame, Nak
from .credit import CreditGranter
from .fill import FillMonitor, Uniform
from .signals import NEWS, NOT_NEWS, PAUSE

__all__ = ["AckFeedback", "Judge", "NakFeedback", "NoFeedback", "ReceiverFlow"]

#: Asked at ``now``: is a NAK news (NEWS), is the receiver catching up (NOT_NEWS), or has
#: its consumer paused (PAUSE)?
Judge = Callable[[float], int]


class ReceiverFlow(ABC):
    """Receiver-side policy: what a receiver says back, and when."""

    mode: ClassVar[str]

    def __init__(self, stream: str, receiver: str) -> None:
        self.stream = stream
        self.receiver = receiver

    def on_sender(self, sender: SenderKey, next_seq: int, *, now: float,  # noqa: B027
                  waiting: bool = False) -> None:
        """``sender`` was heard (DATA or HELLO), next seq ``next_seq``; ``waiting``: its
        HELLO says it waits for credit."""

    def on_enqueued(self, sender: SenderKey, n: int) -> None:  # noqa: B027
        """``n`` messages of ``sender`` entered the queue."""

    def on_released(self, sender: SenderKey, n: int) -> None:  # noqa: B027
        """``n`` messages of ``sender`` left the queue (consumed or dropped)."""

    def on_sender_gone(self, sender: SenderKey) -> None:  # noqa: B027
        """``sender`` ended its stream."""

    def on_overheard(self, frame: Frame, *, now: float) -> None:  # noqa: B027
        """Another receiver's feedback frame was heard at ``now``."""

    def set_rtt(self, rtt_s: float) -> None:  # noqa: B027
        """The senders advertise a group RTT of ``rtt_s``."""

    @abstractmethod
    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        """The queue counts as ``depth`` messages at ``now`` (``signal``: what set it, a
        ``wire.SIGNALS`` code; ``rate``: what the receiver can take, msgs/s; ``judge``:
        whether a NAK would be news now): feedback frames to send."""

    def next_deadline(self) -> float | None:
        return None

    @abstractmethod
    def snapshot(self) -> dict[str, Any]: ...


class NoFeedback(ReceiverFlow):
    """``none``: receivers say nothing."""

    mode = "none"

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        return []

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode}


class NakFeedback(ReceiverFlow):
    """``nak``: a FillMonitor with suppression by overheard NAKs."""

    mode = "nak"

    def __init__(self, stream: str, receiver: str, capacity_msgs: int,
                 config: NakConfig | None = None, *, rng: Uniform | None = None) -> None:
        super().__init__(stream, receiver)
        self.monitor = FillMonitor(capacity_msgs, config, rng=rng)
        self.by_signal: dict[str, int] = {}  # NAKs sent, by what filled the receiver
        self._said_paused = False
        self.not_news = self.paused = 0  # NAKs kept back: catching up; consumer paused

    def on_overheard(self, frame: Frame, *, now: float) -> None:
        if type(frame) is Nak and frame.stream == self.stream and frame.receiver != self.receiver:
            self.monitor.on_heard(frame.level, now=now)

    def set_rtt(self, rtt_s: float) -> None:
        self.monitor.set_rtt(rtt_s)

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        """A NAK when the fill reaches a level (FillMonitor), unless ``judge`` says the
        receiver is draining its backlog faster than data arrives (not news), or that its
        consumer paused: then one NAK says so (``paused``; the sender may undo the cuts
        this receiver caused) and nothing more until it takes messages again."""
        verdict = NEWS if judge is None else judge(now)
        if verdict != PAUSE:
            self._said_paused = False
        level = self.monitor.update(depth, now=now)
        if level is None:
            return []
        if verdict == NOT_NEWS:
            self.not_news += 1
            self.monitor.kept_back(level)
            return []
        if verdict == PAUSE:
            self.paused += 1
            if self._said_paused:
                self.monitor.kept_back(level)
                return []
            self._said_paused, signal, rate = True, SIGNAL_CODES["paused"], 0.0
        fill = round(self.monitor.fill_pct(depth), 2)
        name = SIGNALS.get(signal, "unknown")
        self.by_signal[name] = self.by_signal.get(name, 0) + 1
        return [Nak(self.stream, self.receiver, level, fill, now, signal, round(rate, 1))]

    def next_deadline(self) -> float | None:
        return self.monitor.next_deadline()

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.monitor.snapshot(),
                "naks_by_signal": dict(sorted(self.by_signal.items())),
                "naks_not_news": self.not_news, "naks_while_paused": self.paused}


class AckFeedback(ReceiverFlow):
    """``ack``: a CreditGranter."""

    mode = "ack"

    def __init__(self, stream: str, receiver: str, capacity_msgs: int,
                 config: AckConfig | None = None) -> None:
        super().__init__(stream, receiver)
        self.granter = CreditGranter(capacity_msgs, config)

    def on_sender(self, sender: SenderKey, next_seq: int, *, now: float,
                  waiting: bool = False) -> None:
        self.granter.on_sender(sender, next_seq, now=now, waiting=waiting)

    def on_enqueued(self, sender: SenderKey, n: int) -> None:
        self.granter.on_enqueued(sender, n)

    def on_released(self, sender: SenderKey, n: int) -> None:
        self.granter.on_released(sender, n)

    def on_sender_gone(self, sender: SenderKey) -> None:
        self.granter.on_sender_gone(sender)

    def poll(self, depth: int, *, now: float, signal: int = 0, rate: float = 0.0,
             judge: Judge | None = None) -> list[Frame]:
        return [Credit(self.stream, self.receiver, sid, epoch, limit, now)
                for (sid, epoch), limit in self.granter.poll(now=now)]

    def next_deadline(self) -> float | None:
        return self.granter.next_deadline()

    def snapshot(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.granter.snapshot()}

from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
