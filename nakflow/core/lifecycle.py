"""A sender's lifecycle as a table (h11's ``_state.py``): a step the table has no entry for
is a LocalProtocolError, so "data after END" fails because the table says so.

    open --data--> open --end--> ended --close--> closing --done--> closed
      \\                            \\--end (again)--> ended
       \\--abort--> closed      ended/closing --abort--> closed
"""

from __future__ import annotations

from ..errors import LocalProtocolError

OPEN, ENDED, CLOSING, CLOSED = "open", "ended", "closing", "closed"

#: (state, step) -> next state.
TRANSITIONS: dict[tuple[str, str], str] = {
    (OPEN, "data"): OPEN,
    (OPEN, "end"): ENDED,
    (OPEN, "abort"): CLOSED,
    (ENDED, "end"): ENDED,  # END again: idempotent, and a lossy transport may lose one copy
    (ENDED, "close"): CLOSING,
    (ENDED, "abort"): CLOSED,
    (CLOSING, "close"): CLOSING,
    (CLOSING, "done"): CLOSED,
    (CLOSING, "abort"): CLOSED,
    (CLOSED, "close"): CLOSED,
    (CLOSED, "abort"): CLOSED,
}

_WHY = {(ENDED, "data"): "data after END: the stream was ended (flush/close)",
        (CLOSING, "data"): "data after close", (CLOSED, "data"): "data after close",
        (CLOSING, "end"): "END after close", (CLOSED, "end"): "END after close"}


class Lifecycle:
    """The sender's state; ``step`` moves it or raises LocalProtocolError."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = OPEN

    def step(self, event: str) -> str:
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise LocalProtocolError(_WHY.get((self.state, event),
                                              f"{event!r} is not allowed in state {self.state!r}"))
        self.state = nxt
        return nxt
