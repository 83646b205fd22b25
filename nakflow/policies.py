"""The flow-control policies by mode name, and their building blocks: the public name
of ``nakflow.policy.registry`` (``register`` adds a mode)."""

from .policy.registry import (
    BACKOFF_LAMBDA,
    MAX_BACKOFF_WINDOWS,
    RECEIVER_POLICIES,
    SENDER_POLICIES,
    WAITING_FRESH_S,
    AckFeedback,
    AckFlow,
    CreditGranter,
    CreditLedger,
    DelayMonitor,
    FillMonitor,
    LossMonitor,
    NakFeedback,
    NakFlow,
    NakRateController,
    NoFeedback,
    NoFlow,
    ReceiverFlow,
    SenderFlow,
    SenderKey,
    TokenBucket,
    backoff_delay,
    is_other_modes_feedback,
    make_receiver_flow,
    make_sender_flow,
    recovery_bound_s,
    register,
)

__all__ = ["BACKOFF_LAMBDA", "MAX_BACKOFF_WINDOWS", "RECEIVER_POLICIES", "SENDER_POLICIES",
           "WAITING_FRESH_S", "AckFeedback", "AckFlow", "CreditGranter", "CreditLedger",
           "DelayMonitor", "FillMonitor", "LossMonitor", "NakFeedback", "NakFlow",
           "NakRateController", "NoFeedback", "NoFlow", "ReceiverFlow", "SenderFlow", "SenderKey",
           "TokenBucket", "backoff_delay", "is_other_modes_feedback", "make_receiver_flow",
           "make_sender_flow", "recovery_bound_s", "register"]
