"""The wire protocol, documented: nakflow's frames and their codec (``nakflow.wire.codec``).

For tools that speak to nakflow nodes or look at their traffic (the chaos run, fuzzers,
a packet dissector): every frame is a msgpack array ``[VERSION, type, *fields]``;
``decode`` returns one of the frame classes below or raises ``ProtocolError``.
"""

from ..errors import ProtocolError
from .auth import FrameAuth
from .codec import (
    DEFAULT_MAX_FRAME_BYTES,
    RECEIPT_REASONS,
    SIGNALS,
    TARGET_MAGIC,
    VERSION,
    Bye,
    Credit,
    Data,
    End,
    Frame,
    Gone,
    Hello,
    Nak,
    Progress,
    RData,
    Receipt,
    Repair,
    decode,
    decode_data,
    encode,
    encode_data,
    target_prefix,
    untarget,
)

SenderKey = tuple[str, int]
"""A sender's stream as its frames name it: (sender id, epoch). Receivers key their
streams, credits, reports and endings by it."""

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "RECEIPT_REASONS", "SIGNALS", "TARGET_MAGIC", "VERSION",
           "Bye", "Credit", "Data", "End", "Frame", "FrameAuth", "Gone", "Hello", "Nak",
           "Progress", "ProtocolError", "RData", "Receipt", "Repair", "SenderKey", "decode",
           "decode_data", "encode", "encode_data", "target_prefix", "untarget"]
