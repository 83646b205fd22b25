"""The threaded receiver's public name: ``nakflow.receiver.Receiver`` is
``nakflow.live.receiver.Receiver`` (also ``nakflow.Receiver``)."""

from .live.receiver import OVERFLOW_POLICIES, Message, Receiver

__all__ = ["OVERFLOW_POLICIES", "Message", "Receiver"]
