"""The asyncio sender: a driver of ``SenderCore`` on ``zmq.asyncio`` (see ``nakflow.aio``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import zmq
import zmq.asyncio

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
from ..errors import LocalProtocolError
from ..events import Event, log_level
from ..policy.rate_memory import RATE_MEMORY
from .async_common import IDLE_POLL_S, LoopTimer, Wakeup, in_its_loop, no_curve, shadow
from .lifetime import check_context, close_at_exit, not_picklable, track
from .outbox import send_all

log = logging.getLogger("nakflow.live.async_sender")


class AsyncSender:
    """The asyncio twin of ``nakflow.Sender``: same arguments and config (no CURVE); its
    ``context`` a ``zmq.asyncio.Context``."""

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str],
                 config: SenderConfig | None = None, *, options: SocketOptions | None = None,
                 context: zmq.asyncio.Context | None = None,
                 on_event: Callable[[Event], object] | None = None,
                 feedback_proxy: bool = False, **overrides: Any) -> None:
        check_callable(on_event, "on_event")
        check_context(context, aio=True)
        no_curve(options)
        cfg = with_overrides(config, SenderConfig, overrides).named(
            f"s-{uuid.uuid4().hex[:12]}", int(time.time() * 1000))
        t0 = time.monotonic()
        data_uris, fb_uris = parse_endpoints(data), parse_endpoints(feedback)
        check_pairs(data_uris, fb_uris, proxy=feedback_proxy)
        # probed when nobody answers (with_reach), with the sockets' options
        self._fb_uris, self._options = fb_uris, options
        multicast, local = path_kind(data_uris)
        self.core = SenderCore(cfg, now=t0, wall_offset=time.time() - t0, multicast=multicast,
                               local=local, path=data_uris, rate_memory=RATE_MEMORY)
        self._on_event = on_event
        ctx: Any = context or zmq.asyncio.Context.instance()  # its sockets are asyncio's
        self._ctx = ctx
        self._apub, _ = open_pub(ctx, data_uris, bind=False, options=options)
        self._asub, _ = open_sub(ctx, fb_uris, bind=False, options=options)
        self._pub, self._sub = shadow(self._apub), shadow(self._asub)
        self._watch = DisconnectWatch(self._apub) if self.core.watches_connections else None
        self._timer = LoopTimer(self._on_timer)
        self._progress = Wakeup()  # set whenever feedback or a timer was handled
        self._reader: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it lives in
        self._shut, self._pid = False, os.getpid()
        close_at_exit(self)  # aborted at interpreter exit unless closed
        track(self, ("send", "try_send", "send_batch", "wait_for_receivers", "flush"))

    __reduce_ex__ = not_picklable  # sockets and threads: docs/spark.md
    mode = property(lambda self: self.core.mode)
    sender_id = property(lambda self: self.core.sender_id)
    sent = seq = property(lambda self: self.core.sent)

    def _here(self) -> None:
        """In the loop it lives in (the first it was used in), or outside any loop."""
        self._loop = in_its_loop(self._loop, f"AsyncSender {self.core.sender_id}")

    async def send(self, payload: bytes, timeout: float | None = None) -> None:
        """Send one message, waiting (without blocking the loop) as the policy says; raises
        as ``Sender.send`` does."""
        self._here()
        core, now = self.core, time.monotonic()
        wait = core.offer(payload, now)
        if wait:
            await self._wait(lambda t: core.offer(payload, t), wait, now, timeout)
        if core.outbox or core.timer_changed:
            self._transmit()

    def try_send(self, payload: bytes) -> bool:
        """Send one message if the policy allows it now; never waits. True: admitted (it
        leaves with the frame being built; outside a running loop, at once)."""
        self._here()
        core, now = self.core, time.monotonic()
        ok = core.try_offer(payload, now)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop whose timer could end the linger: send now
            core.flush(now)
        self._transmit()
        return ok

    async def send_batch(self, payloads: Iterable[bytes], timeout: float | None = None) -> None:
        """Send many messages in few DATA frames, paced by the policy as a whole; as
        ``Sender.send_batch``, an error or a cancellation that ends it part way says how
        many went (``exc.sent``)."""
        self._here()
        offer = self.core.batch_offer(payloads)
        try:
            while not offer.done:
                now = time.monotonic()
                wait = offer(now)
                self._transmit()
                if wait:
                    await self._wait(offer, wait, now, timeout)
        except BaseException as exc:  # a timeout, a mismatch, a cancellation: how many went
            offer.stopped(exc)
            raise

    async def wait_for_receivers(self, n: int | None = None, timeout: float = 10.0) -> int:
        """Wait until ``n`` receivers answered HELLO (in ack mode: and granted credit);
        by default every receiver the data endpoints lead to (``Sender``'s). Raises
        TimeoutError, or PeerMismatch as soon as a receiver that answered runs another
        mode or holds another shared key."""
        self._here()
        n = receivers_expected(self.core.path) if n is None else n
        check_timeout(timeout, "wait_for_receivers")
        core, now = self.core, time.monotonic()
        end = now + timeout
        core.want_receivers(n, now)
        self._transmit()
        try:
            while True:
                if (ready := core.receivers_ready()) >= n:
                    return ready
                if (error := core.wait_error(time.monotonic())) is not None:
                    raise error
                if time.monotonic() >= end:
                    err = core.wait_timed_out(time.monotonic(), ready, n, timeout)
                    raise await asyncio.to_thread(with_reach, err, core.path, self._fb_uris,
                                                  self._options, answered=ready)
                await self._progressed(end - time.monotonic())
        finally:
            core.want_receivers(0, time.monotonic())

    def flush(self) -> None:
        """The frame being built leaves; then END marks the stream complete."""
        self._here()
        self.core.end(time.monotonic())
        self._transmit()

    async def close(self) -> None:
        """END, answer repair requests while receivers ask, BYE, close the sockets."""
        core = self.core
        if self._shut:
            return
        try:
            self._here()
        except LocalProtocolError as exc:  # its loop is gone: no exact close can run here
            self._leave_at_exit()  # what it admitted goes, then BYE
            raise LocalProtocolError(f"{exc}; it left as abort() does: what it had admitted "
                                     "went, then BYE, without END") from None
        self._shut = True
        try:
            core.close(time.monotonic())
            self._transmit()
            while not core.closed:
                timer = core.get_timer()
                await self._progressed(IDLE_POLL_S if timer is None
                                       else timer - time.monotonic())
        except BaseException:  # cancelled inside the wait (asyncio.wait_for's timeout): the
            core.abort(time.monotonic())  # close ends here, its report says who was still
            self._transmit()  # waited for, and BYE goes out
            raise
        finally:
            self._close_sockets()

    def _close_sockets(self) -> None:
        with contextlib.suppress(RuntimeError):  # a loop closed with them pending (exit)
            self._timer.cancel()
            if self._reader is not None:
                self._reader.cancel()
        if self._watch is not None:
            self._watch.close()
        self._apub.close()
        self._asub.close(0)

    def _leave_at_exit(self) -> bool | None:
        """At interpreter exit, not closed (``live.lifetime``): ``abort`` without the loop,
        which is gone: what was admitted goes out, then BYE."""
        if self._shut or os.getpid() != self._pid:
            return None
        self._shut = True
        self.core.abort(time.monotonic())
        self._transmit()  # outside a loop: sends and logs, arms nothing
        self._close_sockets()
        return True

    async def abort(self) -> None:
        """Leave without END: receivers see this (sender, epoch) as incomplete."""
        self.core.abort(time.monotonic())
        await self.close()

    async def __aenter__(self) -> AsyncSender:
        self._here()
        self._transmit()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """As ``Sender.__exit__``: END after the block, none after an exception."""
        if exc_type is None:
            await self.close()
        else:
            await self.abort()

    def snapshot(self) -> dict[str, Any]:
        return self.core.snapshot(time.monotonic())

    # -- the driver ---------------------------------------------------------------------
    def _transmit(self) -> None:
        """Send what the core hands out, pass its events on, re-arm its timer, make sure a
        task reads feedback."""
        core = self.core
        send_all(core, self._pub)
        while (event := core.next_event()) is not None:
            log.log(log_level(event), "sender %s: %s", core.sender_id, event)
            if self._on_event is not None:
                self._on_event(event)
        core.timer_changed = False
        self._timer.arm(core.get_timer())
        if self._reader is None and not core.closed:
            with contextlib.suppress(RuntimeError):  # no running loop: started later
                self._reader = asyncio.get_running_loop().create_task(self._read_feedback())

    async def _read_feedback(self) -> None:
        poller = zmq.asyncio.Poller()
        poller.register(self._asub, zmq.POLLIN)
        if self._watch is not None:
            poller.register(self._watch.socket, zmq.POLLIN)
        while not self.core.closed:
            await poller.poll()
            now = time.monotonic()
            for buf in drain(self._sub, 10_000):
                self.core.receive_feedback(buf, now)
            closed = 0 if self._watch is None else self._watch.lost()
            if closed:
                self.core.connection_lost(now, closed)
            self._after_input(now)

    def _on_timer(self) -> None:
        self._after_input(time.monotonic())

    def _after_input(self, now: float) -> None:
        timer = self.core.get_timer()
        if timer is not None and now >= timer:
            self.core.handle_timer(now)
        self._transmit()
        self._progress.set()

    async def _progressed(self, timeout_s: float) -> None:
        """Wait until feedback or a timer was handled, or ``timeout_s`` passed."""
        self._progress.clear()
        await self._progress.wait(max(0.0, timeout_s))

    async def _wait(self, retry: Callable[[float], float], wait: float, now: float,
                    timeout: float | None) -> None:
        check_timeout(timeout, "send")  # checked when a send waits: then it matters
        give_up = math.inf if timeout is None else now + timeout
        while wait:
            self._transmit()  # what waits (a retry's repairs too) goes out before the wait
            await self._progressed(min(now + wait, give_up) - now)
            now = time.monotonic()
            wait = retry(now)
            if wait and now >= give_up:
                raise self.core.send_timed_out(now, timeout)
