"""A sender's wait for its receivers (sans-I/O): when it says HELLO while it waits, which
receivers answered it in another mode, and why a wait cannot succeed. ``SenderCore``
owns one, asks it when HELLO is due and sends the frames.
"""

from __future__ import annotations

import math

from ..errors import KeyMismatch, PeerMismatch
from .roster import remember

#: A waiting sender gives up on a receiver that answered in another mode once this long
#: passed without enough receivers of its own mode answering, s: real receivers answer
#: each HELLO (one every 0.1 s at most while waiting) within milliseconds.
MISMATCH_GRACE_S = 0.5

#: A sender that waits for receivers says HELLO again this soon, then twice as long each
#: time up to ``hello_interval_s``: its first HELLO often leaves before ZeroMQ has
#: connected (a PUB drops what no subscriber asked for yet), and waiting a whole interval
#: for the second held a task of ``nakflow eval`` 0.10-0.12 s before its first message,
#: where one answered within 2-18 ms of this schedule.
HELLO_FIRST_GAP_S = 0.002


class ReceiverWait:
    """HELLO's schedule (``due_at``, ``said_hello``) while the driver waits for
    ``wanted`` receivers or the sender for credit, and the receivers that answered in
    another mode than ``mode`` (``ready``, ``error``)."""

    def __init__(self, mode: str, hello_interval_s: float, now: float) -> None:
        self.mode, self.hello_interval_s = mode, hello_interval_s
        self.wanted = 0  # receivers the driver waits for (HELLO meanwhile)
        self.due_at = now  # the next HELLO
        self._gap = hello_interval_s  # until the one after it (see HELLO_FIRST_GAP_S)
        #: the first receiver that answered this sender's HELLO in another mode, and when
        self.answer_mismatch: str | None = None
        self._mismatch_at = math.inf
        self._other_mode: dict[str, None] = {}  # receivers that answered in another mode

    def want(self, n: int, now: float) -> bool:
        """The driver waits for ``n`` receivers (0: done): True if HELLO is due now."""
        self.wanted = n
        self._gap = HELLO_FIRST_GAP_S if n else self.hello_interval_s
        if n:
            self.due_at = now
        return bool(n)

    def hurry(self, now: float) -> None:
        """HELLO is due now (a sender waiting for credit: new receivers must learn of it)."""
        self.due_at = min(self.due_at, now)

    def said_hello(self, now: float) -> None:
        gap = min(self._gap, self.hello_interval_s)
        self._gap = 2 * gap
        self.due_at = now + gap

    def on_hello(self, node: str, mode: str, now: float, *, echoes_us: bool) -> None:
        """A receiver's HELLO in ``mode``, an answer to this sender's (``echoes_us``)."""
        if mode == self.mode:
            self._other_mode.pop(node, None)
            return
        if not echoes_us:  # not an answer to us: it may be a stray frame
            return
        remember(self._other_mode, node)
        if self.answer_mismatch is None:
            self.answer_mismatch = (f"receiver {node} runs mode {mode!r}, this sender runs "
                                    f"{self.mode!r}")
            self._mismatch_at = now

    def ready(self, answered: dict[str, None]) -> dict[str, None]:
        """Of the receivers that answered, those in this sender's mode."""
        other = self._other_mode
        return {r: None for r in answered if r not in other} if other else answered

    def error(self, now: float, *, timed_out: bool = False,
              key_mismatch: str | None = None) -> PeerMismatch | None:
        """Why waiting for receivers cannot succeed (None: it still can; the driver asks
        only while too few are ready, and raises it). A receiver that answered this
        sender's HELLO in another mode (``PeerMismatch``): once MISMATCH_GRACE_S passed
        without enough receivers of this mode answering (no wait mends it; and on an open
        channel a forged answer cannot stop a sender whose real receivers answer within
        the grace). Frames refused for their shared key (``key_mismatch``, what was heard:
        ``KeyMismatch``): only once the wait ran out (``timed_out``), as the likely cause;
        a receiver with another key cannot read the HELLO to answer it, and such frames
        may as well come from a forger, who must not stop a sender."""
        if self.answer_mismatch is not None and (
                timed_out or now - self._mismatch_at >= MISMATCH_GRACE_S):
            return PeerMismatch(f"{self.answer_mismatch} (check every side's --mode)")
        if timed_out and key_mismatch is not None:
            return KeyMismatch(f"no receiver answered, and {key_mismatch} were heard on the "
                               "feedback channel: a receiver with another --shared-key? "
                               "(check every side's --shared-key)")
        return None
