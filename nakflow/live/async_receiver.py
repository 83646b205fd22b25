"""The asyncio receiver: a driver of ``ReceiverCore`` on ``zmq.asyncio`` (``nakflow.aio``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import zmq
import zmq.asyncio

from transports import SocketOptions, drain, open_receiver_sockets

from ..config import ReceiverConfig, check_callable, with_overrides
from ..core.receiver_core import Message, ReceiverCore
from ..events import Event
from ..wire import SenderKey
from .async_common import IDLE_POLL_S, Wakeup, in_its_loop, no_curve, shadow
from .delivery_queue import DeliveryQueue, check_take
from .lateness import Lateness
from .lifetime import check_context, check_senders, closed_before_done, not_picklable, track
from .outbox import send_all


class AsyncReceiver:
    """The asyncio twin of ``nakflow.Receiver``: ``async for msg in rx.messages()``,
    ``get_many``. Its I/O runs as a task of the running loop (``async with`` or ``start``);
    its ``context`` a ``zmq.asyncio.Context``.
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str],
                 config: ReceiverConfig | None = None, *, overhear: str | Sequence[str] = (),
                 options: SocketOptions | None = None,
                 context: zmq.asyncio.Context | None = None,
                 on_event: Callable[[Event], object] | None = None, **overrides: Any) -> None:
        check_callable(on_event, "on_event")
        check_context(context, aio=True)
        no_curve(options)
        cfg = with_overrides(config, ReceiverConfig, overrides).named(f"r-{uuid.uuid4().hex[:12]}")
        t0 = time.monotonic()
        self._wall_offset = time.time() - t0
        rng = random.Random()
        self.core = ReceiverCore(cfg, now=t0, wall_offset=self._wall_offset, rng=rng,
                                 incarnation=1 + rng.getrandbits(52))
        self._on_event = on_event
        ctx: Any = context or zmq.asyncio.Context.instance()
        sockets = open_receiver_sockets(ctx, data, feedback, overhear, options,
                                        self.core.subscriptions(), cfg.max_frame_bytes)
        self._adata, self.data_endpoints, self._afb, self.feedback_endpoints = sockets[:4]
        self._ahear = sockets[4]
        self._data, self._fb = shadow(self._adata), shadow(self._afb)
        self._hear = None if self._ahear is None else shadow(self._ahear)
        self._queue = DeliveryQueue(cfg.capacity_msgs, cfg.overflow, wake=lambda: None,
                                    wake_every=1)
        self._arrived = Wakeup()  # a message queued, or the queue finished
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it lives in
        self.error: BaseException | None = None
        track(self, ("start", "get", "get_many", "__aiter__", "messages", "done",
                     "live_streams", "wait_for_ends"))
        # made in a running loop, it listens from now on, as a threaded Receiver does: one
        # not yet started answered no HELLO, and its senders' wait ran out before the
        # first get started it
        with contextlib.suppress(RuntimeError):  # no running loop: ``async with``, a get
            self.start()

    __reduce_ex__ = not_picklable  # sockets and a task: docs/spark.md
    receiver_id = property(lambda self: self.core.receiver_id)

    def start(self) -> None:
        """Start the I/O task on the running loop (made in one, it starts at once; else
        ``async with`` and the first get do this)."""
        self._loop = in_its_loop(self._loop, f"AsyncReceiver {self.receiver_id}")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._io())

    async def _io(self) -> None:
        core, queue = self.core, self._queue
        pollers = {}
        for with_data in (True, False):
            poller = pollers[with_data] = zmq.asyncio.Poller()
            for sock in (self._adata if with_data else None, self._ahear):
                if sock is not None:
                    poller.register(sock, zmq.POLLIN)
        lateness = Lateness()
        try:
            while True:
                now = time.monotonic()
                timer = core.get_timer()
                wait = IDLE_POLL_S if timer is None else timer - now
                read = core.wants_data(queue.full) and not core.deliveries()
                poll_ms = lateness.poll_ms(wait, now)
                lateness.wait_started(now, poll_ms / 1000)
                events = await pollers[read].poll(poll_ms)
                ready = {sock for sock, _ in events}
                now = time.monotonic()
                core.late(lateness.woke(now), now)
                if self._adata in ready:
                    lateness.data_read(now)
                    woke = now
                    bufs = drain(self._data, core.read_chunk)
                    for buf in bufs:
                        now = time.monotonic()  # a frame's age at the time it is read
                        core.reading_for(now - woke)
                        core.receive_data(buf, now)
                    core.io_behind(len(bufs) >= core.read_chunk, now)
                if self._hear is not None and self._ahear in ready:
                    for buf in drain(self._hear, 1_000):
                        core.receive_overheard(buf, now)
                self._step(now)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced in snapshot()["error"]
            self.error = exc
            self._arrived.set()
            raise
        finally:
            lateness.close()

    def _step(self, now: float) -> None:
        core = self.core
        core.exchange(self._queue, now)
        send_all(core, self._fb)
        while (event := core.next_event()) is not None:
            if self._on_event is not None:
                self._on_event(event)
        if len(self._queue) or self._queue.finished():
            self._arrived.set()

    async def get(self, timeout: float | None = None) -> Message | None:
        """Next message; None on timeout, or once closed and drained (``Receiver.get``)."""
        out = await self.get_many(1, timeout)
        return out[0] if out else None

    async def get_many(self, max_n: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_n`` messages; waits up to ``timeout`` for the first; [] on timeout
        or once closed and drained."""
        check_take(max_n, timeout)
        self.start()
        while not len(self._queue):
            if self._queue.closed or self.error is not None:
                return []
            self._arrived.clear()
            if not await self._arrived.wait(timeout):
                return []
        msgs = self._queue.take(max_n, 0)
        self._step(time.monotonic())  # room freed: credit and fill go out now
        return msgs

    async def __aiter__(self) -> AsyncIterator[Message]:
        """Messages until the receiver is closed and drained (a service's loop)."""
        while batch := await self.get_many(256):
            for msg in batch:
                yield msg

    async def messages(self, senders: int = 1,
                       timeout: float | None = 30.0) -> AsyncIterator[Message]:
        """As ``Receiver.messages``: ``senders`` senders (ids) until they are over here
        and no other stream is still going; TimeoutError after ``timeout`` s."""
        check_senders(senders, timeout)
        end = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            batch = await self.get_many(256, timeout=0.05)
            for msg in batch:
                yield msg
            if not batch and self.done(senders) and not self.live_streams():
                return
            if not batch and self._queue.closed and not len(self._queue):
                raise closed_before_done(self.receiver_id, self._queue.finished(), senders,
                                         self.error)
            if time.monotonic() >= end:
                raise TimeoutError(f"{self._queue.finished()} of {senders} senders finished "
                                   f"within {timeout} s")

    def live_streams(self) -> list[SenderKey]:
        """As ``Receiver.live_streams``: the streams still going."""
        return self.core.live_streams()

    def done(self, senders: int) -> bool:
        """``senders`` finished, no repair awaited, the queue empty."""
        return (self._queue.finished() >= senders and not self.core.tracker.with_gaps
                and not len(self._queue) and not self.core.deliveries())

    def ends(self) -> dict[SenderKey, int]:
        return self._queue.ends()

    async def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        """Wait until END arrived from ``n`` streams, (sender, epoch) pairs (messages may
        still be queued)."""
        self.start()
        end = math.inf if timeout is None else time.monotonic() + timeout
        while len(self.ends()) < n:
            if time.monotonic() >= end or self.error is not None:
                return False
            self._arrived.clear()
            await self._arrived.wait(min(0.1, end - time.monotonic()))
        return True

    async def close(self) -> None:
        """Stop the I/O task, send BYE, close the sockets. Queued messages stay available
        to ``get_many`` and are counted as ``queued``. It may run in a loop other than
        the one it lived in (which ``asyncio.run`` ended)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if not self._queue.closed:
            self.core.close(time.monotonic())
            with contextlib.suppress(zmq.ZMQError):
                send_all(self.core, self._fb)
            for sock in (self._adata, self._afb, self._ahear):
                if sock is not None:
                    sock.close(200)
            self._queue.finish()
            self._arrived.set()

    async def __aenter__(self) -> AsyncReceiver:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def snapshot(self) -> dict[str, Any]:
        snap = self.core.snapshot(time.monotonic())
        first = self.core.first_data_at
        snap.update(self._queue.snapshot(None if first is None else first + self._wall_offset,
                                         len(self.core.deliveries())))
        snap.update(handler_errors=0, error=None if self.error is None else repr(self.error))
        return snap
