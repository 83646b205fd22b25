"""The tables of modes, mode name -> how to build its sender-side and receiver-side
policy (``policy.registry`` fills them with ``nak``, ``ack`` and ``none``; ``register``
replaces a pair). A plain module, never compiled: a compiled twin (``nakflow._speedups``)
runs its module's body again, and a table defined in a compiled module (``policy.registry``
was one) would be two tables, the one ``register`` and ``make_sender_flow`` use and the
one ``nakflow.policies`` shows. Here there is one, whichever runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .registry import ReceiverFactory, SenderFactory

__all__ = ["RECEIVER_POLICIES", "SENDER_POLICIES"]

#: mode name -> the factory of its sender-side policy (a ``SenderFlow``).
SENDER_POLICIES: dict[str, SenderFactory] = {}
#: mode name -> the factory of its receiver-side policy (a ``ReceiverFlow``).
RECEIVER_POLICIES: dict[str, ReceiverFactory] = {}
