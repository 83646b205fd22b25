"""asyncio Sender and Receiver: the same protocol cores, driven by one event loop.

``AsyncSender`` and ``AsyncReceiver`` drive the sans-I/O ``SenderCore`` and
``ReceiverCore`` (the objects under the threaded ``Sender``/``Receiver``), so wire
format, flow control, repair and accounting are identical; they start no threads.
ZeroMQ readiness comes from ``zmq.asyncio``'s poller; the bytes move through plain
(shadow) sockets, which never block on PUB/SUB::

    async with AsyncReceiver("tcp://127.0.0.1:5601", "tcp://127.0.0.1:5602") as rx:
        async for msg in rx:
            ...

    async with AsyncSender("tcp://127.0.0.1:5601", "tcp://127.0.0.1:5602") as tx:
        await tx.wait_for_receivers(1)
        await tx.send(b"payload")       # waits (without blocking the loop) as the
                                        # rate limit or credit says; try_send() never does

CURVE is not offered here (its authenticator is a thread): use ``shared_key`` or the
threaded classes. The receiver's overflow policy is ``drop-newest``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import zmq
import zmq.asyncio

from transports import SocketOptions, drain, open_pub, open_sub, parse_endpoints

from ._auth import SharedKey
from ._backpressure import BackpressureEpisodes
from ._batch import FRAME_BYTES, FRAME_MSGS, LINGER_S, FrameBatcher
from ._codec import DEFAULT_MAX_FRAME_BYTES
from ._config import AckConfig, NakConfig, RepairConfig, check_mode
from ._delivery_queue import DeliveryQueue
from ._errors import ConfigError
from ._receiver_core import Key, Message, ReceiverCore
from ._sender_core import SenderCore
from ._seqtrack import MAX_STREAMS
from ._timeline import Timeline
from .receiver import IDLE_POLL_S, open_receiver_sockets, receiver_snapshot
from .sender import FEEDBACK_CHECK_S, REPAIR_POLL_S, sender_snapshot

__all__ = ["AsyncReceiver", "AsyncSender"]


def _shadow(sock: Any) -> zmq.Socket[bytes]:
    """A plain socket on the same ZeroMQ socket, for non-blocking reads and sends."""
    return zmq.Socket.shadow(sock.underlying)


def _no_curve(options: SocketOptions | None) -> None:
    if options is not None and options.curve is not None:
        raise ConfigError("CURVE needs the threaded Sender/Receiver; asyncio classes take "
                          "shared_key for authentication")


async def _readable(poller: zmq.asyncio.Poller, timeout_s: float) -> set[Any]:
    events = await poller.poll(max(0, math.ceil(timeout_s * 1000)))
    return {sock for sock, _ev in events}


class AsyncSender:
    """The asyncio twin of ``nakflow.Sender`` (same arguments, but no CURVE).

    Natural batching as the Sender's (``linger_s``, ``frame_msgs``, ``frame_bytes``):
    admitted messages join the frame being built, which leaves at a bound, when its
    linger is over (a timer of the running loop; a call in between also sends it), before
    any wait, and on ``flush``/``close``. ``linger_s=0``: one message a frame.
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str], *,
                 mode: str = "nak", stream: str = "default", sender_id: str | None = None,
                 epoch: int | None = None, nak: NakConfig | None = None,
                 ack: AckConfig | None = None, options: SocketOptions | None = None,
                 context: zmq.asyncio.Context | None = None, hello_interval_s: float = 0.1,
                 max_rate_msgs: float | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 shared_key: SharedKey | None = None,
                 repair: RepairConfig | None = None, linger_s: float = LINGER_S,
                 frame_msgs: int = FRAME_MSGS, frame_bytes: int = FRAME_BYTES) -> None:
        _no_curve(options)
        self.mode, self.stream = check_mode(mode), stream
        self.sender_id = sender_id or f"s-{uuid.uuid4().hex[:12]}"
        self.epoch = int(time.time() * 1000) if epoch is None else int(epoch)
        self.hello_interval_s = hello_interval_s
        self._t0 = time.monotonic()
        self.core = SenderCore(mode=self.mode, stream=stream, sender_id=self.sender_id,
                               epoch=self.epoch, nak=nak, ack=ack, repair=repair,
                               max_rate_msgs=max_rate_msgs, shared_key=shared_key,
                               max_frame_bytes=max_frame_bytes,
                               wall_offset=time.time() - self._t0)
        ctx: Any = context or zmq.asyncio.Context.instance()  # its sockets are asyncio's
        self._apub, _ = open_pub(ctx, parse_endpoints(data), bind=False, options=options)
        self._asub, _ = open_sub(ctx, parse_endpoints(feedback), bind=False, options=options)
        self._pub, self._sub = _shadow(self._apub), _shadow(self._asub)
        self._poller = zmq.asyncio.Poller()
        self._poller.register(self._asub, zmq.POLLIN)
        self._next_hello = self._t0
        self._next_fb_check = self._t0
        self._closed = False
        self.blocked_s = self.credit_stalled_s = 0.0
        self.try_refused = 0
        self._batch = FrameBatcher(linger_s=linger_s, max_msgs=frame_msgs,
                                   max_bytes=frame_bytes, max_frame_bytes=max_frame_bytes,
                                   names_bytes=len(stream.encode()) + len(
                                       self.sender_id.encode()))
        self._timer: asyncio.TimerHandle | None = None

    @property
    def sent(self) -> int:
        """Messages sent (or waiting in the frame being built)."""
        return self.core.seq + len(self._batch)

    @property
    def seq(self) -> int:
        return self.core.seq + len(self._batch)

    def _send_frame(self, now: float) -> None:
        """Send the frame being built, stamped with its first message's time."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._batch.payloads:
            payloads, first = self._batch.take(now)
            self._pub.send(self.core.data(payloads, now=first))
            self.core.sample(now, self.blocked_s)

    def _add(self, payload: bytes, now: float) -> None:
        """An admitted payload joins the frame being built (FrameBatcher.offer)."""
        if not self._batch.enabled:
            self._pub.send(self.core.data((payload,), now=now))
            return
        r = self._batch.offer(payload, now)
        if r and self._batch.settle(r, payload, now, self._send_frame):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop to linger on (try_send outside one): send now
                self._send_frame(now)
                return
            if self._timer is None:
                self._timer = loop.call_at(loop.time() + self._batch.linger_s, self._linger_over)

    def _linger_over(self) -> None:
        self._timer = None
        due = self._batch.deadline()
        if due is None or self._closed:
            return
        now = time.monotonic()
        if due <= now:
            self._send_frame(now)
        else:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(loop.time() + due - now, self._linger_over)

    def _feedback(self, now: float) -> None:
        """Handle pending feedback and send the repairs the policy admits now."""
        for buf in drain(self._sub, 10_000):
            self.core.on_feedback(buf, now=now)
        for buf in self.core.repairs_due(now=now):
            self._pub.send(buf)

    async def _wait_feedback(self, timeout_s: float) -> float:
        """Wait up to ``timeout_s`` for feedback, handle it; returns the time now."""
        await _readable(self._poller, timeout_s)
        now = time.monotonic()
        self._feedback(now)
        return now

    def _hello_if_due(self, now: float) -> None:
        if now >= self._next_hello:
            self._next_hello = now + self.hello_interval_s
            self._pub.send(self.core.hello(now=now))

    async def _admit(self, n: int, timeout: float | None) -> tuple[int, float]:
        """Wait until the policy admits messages; (how many, now)."""
        now = time.monotonic()
        self._feedback(now)
        flow, start = self.core.flow, now
        give_up = math.inf if timeout is None else now + timeout
        granted, wait = flow.admit(n, now=now)
        while not granted:
            credit = math.isinf(wait)
            if credit:  # waiting for credit: let new receivers learn of us
                self._hello_if_due(now)
            deadline = flow.next_deadline()
            limit = min(now + wait, give_up, self._next_hello if credit else math.inf,
                        deadline if deadline is not None else math.inf)
            before, now = now, await self._wait_feedback(max(0.0, limit - now))
            if credit:
                self.credit_stalled_s += now - before
            granted, wait = flow.admit(n, now=now)
            if not granted and now >= give_up:
                self.blocked_s += now - start
                raise TimeoutError(f"no permission to send within {timeout} s ({self.mode})")
            if not granted and math.isinf(wait) and n > 1:
                n = 1  # credit: take what is granted when it comes
        self.blocked_s += now - start
        self.core.sample(now, self.blocked_s)
        return granted, now

    def _admit_now(self, now: float) -> bool:
        """Permission for one message at ``now`` without waiting (feedback looked at
        every FEEDBACK_CHECK_S, as the threaded Sender does)."""
        if now >= self._next_fb_check:
            self._next_fb_check = now + FEEDBACK_CHECK_S
            self._feedback(now)
        return self.core.flow.admit(1, now=now)[0] > 0

    async def send(self, payload: bytes, timeout: float | None = None) -> None:
        """Send one message, waiting (without blocking the loop) as the policy says.
        Raises ValueError for a payload larger than a frame may be."""
        self._batch.check(payload)
        now = time.monotonic()
        if not self._admit_now(now):
            self._send_frame(now)  # what waits goes out before the sender waits
            _, now = await self._admit(1, timeout)
        self._add(payload, now)

    def try_send(self, payload: bytes) -> bool:
        """Send one message if the policy allows it now; never waits. True: it was
        admitted (it leaves with the frame being built, within ``linger_s``)."""
        self._batch.check(payload)
        now = time.monotonic()
        if not self._admit_now(now):
            self.try_refused += 1
            return False
        self._add(payload, now)
        return True

    async def send_batch(self, payloads: Sequence[bytes], max_frame_msgs: int = 256,
                         timeout: float | None = None) -> None:
        """Send many messages in frames of up to ``max_frame_msgs``, paced as a whole."""
        self._send_frame(time.monotonic())
        i = 0
        while i < len(payloads):
            granted, now = await self._admit(min(max_frame_msgs, len(payloads) - i), timeout)
            self._pub.send(self.core.data(payloads[i:i + granted], now=now))
            i += granted

    async def wait_for_receivers(self, n: int, timeout: float = 10.0) -> int:
        """Wait until ``n`` receivers answered HELLO (in ack mode: and granted credit)."""
        end = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            ready = set(self.core.echoed)
            ledger = getattr(self.core.flow, "ledger", None)
            if ledger is not None:
                ready &= set(ledger.receivers)
            if len(ready) >= n:
                return len(ready)
            if now >= end:
                raise TimeoutError(f"{len(ready)} of {n} receivers answered in {timeout} s")
            self._hello_if_due(now)
            await self._wait_feedback(max(0.0, min(self._next_hello, end) - now))

    def flush(self) -> None:
        """Send the frame being built, then mark the stream complete: END with the final
        sequence number."""
        now = time.monotonic()
        self._send_frame(now)
        if self.core.seq == 0 and not self.core.said_hello:
            self._pub.send(self.core.hello(now=now))
        self._pub.send(self.core.end(now=now))

    async def close(self) -> None:
        """END, answer repair requests until they stop (as Sender.close), BYE, close."""
        if self._closed:
            return
        self._closed = True
        core = self.core
        try:
            self.flush()
            start = time.monotonic()
            while (wait := core.linger_wait(start, now=time.monotonic())) is not None:
                await self._wait_feedback(min(wait, REPAIR_POLL_S) if core.repairs_pending
                                          else wait)
            self._pub.send(core.bye(now=time.monotonic()))
        finally:
            self._apub.close()
            self._asub.close(0)

    async def __aenter__(self) -> AsyncSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def snapshot(self) -> dict[str, Any]:
        return sender_snapshot(self)


class AsyncReceiver:
    """The asyncio twin of ``nakflow.Receiver``: ``async for msg in rx``, ``get_many``.

    Its I/O runs as a task of the running loop, started by ``async with`` or ``start()``.
    """

    overflow = "drop-newest"

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str], *,
                 mode: str = "nak", stream: str = "default", receiver_id: str | None = None,
                 capacity_msgs: int = 10_000, drop_duplicates: bool = False,
                 overhear: str | Sequence[str] = (), nak: NakConfig | None = None,
                 ack: AckConfig | None = None, options: SocketOptions | None = None,
                 context: zmq.asyncio.Context | None = None, hello_interval_s: float = 0.5,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 shared_key: SharedKey | None = None, max_streams: int = MAX_STREAMS,
                 repair: RepairConfig | None = None) -> None:
        _no_curve(options)
        if capacity_msgs < 1:
            raise ConfigError("capacity_msgs must be >= 1")
        self.mode, self.stream = check_mode(mode), stream
        self.receiver_id = receiver_id or f"r-{uuid.uuid4().hex[:12]}"
        self.capacity_msgs, self.hello_interval_s = capacity_msgs, hello_interval_s
        self._t0 = time.monotonic()
        self._wall_offset = time.time() - self._t0
        self._t_end: float | None = None
        self.core = ReceiverCore(mode=self.mode, stream=stream, receiver_id=self.receiver_id,
                                 capacity_msgs=capacity_msgs, nak=nak, ack=ack, repair=repair,
                                 rng=random.Random(), drop_duplicates=drop_duplicates,
                                 max_streams=max_streams, shared_key=shared_key,
                                 max_frame_bytes=max_frame_bytes,
                                 wall_offset=self._wall_offset)
        ctx: Any = context or zmq.asyncio.Context.instance()
        sockets = open_receiver_sockets(ctx, data, feedback, overhear, options)
        self._adata, self.data_endpoints, self._afb, self.feedback_endpoints = sockets[:4]
        self._ahear = sockets[4]
        self._data, self._fb = _shadow(self._adata), _shadow(self._afb)
        self._hear = None if self._ahear is None else _shadow(self._ahear)
        self._poller = zmq.asyncio.Poller()
        for sock in (self._adata, self._ahear):
            if sock is not None:
                self._poller.register(sock, zmq.POLLIN)
        self._inbox = DeliveryQueue(capacity_msgs, "drop-newest", wake=lambda: None, wake_every=1)
        self._pending: deque[tuple[Key, Message]] = deque()
        self._episodes = BackpressureEpisodes(capacity_msgs)
        self.timeline = Timeline(("depth", "seen_depth", "received", "delivered", "dropped"))
        self._arrived = asyncio.Event()  # created unbound; bound to the loop on first wait
        self._task: asyncio.Task[None] | None = None
        self.handler_errors = 0
        self.error: BaseException | None = None

    def start(self) -> None:
        """Start the I/O task on the running loop (``async with`` does this)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._io())

    async def _io(self) -> None:
        core, next_hello = self.core, time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= next_hello:
                    self._fb.send(core.hello(now=now))
                    next_hello = now + self.hello_interval_s
                due = core.next_deadline()
                limit = min(next_hello, now + IDLE_POLL_S, math.inf if due is None else due)
                ready = await _readable(self._poller, limit - now)
                now = time.monotonic()
                if self._adata in ready:
                    for buf in drain(self._data, 1_000):
                        for out in core.on_data(buf, self._pending.append, now=now):
                            self._fb.send(out)
                    self._inbox.put(self._pending, on_dropped=core.on_dropped,
                                    on_enqueued=core.on_enqueued)
                    self._inbox.set_ends(core.ends, len(core.left))
                    if len(self._inbox):
                        self._arrived.set()
                if self._hear is not None and self._ahear in ready:
                    for buf in drain(self._hear, 1_000):
                        core.on_overheard(buf, now=now)
                self._feedback(now)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced in snapshot()["error"]
            self.error = exc
            self._arrived.set()
            raise

    def _feedback(self, now: float) -> None:
        released, depth = self._inbox.released()
        for key, n in released.items():
            self.core.on_released(key, n)
        self._episodes.observe(depth, now=now)
        for buf in self.core.poll(self.core.seen_depth(depth, None, now=now), now=now):
            self._fb.send(buf)
        if self.timeline.due(now):
            self.timeline.sample(now, depth, depth, self.core.messages_in,
                                 self._inbox.delivered, self.core.dropped)

    async def get_many(self, max_n: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_n`` messages; waits up to ``timeout`` for the first; [] on timeout
        or once closed and drained."""
        self.start()
        while not len(self._inbox):
            if self._inbox.closed or self.error is not None:
                return []
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except TimeoutError:
                return []
        msgs = self._inbox.take(max_n, 0)
        self._feedback(time.monotonic())  # room freed: credit and fill go out now
        return msgs

    async def __aiter__(self) -> AsyncIterator[Message]:
        while True:
            batch = await self.get_many(256)
            if not batch:
                return
            for msg in batch:
                yield msg

    def ends(self) -> dict[Key, int]:
        return self._inbox.ends()

    def done(self, senders: int) -> bool:
        """As ``Receiver.done``: ``senders`` finished, no repair awaited, queue empty."""
        return (self._inbox.finished() >= senders and not self.core.tracker.with_gaps
                and not len(self._inbox) and not self._pending)

    async def messages(self, senders: int = 1,
                       timeout: float | None = 30.0) -> AsyncIterator[Message]:
        """As ``Receiver.messages``: the messages of ``senders`` streams until they are
        over here; TimeoutError after ``timeout`` seconds."""
        self.start()
        end = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            batch = await self.get_many(256, timeout=0.05)
            for msg in batch:
                yield msg
            if not batch and self.done(senders):
                return
            if time.monotonic() >= end:
                raise TimeoutError(f"{self._inbox.finished()} of {senders} senders finished "
                                   f"within {timeout} s")

    async def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        """Wait until END arrived from ``n`` senders (messages may still be queued)."""
        self.start()
        end = math.inf if timeout is None else time.monotonic() + timeout
        while len(self.ends()) < n:
            if time.monotonic() >= end or self.error is not None:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        """Stop the I/O task, send BYE, close the sockets. Queued messages stay available
        to ``get_many`` and are counted as ``queued``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._t_end is None:
            self._t_end = time.monotonic()
            with contextlib.suppress(zmq.ZMQError):
                self._fb.send(self.core.bye(now=self._t_end))
            for sock in (self._adata, self._afb, self._ahear):
                if sock is not None:
                    sock.close(200)
            self._inbox.finish()
            self._arrived.set()

    async def __aenter__(self) -> AsyncReceiver:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def snapshot(self) -> dict[str, Any]:
        return receiver_snapshot(self, self.core.snapshot(), len(self._pending))
