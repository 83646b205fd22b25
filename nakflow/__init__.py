"""nakflow: NAK-based rate control for 1:N (multicast) messaging.

The names exported here are the sans-I/O core (no sockets, threads or clock
calls: time comes in as ``now``) and the live runtime built on it.
"""

from typing import TYPE_CHECKING

from ._auth import AuthError, FrameAuth, SharedKey
from ._backpressure import BackpressureEpisodes
from ._bucket import TokenBucket
from ._codec import (
    DEFAULT_MAX_FRAME_BYTES,
    VERSION,
    Bye,
    Credit,
    Data,
    End,
    Frame,
    Gone,
    Hello,
    Nak,
    RData,
    Repair,
    decode,
    encode,
    encode_data,
)
from ._config import MODES, AckConfig, NakConfig, RepairConfig, check_mode
from ._credit import CreditGranter, CreditLedger, SenderKey
from ._errors import ConfigError, CreditViolation, NakflowError, ProtocolError
from ._fill import FillMonitor
from ._history import SendHistory
from ._rate import NakRateController
from ._receiver_core import Message, ReceiverCore
from ._repair import RepairRequester
from ._sender_core import SenderCore
from .policies import (
    AckFeedback,
    AckFlow,
    NakFeedback,
    NakFlow,
    NoFeedback,
    NoFlow,
    ReceiverFlow,
    SenderFlow,
    make_receiver_flow,
    make_sender_flow,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them on first use
    from .aio import AsyncReceiver, AsyncSender
    from .receiver import Receiver
    from .sender import Sender

#: The live runtime, imported on first use so that ``import nakflow`` (the sans-I/O core)
#: needs no ZeroMQ: name -> module.
_LAZY = {"Sender": "sender", "Receiver": "receiver", "AsyncSender": "aio",
         "AsyncReceiver": "aio"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nakflow' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"nakflow.{module}"), name)
    globals()[name] = value
    return value

__all__ = [  # noqa: RUF022 (the runtime first, then the core, each sorted)
    "AsyncReceiver",
    "AsyncSender",
    "Receiver",
    "Sender",
    "DEFAULT_MAX_FRAME_BYTES",
    "MODES",
    "VERSION",
    "AckConfig",
    "AckFeedback",
    "AckFlow",
    "AuthError",
    "BackpressureEpisodes",
    "Bye",
    "ConfigError",
    "Credit",
    "CreditGranter",
    "CreditLedger",
    "CreditViolation",
    "Data",
    "End",
    "FillMonitor",
    "Frame",
    "FrameAuth",
    "Gone",
    "Hello",
    "Message",
    "Nak",
    "NakConfig",
    "NakFeedback",
    "NakFlow",
    "NakRateController",
    "NakflowError",
    "NoFeedback",
    "NoFlow",
    "ProtocolError",
    "RData",
    "ReceiverCore",
    "ReceiverFlow",
    "Repair",
    "RepairConfig",
    "RepairRequester",
    "SendHistory",
    "SenderCore",
    "SenderFlow",
    "SenderKey",
    "SharedKey",
    "TokenBucket",
    "__version__",
    "check_mode",
    "decode",
    "encode",
    "encode_data",
    "make_receiver_flow",
    "make_sender_flow",
]
