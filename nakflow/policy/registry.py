"""Flow-control policies, chosen by one string: ``nak``, ``ack`` or ``none``.

A sender-side policy (``SenderFlow``, ``policy.sender_flows``; ``nak``'s in
``policy.nak_flow``) answers "how many of these n messages may go now, and if not all,
how long until asking again"; a receiver-side policy (``ReceiverFlow``,
``policy.receiver_flows``) turns what the receiver sees into the feedback frames it
should send. Each mode registers its pair under its name (``SENDER_POLICIES``,
``RECEIVER_POLICIES``, ``register``), as aioquic registers congestion controllers; the
protocol cores build them with ``make_sender_flow`` / ``make_receiver_flow`` and talk
to them only through the base classes. A documented module: simulators drive the
policies directly, and import them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..config import AckConfig, NakConfig, check_mode
from ..wire import SenderKey
from .bucket import TokenBucket
from .credit import WAITING_FRESH_S, CreditGranter, CreditLedger
from .curve import recovery_bound_s
from .fill import (
    BACKOFF_LAMBDA,
    MAX_BACKOFF_WINDOWS,
    DelayMonitor,
    FillMonitor,
    LossMonitor,
    Uniform,
    backoff_delay,
)
from .mode_tables import RECEIVER_POLICIES, SENDER_POLICIES
from .nak_flow import NakFlow
from .rate import NakRateController
from .receiver_flows import AckFeedback, NakFeedback, NoFeedback, ReceiverFlow
from .sender_flows import AckFlow, NoFlow, SenderFlow, is_other_modes_feedback

#: The building blocks, for simulators that drive them directly.
__all__ = ["BACKOFF_LAMBDA", "MAX_BACKOFF_WINDOWS", "RECEIVER_POLICIES", "SENDER_POLICIES",
           "WAITING_FRESH_S", "AckFeedback", "AckFlow", "CreditGranter", "CreditLedger",
           "DelayMonitor", "FillMonitor", "LossMonitor", "NakFeedback", "NakFlow",
           "NakRateController", "NoFeedback", "NoFlow", "ReceiverFlow", "SenderFlow",
           "SenderKey", "TokenBucket", "backoff_delay", "is_other_modes_feedback",
           "make_receiver_flow", "make_sender_flow", "recovery_bound_s", "register"]


def _nak_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
                ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    cfg = nak or NakConfig()
    if max_rate_msgs is not None:  # the cap is nak's ceiling
        cfg = replace(cfg, max_rate_msgs=max_rate_msgs,
                      min_rate_msgs=min(cfg.min_rate_msgs, max_rate_msgs))
    return NakFlow(stream, cfg)


def _ack_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
                ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    return AckFlow(stream, sender, epoch, ack, next_seq=next_seq, max_rate_msgs=max_rate_msgs)


def _no_sender(*, stream: str, sender: str, epoch: int, nak: NakConfig | None,
               ack: AckConfig | None, next_seq: int, max_rate_msgs: float | None) -> SenderFlow:
    return NoFlow(max_rate_msgs)


SenderFactory = Callable[..., SenderFlow]
ReceiverFactory = Callable[..., ReceiverFlow]
SENDER_POLICIES.update({"nak": _nak_sender, "ack": _ack_sender, "none": _no_sender})


def make_sender_flow(mode: str, *, stream: str, sender: str, epoch: int,
                     nak: NakConfig | None = None, ack: AckConfig | None = None,
                     next_seq: int = 0, max_rate_msgs: float | None = None) -> SenderFlow:
    """Build the sender-side policy registered under ``mode``.

    ``max_rate_msgs`` caps every mode: it is ``nak``'s ceiling, and a fixed rate for
    ``none`` and ``ack``.
    """
    return SENDER_POLICIES[check_mode(mode)](stream=stream, sender=sender, epoch=epoch, nak=nak,
                                             ack=ack, next_seq=next_seq,
                                             max_rate_msgs=max_rate_msgs)


def _nak_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                  nak: NakConfig | None, ack: AckConfig | None,
                  rng: Uniform | None) -> ReceiverFlow:
    return NakFeedback(stream, receiver, capacity_msgs, nak, rng=rng)


def _ack_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                  nak: NakConfig | None, ack: AckConfig | None,
                  rng: Uniform | None) -> ReceiverFlow:
    return AckFeedback(stream, receiver, capacity_msgs, ack)


def _no_receiver(*, stream: str, receiver: str, capacity_msgs: int,
                 nak: NakConfig | None, ack: AckConfig | None,
                 rng: Uniform | None) -> ReceiverFlow:
    return NoFeedback(stream, receiver)


RECEIVER_POLICIES.update({"nak": _nak_receiver, "ack": _ack_receiver, "none": _no_receiver})


def make_receiver_flow(mode: str, *, stream: str, receiver: str, capacity_msgs: int,
                       nak: NakConfig | None = None, ack: AckConfig | None = None,
                       rng: Uniform | None = None) -> ReceiverFlow:
    """Build the receiver-side policy registered under ``mode`` (``rng``: the NAK
    hold-off's draws)."""
    return RECEIVER_POLICIES[check_mode(mode)](stream=stream, receiver=receiver,
                                               capacity_msgs=capacity_msgs, nak=nak, ack=ack,
                                               rng=rng)


def register(mode: str, sender: SenderFactory, receiver: ReceiverFactory) -> None:
    """Put a policy pair under ``mode`` (one of ``MODES``: the wire carries the name)."""
    SENDER_POLICIES[check_mode(mode)] = sender
    RECEIVER_POLICIES[mode] = receiver
