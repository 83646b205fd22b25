"""nakflow: NAK-based rate control for 1:N (multicast) messaging over ZeroMQ.

What a user needs is here (``__all__``): the live senders and receivers (threaded and
asyncio), their configuration, the sans-I/O protocol cores for driving the protocol from
your own loop or a simulator, the queue the receivers use, and the errors. Documented
modules go further: ``nakflow.events`` (what the cores report), ``nakflow.policies``
(the flow-control policies by mode name, and their building blocks), ``nakflow.wire``
(frames and codec), ``nakflow.report`` (one-line verdicts), ``nakflow.testing`` (local
receiver and sender processes), ``nakflow.arrow`` (Arrow messages), ``nakflow.keyfile``,
``nakflow.live.prometheus``.

The package is layered, each layer a sub-package that imports only those below it
(``make lint`` checks it with import-linter): ``wire`` (frames, codec, authentication),
``config``, ``policy`` (NAK rate control, fill and signals, ACK credit, the registry),
``core`` (the sans-I/O ``SenderCore`` and ``ReceiverCore`` and their parts), ``live``
(the threaded and asyncio drivers, the delivery queue, sinks, metrics) and ``cli``.
``nakflow.sender``, ``nakflow.receiver`` and ``nakflow.policies`` are the public
names of ``live.sender``, ``live.receiver`` and ``policy.registry``.
``import nakflow`` needs no ZeroMQ: the live classes are imported on first use.
"""

from typing import TYPE_CHECKING

from .config import (
    MODES,
    OVERFLOW_POLICIES,
    AckConfig,
    NakConfig,
    ReceiverConfig,
    RepairConfig,
    SenderConfig,
    check_mode,
)
from .core.receiver_core import Message, ReceiverCore
from .core.sender_core import SenderCore
from .errors import (
    ConfigError,
    CreditViolation,
    IncompleteDelivery,
    KeyMismatch,
    LocalProtocolError,
    NakflowError,
    PeerMismatch,
    ProtocolError,
)
from .live.delivery_queue import DeliveryQueue
from .wire.auth import AuthError, SharedKey

__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them on first use
    from .aio import AsyncReceiver, AsyncSender
    from .live.receiver import Receiver
    from .live.sender import Sender

#: The live runtime, imported on first use so that ``import nakflow`` (the sans-I/O core)
#: needs no ZeroMQ: name -> module.
_LAZY = {"Sender": "live.sender", "Receiver": "live.receiver", "AsyncSender": "aio",
         "AsyncReceiver": "aio"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nakflow' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"nakflow.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MODES",
    "OVERFLOW_POLICIES",
    "AckConfig",
    "AsyncReceiver",
    "AsyncSender",
    "AuthError",
    "ConfigError",
    "CreditViolation",
    "DeliveryQueue",
    "IncompleteDelivery",
    "KeyMismatch",
    "LocalProtocolError",
    "Message",
    "NakConfig",
    "NakflowError",
    "PeerMismatch",
    "ProtocolError",
    "Receiver",
    "ReceiverConfig",
    "ReceiverCore",
    "RepairConfig",
    "Sender",
    "SenderConfig",
    "SenderCore",
    "SharedKey",
    "__version__",
    "check_mode",
]
