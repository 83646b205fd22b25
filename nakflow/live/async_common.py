"""What both asyncio drivers share: plain (shadow) sockets, no CURVE, the loop timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import zmq

from transports import SocketOptions, check_options

from ..errors import ConfigError, LocalProtocolError

IDLE_POLL_S = 0.1


def shadow(sock: Any) -> zmq.Socket[bytes]:
    """A plain socket on the same ZeroMQ socket, for non-blocking reads and sends."""
    return zmq.Socket.shadow(sock.underlying)


def no_curve(options: SocketOptions | None) -> None:
    check_options(options)
    if options is not None and options.curve is not None:
        raise ConfigError("CURVE needs the threaded Sender/Receiver; asyncio classes take "
                          "shared_key for authentication")


def in_its_loop(bound: asyncio.AbstractEventLoop | None,
                what: str) -> asyncio.AbstractEventLoop | None:
    """The running loop (``bound`` outside one), which must be ``bound``, the loop ``what``
    was first used in, if it has one: its I/O task, timer and events belong to that loop,
    and ``asyncio.run`` ends it with the task cancelled. Used in the next ``asyncio.run``
    it failed deep in asyncio (``Event ... is bound to a different event loop``). Raises
    LocalProtocolError."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return bound  # outside a loop (try_send, flush): it binds nothing
    if bound is not None and loop is not bound:
        raise LocalProtocolError(
            f"{what} belongs to the event loop it was first used in, and this is another "
            "one (asyncio.run starts a new loop each call): make, use and close it in one "
            "loop, such as inside one asyncio.run")
    return loop


class LoopTimer:
    """The core's timer as one ``call_at`` handle of the running loop (aioquic's shape)."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None

    def arm(self, at: float | None) -> None:
        if self._handle is not None and self._at != at:
            self._handle.cancel()
            self._handle = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a call outside one): the next call in a loop arms it
        if self._handle is None and at is not None:
            self._at, self._handle = at, loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._handle = None
        self._fire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
