"""What both asyncio drivers share: plain (shadow) sockets, no CURVE, the loop timer, and
the wake-up their waits await."""

from __future__ import annotations

import asyncio
import math
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


class Wakeup:
    """A flag the I/O side sets (feedback handled, a message queued) and a send or a get
    awaits with a timeout, without ever losing the waiter's cancellation.

    It was an ``asyncio.Event`` awaited under ``asyncio.wait_for``, whose Python 3.11
    implementation returns the inner result when the cancellation comes after the event
    was set but before the waiter resumed (CPython gh-86296, fixed in 3.12 by
    ``asyncio.timeout``; ``tests/test_aio.py`` shows the three interleavings): an
    ``AsyncSender.send_batch`` cancelled by ``asyncio.wait_for`` as a receipt came went
    on waiting for credit that never came, and the caller's ``wait_for`` waited for it for
    ever (the pure-Python test run hung past its 250 s guard in the suite, 2026-12-07).
    Here the waiter awaits a plain future: a cancellation that finds it already done is
    thrown into the waiter at its next step all the same."""

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[bool]] = []

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(True)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout: float | None = None) -> bool:
        """True once set, False after ``timeout`` s (None or inf: no limit; <= 0: a look
        after one turn of the loop). A cancellation always raises CancelledError."""
        if self._set:
            return True
        if timeout is not None and timeout <= 0:
            await asyncio.sleep(0)  # as before: a wait of 0 lets the loop turn once
            return self._set
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(fut)
        timer = (None if timeout is None or math.isinf(timeout)
                 else loop.call_later(timeout, _expire, fut))
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
