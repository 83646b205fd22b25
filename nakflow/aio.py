"""asyncio drivers of the same protocol cores: ``AsyncSender`` and ``AsyncReceiver``.

Wire format, flow control, repair and accounting are the cores' (``SenderCore``,
``ReceiverCore``), so these interoperate with the threaded classes. Each runs in the
event loop's thread with no threads of its own: a task reads its socket, a loop timer
(``call_at``, re-armed from ``core.get_timer()`` as aioquic's protocol does) runs what
falls due, and plain (shadow) sockets move the bytes (PUB/SUB never block)::

    async with AsyncReceiver("tcp://127.0.0.1:5601", "tcp://127.0.0.1:5602") as rx:
        async for msg in rx.messages(senders=1):
            ...

CURVE is not offered here (its authenticator is a thread): use ``shared_key``.
"""

from __future__ import annotations

from .live.async_receiver import AsyncReceiver
from .live.async_sender import AsyncSender

__all__ = ["AsyncReceiver", "AsyncSender"]
