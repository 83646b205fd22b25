"""Exception types. Remote (wire) errors and local (usage) errors are kept apart."""

from __future__ import annotations


class NakflowError(Exception):
    """Base class of every error nakflow raises on purpose."""


class ProtocolError(NakflowError, ValueError):
    """Bytes from the wire are not a valid nakflow frame.

    Decoding any input either returns a frame or raises this; nothing else.
    """


class ConfigError(NakflowError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CreditViolation(NakflowError, RuntimeError):
    """A caller tried to send more than the slowest receiver granted (ACK mode)."""


class LocalProtocolError(NakflowError, RuntimeError):
    """This side was asked to do something its protocol state does not allow (data after
    END, anything after close): a bug in the caller, as h11's LocalProtocolError."""


class IncompleteDelivery(NakflowError, RuntimeError):
    """A stream ended, but a receiver that should hold it does not: its receipt says what
    it lacks, or it never confirmed (the exact close: ``Sender.snapshot()["at_close"]``).
    A Spark task raises it so that Spark retries the task (commit after send)."""

    def __init__(self, message: str, at_close: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        #: per receiver, what the sender's close learnt (``SenderCore.tally.report()``)
        self.at_close = at_close or []


class PeerMismatch(NakflowError, RuntimeError):
    """A peer that answered runs another mode, or seals its frames with another shared
    key (or with none where this node has one, or one where it has none): the stream
    cannot work until every side is configured alike. A sender waiting for receivers
    raises it as soon as such a peer answers."""


class KeyMismatch(PeerMismatch, TimeoutError):
    """A sender's wait for receivers ran out, and frames sealed with another shared key (or
    with none, where the sender has one) were heard: a receiver with another key cannot
    read the sender's HELLO to answer it. A ``TimeoutError`` too (nobody answered)."""
