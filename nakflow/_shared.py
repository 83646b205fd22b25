"""Process-wide state that senders share (kept out of the compiled hot modules, whose
module-level objects would exist twice: once in the source module, once in its twin)."""

from __future__ import annotations

from ._rate import RateMemory

#: Where ``Sender(remember_rate=True)`` senders leave and find their path's rate.
RATE_MEMORY = RateMemory()
