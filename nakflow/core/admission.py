"""Admission, sans-I/O: permission to send taken from the mode's policy ahead, in
allowances, and the time spent waiting for it (all of it, and for credit)."""

from __future__ import annotations

import math

from ..policy.registry import SenderFlow

#: Permission is taken for up to this many messages at once and spent without asking the
#: policy again for ALLOWANCE_S; what is left then is given back.
ALLOWANCE_MSGS = 256
ALLOWANCE_S = 0.001


class Admission:
    """``allow`` messages may go until ``until`` without asking ``policy`` again."""

    def __init__(self, policy: SenderFlow) -> None:
        self.policy = policy
        self.allow, self.until = 0, 0.0
        self.blocked_since: float | None = None
        self.on_credit = False  # waiting for credit (not for the rate)
        self.blocked_s = self.credit_stalled_s = 0.0
        self.refused = 0  # try_offer said "not now"

    def take(self, now: float) -> int:
        """Take an allowance at ``now``; how many it holds (0: none may go now)."""
        self.give_back()
        k = self.policy.admit_up_to(ALLOWANCE_MSGS, now=now)
        if k:
            self.allow, self.until = k, now + ALLOWANCE_S
        return k

    def give_back(self) -> None:
        if self.allow:
            self.policy.refund(self.allow)
            self.allow = 0

    def block(self, now: float, wait: float) -> bool:
        """Admission said wait ``wait`` s; True if this began a wait for credit."""
        if self.blocked_since is None:
            self.blocked_since = now
        if math.isinf(wait) and not self.on_credit:
            self.on_credit = True
            return True
        return False

    def unblock(self, now: float) -> None:
        """Admitted (or the driver gave up): count the time waited."""
        since = self.blocked_since
        if since is not None:
            self.blocked_s += now - since
            if self.on_credit:
                self.credit_stalled_s += now - since
            self.blocked_since, self.on_credit = None, False


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
