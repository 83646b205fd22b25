"""The threaded receiver: an I/O thread drives ``ReceiverCore`` over ZeroMQ SUB (data) and
PUB (feedback) and fills a bounded queue (``DeliveryQueue``); the application drains it
by iteration, ``get``, ``get_many``, ``messages`` or a handler callback. Every protocol
decision is the core's; the I/O thread moves bytes and messages and waits on its timer.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import zmq

from transports import SocketOptions, drain, open_receiver_sockets

from ..config import OVERFLOW_POLICIES, ReceiverConfig, check_callable, with_overrides
from ..core.receiver_core import Message, ReceiverCore
from ..errors import LocalProtocolError
from ..events import Event
from ..wire import SenderKey
from .delivery_queue import DeliveryQueue
from .lateness import Lateness
from .lifetime import check_context, check_senders, closed_before_done, not_picklable, track
from .outbox import send_all

__all__ = ["OVERFLOW_POLICIES", "Message", "Receiver"]

log = logging.getLogger("nakflow.live.receiver")
IDLE_POLL_S = 0.1  # longest the I/O thread sleeps with nothing due (close() also wakes it)


class Receiver:
    """Receives a stream into a bounded queue and speaks up only as its policy says.

    Args:
        data: endpoints to bind for DATA (``tcp://127.0.0.1:*`` picks a port; see
            ``data_endpoints``) or the multicast group to join.
        feedback: endpoints to bind for feedback, or the feedback multicast group.
        config: a ``ReceiverConfig``; keyword arguments named like its fields (``mode``,
            ``capacity_msgs``, ``overflow``, ``repair``, ...) override it.
        overhear: other receivers' feedback endpoints, to suppress NAKs and repair
            requests they already sent (over multicast everyone hears everyone anyway).
        handler: if given, a consumer thread calls it for every message. One that
            raises is logged with the message's sender, epoch and seq and counted
            (``handler_errors``, a problem in ``receiver_verdict``); the thread goes on
            with the next message, and the one it raised on counts as delivered.
        options, context: socket options (CURVE, high-water marks) and a ``zmq.Context``
            (not an asyncio one).
        on_event: called with each ``nakflow.events.Event`` (on the I/O thread).

    Raises:
        ConfigError, TypeError (an unknown keyword argument, an argument of the wrong
        kind), transports.EndpointError (an endpoint named twice, a malformed one),
        zmq.ZMQError (e.g. an address in use).
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str],
                 config: ReceiverConfig | None = None, *, overhear: str | Sequence[str] = (),
                 handler: Callable[[Message], object] | None = None,
                 options: SocketOptions | None = None,
                 context: zmq.Context[zmq.Socket[bytes]] | None = None,
                 on_event: Callable[[Event], object] | None = None, **overrides: Any) -> None:
        check_callable(handler, "handler")
        check_callable(on_event, "on_event")
        check_context(context, aio=False)
        cfg = with_overrides(config, ReceiverConfig, overrides).named(f"r-{uuid.uuid4().hex[:12]}")
        t0 = time.monotonic()
        self._wall_offset = time.time() - t0
        rng = random.Random()
        self.core = ReceiverCore(cfg, now=t0, wall_offset=self._wall_offset, rng=rng,
                                 incarnation=1 + rng.getrandbits(52))
        self.config, self._on_event = cfg, on_event
        sockets = open_receiver_sockets(context, data, feedback, overhear, options,
                                        self.core.subscriptions(), cfg.max_frame_bytes)
        self._data, self.data_endpoints, self._fb, self.feedback_endpoints = sockets[:4]
        self._hear, self._auth = sockets[4:]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._queue = DeliveryQueue(cfg.capacity_msgs, cfg.overflow, wake=self._wake,
                                    wake_every=max(1, int(cfg.capacity_msgs
                                                          * cfg.ack.regrant_fraction / 4)))
        self._lock = threading.Lock()  # the I/O thread's use of the core; snapshot()
        self._stopping = False
        self.error: BaseException | None = None
        self.handler_errors = 0
        self._io = threading.Thread(target=self._io_main, name=f"nakflow-rx-{cfg.receiver_id}",
                                    daemon=True)
        self._io.start()
        self._consumer: threading.Thread | None = None
        track(self, ("get", "get_many", "__iter__", "messages", "done", "live_streams",
                     "wait_for_ends", "wait_drained"))
        if handler is not None:
            self._consumer = threading.Thread(target=self._consume_with, args=(handler,),
                                              name="nakflow-rx-handler", daemon=True)
            self._consumer.start()

    __reduce_ex__ = not_picklable  # sockets and threads: docs/spark.md
    mode = property(lambda self: self.core.mode)
    stream = property(lambda self: self.core.stream)
    receiver_id = property(lambda self: self.core.receiver_id)
    capacity_msgs = property(lambda self: self.core.capacity_msgs)
    dropped = property(lambda self: self.core.dropped, doc="messages the full queue dropped")
    frames_in = property(lambda self: self.core.frames_in, doc="frames read, any")
    delivered = property(lambda self: self._queue.delivered, doc="messages the app took")
    queue_peak = property(lambda self: self._queue.queue_peak)

    # -- the application's side -----------------------------------------------------------
    def get(self, timeout: float | None = None) -> Message | None:
        """Next message; None on timeout, or once closed and drained."""
        out = self.get_many(1, timeout)
        return out[0] if out else None

    def get_many(self, max_n: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_n`` messages; waits up to ``timeout`` for the first one."""
        if self._consumer is not None and self._consumer is not threading.current_thread():
            raise LocalProtocolError(
                f"receiver {self.receiver_id} hands every message to its handler (handler=): "
                "get, get_many, messages and iteration would take some of them from it. "
                "Use one or the other; wait_for_ends and wait_drained say when they are over")
        return self._queue.take(max_n, timeout)

    def __iter__(self) -> Iterator[Message]:
        """Messages until the receiver is closed and drained (a service's loop)."""
        while batch := self.get_many(256, timeout=None):
            yield from batch

    def messages(self, senders: int = 1, timeout: float | None = 30.0) -> Iterator[Message]:
        """The messages of ``senders`` senders (ids: ``finished``) until they are over here
        (``done``) and no other stream is still going (``live_streams``: more senders than
        ``senders``, whose rest would be cut off); raises TimeoutError after ``timeout`` s
        (None: no limit; a sender that died without END is finished only after
        ``sender_gone_s``). Raises ValueError for ``senders`` < 0 or a timeout < 0."""
        check_senders(senders, timeout)
        end = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            batch = self.get_many(256, timeout=0.05)
            yield from batch
            if not batch and self.done(senders) and not self.live_streams():
                return
            if not batch and self._queue.closed and not len(self._queue):
                raise closed_before_done(self.receiver_id, self.finished(), senders, self.error)
            if time.monotonic() >= end:
                raise TimeoutError(f"{self.finished()} of {senders} senders finished within "
                                   f"{timeout} s")

    def _consume_with(self, handler: Callable[[Message], object]) -> None:
        for msg in self:
            try:
                handler(msg)
            except Exception:
                self.handler_errors += 1
                log.exception("handler raised on %s/%d seq %d", msg.sender, msg.epoch, msg.seq)

    def depth(self) -> int:
        return len(self._queue)

    def ends(self) -> dict[SenderKey, int]:
        """END seen: (sender, epoch) -> final seq, of streams heard before their END."""
        return self._queue.ends()

    def finished(self) -> int:
        """Sender ids heard that finished (a retried task counts once: ``core.silence``)."""
        return self._queue.finished()

    def awaiting_repair(self) -> int:
        """Streams still missing messages this receiver asks to have repaired."""
        return len(self.core.tracker.with_gaps)

    def done(self, senders: int) -> bool:
        """``senders`` finished, no repair awaited, the queue empty: their streams are over."""
        return (self.finished() >= senders and not self.awaiting_repair()
                and not len(self._queue) and not self.core.deliveries())

    def live_streams(self) -> list[SenderKey]:
        """(sender, epoch) of the streams still going (``ReceiverCore.live_streams``)."""
        with self._lock:
            return self.core.live_streams()

    def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        """Wait until END arrived from ``n`` streams, (sender, epoch) pairs: a task and its
        retry are two (``finished`` counts sender ids); False on timeout."""
        return self._queue.wait_for_ends(n, timeout)

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until the consumer has emptied the queue; False on timeout."""
        return self._queue.wait_empty(self.core.deliveries(), timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the I/O thread (BYE) and close the sockets; queued messages stay available
        to ``get`` and are counted as ``queued``: nothing disappears silently."""
        with self._queue.lock:
            if self._stopping:
                return
            self._stopping = True
        self._wake()
        self._io.join(timeout)
        if self._consumer is not None and self._consumer is not threading.current_thread():
            self._consumer.join(timeout)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def latency_ms(self) -> dict[str, float | None]:
        return self._queue.latency_ms()

    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready: the core's accounting (``dropped``: what the full queue
        dropped; ``dropped_unrepaired``, ``lost``, ``beyond_history``: missing for good or
        for now; ``repaired`` of ``delivered`` came by repair) and the queue's."""
        with self._lock:
            snap = self.core.snapshot(time.monotonic())
            pending = len(self.core.deliveries())
        first = self.core.first_data_at
        snap.update(self._queue.snapshot(None if first is None else first + self._wall_offset,
                                         pending))
        snap.update(started_at=round(self.core._t0 + self._wall_offset, 6),
                    handler_errors=self.handler_errors,
                    error=None if self.error is None else repr(self.error))
        return snap

    # -- the I/O thread -------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _io_main(self) -> None:
        try:
            self._io_loop()
        except BaseException as exc:  # surfaced in snapshot()["error"] and the log
            self.error = exc
            log.exception("receiver I/O thread failed")
        finally:
            try:
                with self._lock:
                    self.core.close(time.monotonic())
                    self._transmit()
            except zmq.ZMQError:
                pass
            for sock in (self._data, self._fb, self._hear):
                if sock is not None:
                    sock.close(200)
            os.close(self._wake_r)
            os.close(self._wake_w)
            if self._auth is not None:
                self._auth.stop()
            self._queue.finish()

    def _io_loop(self) -> None:
        core, queue = self.core, self._queue
        pollers = {with_data: zmq.Poller() for with_data in (True, False)}
        for with_data, poller in pollers.items():
            if self._hear is not None:
                poller.register(self._hear, zmq.POLLIN)
            poller.register(self._wake_r, zmq.POLLIN)
            if with_data:
                poller.register(self._data, zmq.POLLIN)
        lateness = Lateness()
        try:
            while not self._stopping:
                now = time.monotonic()
                timer = core.get_timer()
                timeout = IDLE_POLL_S if timer is None else min(IDLE_POLL_S, timer - now)
                read = core.wants_data(queue.full) and not core.deliveries()
                poll_ms = lateness.poll_ms(timeout, now)
                lateness.wait_started(now, poll_ms / 1000)
                ready = dict(pollers[read].poll(poll_ms))
                with self._lock:
                    now = time.monotonic()
                    core.late(lateness.woke(now), now)
                    if self._data in ready:
                        lateness.data_read(now)
                        now = self._read_data()
                    if self._hear is not None and self._hear in ready:
                        for buf in drain(self._hear, 1000):
                            core.receive_overheard(buf, now)
                    if self._wake_r in ready:
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
                    self._step(now)
        finally:
            lateness.close()

    def _read_data(self) -> float:
        """Read until a chunk of *messages* is pending (a batched frame holds many); each
        frame with the time it was read (a frame that came while the chunk was read is
        not older than it is); the time of the last."""
        core, clock = self.core, time.monotonic
        pending, chunk, recv, frames = core.deliveries(), core.read_chunk, self._data.recv, 0
        now = woke = clock()
        try:
            while len(pending) < chunk and frames < chunk:
                buf = recv(zmq.NOBLOCK)
                now = clock()
                core.reading_for(now - woke)
                core.receive_data(buf, now)
                frames += 1
        except zmq.Again:
            pass
        core.io_behind((len(pending) >= chunk or frames >= chunk)
                       and bool(int(self._data.get(zmq.EVENTS)) & zmq.POLLIN), now)
        return now

    def _step(self, now: float) -> None:
        self.core.exchange(self._queue, now)
        self._transmit()

    def _transmit(self) -> None:
        core = self.core
        send_all(core, self._fb)
        while (event := core.next_event()) is not None:
            log.info("receiver %s: %s", core.receiver_id, event)
            if self._on_event is not None:
                self._on_event(event)
