"""The threaded sender: a driver of ``SenderCore`` over ZeroMQ PUB (data) and SUB (feedback).

It reads the clock, hands the core what arrives, sends what the core hands out and waits
as the core says; every protocol decision is the core's. The application's thread does
the work in each call; a timer thread does what falls due while the application is away
(a lingering frame, repairs, HELLO), under the same lock. Use a Sender from one thread.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import zmq

from transports import (
    DisconnectWatch,
    SocketOptions,
    check_pairs,
    drain,
    open_pub,
    open_sub,
    parse_endpoints,
    path_kind,
    receivers_expected,
    with_reach,
)

from ..config import SenderConfig, check_callable, check_timeout, with_overrides
from ..core.sender_core import SenderCore
from ..events import Event, log_level
from ..policy.rate_memory import RATE_MEMORY
from .lifetime import check_context, close_at_exit, not_picklable, track
from .outbox import send_all

log = logging.getLogger("nakflow.live.sender")
FEEDBACK_CHECK_S = 0.001  # how often a sender that is not waiting looks at feedback
TIMER_IDLE_S = 0.05  # the timer thread looks at least this often
#: When the application has not called the sender for this long (a Spark task waiting
#: for its next Arrow batch, a producer between bursts), the timer thread reads the
#: feedback in its place, s: repair requests are answered and RECEIPTs heard however long
#: the application stays away. Unread, a receiver gave its gaps up after max_requests x
#: retry_s (1 s): `make demo` once failed with IncompleteDelivery (dropped 10).
IDLE_FEEDBACK_S = 0.02



class Sender:
    """Publishes a stream to nakflow receivers under ``nak``, ``ack`` or ``none`` control.

    Args:
        data: receivers' data endpoints (list or comma-separated), or a multicast group.
        feedback: receivers' feedback endpoints, in the same order, or the feedback group.
        config: a ``SenderConfig``; keyword arguments named like its fields (``mode``,
            ``stream``, ``nak``, ``linger_s``, ...) override it.
        options: socket options (``transports.SocketOptions``: CURVE, high-water marks).
        context: a ``zmq.Context`` (default: the process's); not an asyncio one.
        on_event: called with each ``nakflow.events.Event`` (a receiver joined or left,
            repairs beyond the history, a peer in another mode), in the sending thread.
        feedback_proxy: the feedback endpoints are a proxy's that forwards every
            receiver's feedback, not one per receiver: ``data`` and ``feedback`` need not
            pair (over tcp/ipc they must otherwise: one of each per receiver, in order).
            A proxy of your own over epgm: docs/known-limits.md (its sockets' rate).

    Raises:
        ConfigError, transports.EndpointError: bad arguments (endpoint lists that do not
            pair, an endpoint named twice).
        TypeError: an argument of the wrong kind (a ``config``, ``options``, ``context``
            or ``on_event`` of another kind).
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str],
                 config: SenderConfig | None = None, *, options: SocketOptions | None = None,
                 context: zmq.Context[zmq.Socket[bytes]] | None = None,
                 on_event: Callable[[Event], object] | None = None,
                 feedback_proxy: bool = False, **overrides: Any) -> None:
        check_callable(on_event, "on_event")
        check_context(context, aio=False)
        cfg = with_overrides(config, SenderConfig, overrides)
        t0 = time.monotonic()
        cfg = cfg.named(f"s-{uuid.uuid4().hex[:12]}", int(time.time() * 1000))
        data_uris, fb_uris = parse_endpoints(data), parse_endpoints(feedback)
        check_pairs(data_uris, fb_uris, proxy=feedback_proxy)
        # probed when nobody answers (with_reach), with the sockets' options (CURVE keys)
        self._fb_uris, self._options = fb_uris, options
        multicast, local = path_kind(data_uris)
        self.core = SenderCore(cfg, now=t0, wall_offset=time.time() - t0, multicast=multicast,
                               local=local, path=data_uris, rate_memory=RATE_MEMORY)
        self.config, self._on_event = cfg, on_event
        self._ctx = ctx = context or zmq.Context.instance()
        self._pub, _ = open_pub(ctx, data_uris, bind=False, options=options)
        try:
            self._sub, _ = open_sub(ctx, fb_uris, bind=False, options=options)
        except BaseException:
            self._pub.close(0)
            raise
        self._poller = zmq.Poller()
        self._poller.register(self._sub, zmq.POLLIN)
        self._watch = DisconnectWatch(self._pub) if self.core.watches_connections else None
        if self._watch is not None:
            self._poller.register(self._watch.socket, zmq.POLLIN)
        self._lock = threading.Lock()  # every use of the core and the sockets
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()  # see _wake_timer
        self._next_fb_check = t0
        self._pid, self._closed = os.getpid(), False
        self._timer = threading.Thread(target=self._timer_main, daemon=True,
                                       name=f"nakflow-tx-timer-{cfg.sender_id}")
        self._timer.start()
        close_at_exit(self)
        track(self, ("send", "try_send", "send_batch", "flush", "poll", "wait_for_receivers"))

    __reduce_ex__ = not_picklable  # sockets and threads: docs/spark.md
    mode = property(lambda self: self.core.mode)
    stream = property(lambda self: self.core.stream)
    sender_id = property(lambda self: self.core.sender_id)
    epoch = property(lambda self: self.core.epoch)
    sent = seq = property(lambda self: self.core.sent, doc="messages sent or admitted")
    frames = property(lambda self: self.core.framer.frames, doc="DATA frames sent")
    start_rate_msgs = property(lambda self: self.core.start_rate_msgs)

    # -- sending ------------------------------------------------------------------------
    def send(self, payload: bytes, timeout: float | None = None) -> None:
        """Send one message, waiting while the rate limit or credit says so. Raises
        TimeoutError after ``timeout`` s without permission, TypeError for a payload not
        bytes-like, ValueError for one larger than a frame may be, LocalProtocolError after
        END."""
        with self._lock:
            core, now = self.core, time.monotonic()
            if now >= self._next_fb_check:
                self._service(now, 0.0)
            wait = core.offer(payload, now)
            if wait:
                self._wait(lambda t: core.offer(payload, t), wait, now, timeout)
            if core.outbox:
                self._transmit()
            if core.timer_changed:
                core.timer_changed = False
                self._wake_timer()

    def try_send(self, payload: bytes) -> bool:
        """Send one message if the policy allows it now; never blocks. True: admitted (it
        leaves with the frame being built, within ``linger_s``)."""
        with self._lock:
            core, now = self.core, time.monotonic()
            if now >= self._next_fb_check:
                self._service(now, 0.0)
            ok = core.try_offer(payload, now)
            if core.outbox:
                self._transmit()
            if core.timer_changed:
                core.timer_changed = False
                self._wake_timer()
            return ok

    def send_batch(self, payloads: Iterable[bytes], timeout: float | None = None) -> None:
        """Send many messages (any iterable of payloads) in few DATA frames, paced by the
        policy as a whole. Raises TimeoutError after ``timeout`` s without any permission;
        an error that ends a batch part way says how many went (``exc.sent``: the first
        that many, which stay sent)."""
        with self._lock:
            offer = self.core.batch_offer(payloads)
            try:
                while not offer.done:
                    now = time.monotonic()
                    if now >= self._next_fb_check:
                        self._service(now, 0.0)
                    wait = offer(now)
                    self._transmit()
                    if wait:
                        self._wait(offer, wait, now, timeout)
            except BaseException as exc:  # a timeout, a mismatch, Ctrl-C: say how many went
                offer.stopped(exc)
                raise

    def flush(self) -> None:
        """The frame being built leaves; then END marks the stream complete."""
        with self._lock:
            self.core.end(time.monotonic())
            self._transmit()

    def poll(self, timeout_s: float = 0.0) -> None:
        """Handle feedback and serve repairs for up to ``timeout_s`` (the frame being
        built leaves first)."""
        with self._lock:
            self.core.usable("poll")
            now = time.monotonic()
            self.core.flush(now)
            end = now + timeout_s
            while True:
                self._service(now, max(0.0, min(end, self._timer_at(end)) - now))
                now = time.monotonic()
                if now >= end:
                    return

    def wait_for_receivers(self, n: int | None = None, timeout: float = 10.0) -> int:
        """Block until ``n`` receivers (default ``receivers_expected``: one per data
        endpoint) answered HELLO, proving the path up against ZeroMQ's slow-joiner loss;
        in ``ack`` each must also have granted. Raises TimeoutError, or PeerMismatch as
        soon as a receiver that answered runs another mode or holds another shared key."""
        n = receivers_expected(self.core.path) if n is None else n
        check_timeout(timeout, "wait_for_receivers")
        with self._lock:
            core, now = self.core, time.monotonic()
            end = now + timeout
            core.want_receivers(n, now)
            try:
                while True:
                    if (ready := core.receivers_ready()) >= n:
                        return ready
                    if (error := core.wait_error(now)) is not None:
                        raise error
                    if now >= end:
                        raise with_reach(core.wait_timed_out(now, ready, n, timeout),
                                         core.path, self._fb_uris, self._options,
                                         answered=ready)
                    self._service(now, max(0.0, min(end, self._timer_at(end)) - now))
                    now = time.monotonic()
            finally:
                core.want_receivers(0, now)

    # -- the driver ---------------------------------------------------------------------
    def _service(self, now: float, wait_s: float) -> None:
        """Read feedback (waiting up to ``wait_s`` for the first frame), run the core's
        timer if due, send what it hands out."""
        self._next_fb_check = now + FEEDBACK_CHECK_S
        core = self.core
        if wait_s > 0:
            if core.outbox:  # what the core handed out leaves before the driver waits
                self._transmit()
            self._poller.poll(max(1, math.ceil(wait_s * 1000)))
        frames = drain(self._sub, 10_000)
        now = time.monotonic()
        for buf in frames:
            core.receive_feedback(buf, now)
        closed = 0 if self._watch is None else self._watch.lost()
        if closed:
            core.connection_lost(now, closed)
        if now >= self._timer_at(now):
            core.handle_timer(now)
        self._transmit()

    def _timer_at(self, default: float) -> float:
        t = self.core.get_timer()
        return default if t is None else t

    def _transmit(self) -> None:
        send_all(self.core, self._pub)
        while (event := self.core.next_event()) is not None:
            log.log(log_level(event), "sender %s: %s", self.core.sender_id, event)
            if self._on_event is not None:
                self._on_event(event)

    def _wait(self, retry: Callable[[float], float], wait: float, now: float,
              timeout: float | None) -> None:
        """Serve feedback and timers until ``retry(now)`` is admitted (returns 0)."""
        check_timeout(timeout, "send")  # checked when a send waits: then it matters
        give_up = math.inf if timeout is None else now + timeout
        while wait:
            limit = min(now + wait, give_up, self._timer_at(give_up))
            self._service(now, max(0.0, limit - now))
            now = time.monotonic()
            wait = retry(now)
            if wait and now >= give_up:
                raise self.core.send_timed_out(now, timeout)

    def _wake_timer(self) -> None:
        """Wake the timer thread (a wake or two wait at most). Not a threading.Event: a
        signal's exception inside its set() left the Condition's lock held (CHANGELOG)."""
        if self._wake.empty():
            self._wake.put(None)

    def _timer_main(self) -> None:
        """The core's timers, and the feedback while the application is away: whoever
        holds the lock reads the sockets, so they are never used by two threads at once."""
        while not self._closed:
            now = time.monotonic()
            delay = min(TIMER_IDLE_S, self._timer_at(math.inf) - now,
                        self._next_fb_check + IDLE_FEEDBACK_S - now)
            if delay > 0:
                with contextlib.suppress(queue.Empty):
                    self._wake.get(timeout=delay)
                    while True:  # wakes that came meanwhile are one
                        self._wake.get_nowait()
                continue
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                if (now >= self._timer_at(math.inf)
                        or now >= self._next_fb_check + IDLE_FEEDBACK_S):
                    self._service(now, 0.0)  # feedback, the timer if due, what they send

    # -- the end ------------------------------------------------------------------------
    def close(self, linger_s: float | None = None) -> None:
        """END (if not sent), answer repair requests while receivers ask, BYE, close the
        sockets (``linger_s``: how long ZeroMQ may keep unsent frames)."""
        self._finish(linger_s, end=True)

    def abort(self, linger_s: float | None = None) -> None:
        """Leave without END: receivers see this (sender, epoch) as incomplete (a Spark
        task that failed and will be retried under a new epoch)."""
        self._finish(linger_s, end=False)

    def _leave_at_exit(self) -> bool | None:
        """At interpreter exit, not closed: ``abort`` (``live.lifetime``)."""
        if self._closed or os.getpid() != self._pid:
            return None
        return self._finish(None, end=False, lock_s=1.0)

    def _finish(self, linger_s: float | None, *, end: bool, lock_s: float = -1) -> bool:
        """Close or abort; False if the lock was not had within ``lock_s`` (-1: wait)."""
        if self._closed:
            return True
        if os.getpid() != self._pid:  # a forked copy must not touch the parent's sockets
            self._closed = True
            return True
        if lock_s < 0:
            with self._lock:  # not acquire(): a signal's exception as it returned (where
                self._finish_locked(linger_s, end)  # CPython runs handlers) left the lock
        elif self._lock.acquire(timeout=lock_s):  # held for good; at exit only
            try:
                self._finish_locked(linger_s, end)
            finally:
                self._lock.release()
        else:
            return False
        self._wake_timer()
        if self._timer is not threading.current_thread():
            self._timer.join(1.0)
        return True

    def _finish_locked(self, linger_s: float | None, end: bool) -> None:
        self._closed = True
        core = self.core
        try:
            try:
                now = time.monotonic()
                core.close(now) if end else core.abort(now)
                self._transmit()
                while not core.closed:
                    self._service(now, max(0.0, self._timer_at(now) - now))
                    now = time.monotonic()
            except BaseException:  # a signal (KeyboardInterrupt) inside the close: it ends
                core.abort(time.monotonic())  # here, its report says who was still waited
                self._transmit()  # for; what was due goes (END too), then BYE
                raise
        finally:
            self._next_fb_check = math.inf  # a send after close reaches the core, which
            if self._watch is not None:  # refuses it, not the closed sockets
                self._watch.close()
            self._pub.close(None if linger_s is None else int(linger_s * 1000))
            self._sub.close(0)

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """``close`` (END) after the block; after an exception ``abort`` (no END), so that
        the receivers report the stream incomplete, not complete at wherever it stopped."""
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready (``SenderCore.snapshot``). Read without the lock, so that a
        metrics scrape never waits for a sender blocked on credit."""
        return self.core.snapshot(time.monotonic())

