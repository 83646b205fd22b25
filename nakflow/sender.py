"""The threaded sender's public name: ``nakflow.sender.Sender`` is
``nakflow.live.sender.Sender`` (also ``nakflow.Sender``)."""

from .live.sender import Sender

__all__ = ["Sender"]
