"""The live sender: DATA out over ZeroMQ PUB, feedback in over SUB, in the caller's thread.

A thin driver of the sans-I/O core (``SenderCore``): it reads the clock, asks the
policy, sends, and while it must wait it polls the feedback socket with the wait as
the timeout, so a blocked sender still reacts to feedback. ``_SenderLink`` holds the
sockets, feedback and waiting; ``Sender`` the sending API and natural batching
(``nakflow._batch``), whose linger timer (``_LingerTimer``) is the one other thread
that touches the PUB socket, always under the sender's lock. Use a Sender from one
thread.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import zmq

from transports import SocketOptions, drain, open_pub, open_sub, parse_endpoints

from ._auth import SharedKey
from ._batch import FRAME_BYTES, FRAME_MSGS, LINGER_S, FrameBatcher
from ._codec import DEFAULT_MAX_FRAME_BYTES, T_DATA, VERSION, pack_frame
from ._config import AckConfig, NakConfig, RepairConfig, check_mode
from ._errors import ConfigError
from ._rate_memory import RATE_MEMORY
from ._sender_core import SenderCore
from .policies import AckFlow

FEEDBACK_CHECK_S = 0.001  # how often a sender that is not waiting looks at feedback
#: ``send`` takes permission for up to this many messages at once and spends it without
#: asking the policy again until the next feedback check; what is left then is given back.
ALLOWANCE_MSGS = 256
#: While repairs are pending after END, look again this often (each look sends what the
#: limit admits, up to REPAIR_CHUNK_MSGS): waiting on feedback instead held W1's batched
#: NAK repairs to about 5,000 msgs/s, past the history's age for some.
REPAIR_POLL_S = 0.001
MAX_BATCH_MSGS = 1024  # payloads per DATA frame in send_batch
MAX_BATCH_BYTES = 256 * 1024


class _LingerTimer:
    """A daemon thread that sends a frame whose linger is over while the application
    does not call in (started at the first frame that waits). ``send_frame`` runs with
    ``lock`` held, as every other use of the sender's PUB socket."""

    def __init__(self, batch: FrameBatcher, lock: threading.Lock,
                 send_frame: Callable[[float], None], name: str) -> None:
        self._batch, self._lock, self._send_frame, self._name = batch, lock, send_frame, name
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.closed = False

    def arm(self) -> None:
        """A frame's first message is waiting."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, daemon=True, name=self._name)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """End the thread (call without holding the lock)."""
        self.closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)

    def _run(self) -> None:
        batch, wake = self._batch, self._wake
        while not self.closed:
            wake.wait()
            wake.clear()
            while not self.closed:
                deadline = batch.deadline()  # read without the lock: a hint, checked below
                if deadline is None:
                    break
                delay = deadline - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                    continue
                with self._lock:
                    now = time.monotonic()
                    due = batch.deadline()
                    if due is not None and due <= now and not self.closed:
                        self._send_frame(now)


class _SenderLink:
    """A sender's sockets, feedback and waiting: what ``Sender`` builds its sending on.

    It owns the PUB (DATA out) and SUB (feedback in) sockets and the protocol core,
    reads feedback (serving repairs) whenever it waits or is due, takes the policy's
    permission ahead in allowances, and says HELLO while it waits. Both sockets belong
    to the thread that uses the sender, and to the linger timer under ``_lock``.
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str], *,
                 mode: str = "nak", stream: str = "default", sender_id: str | None = None,
                 epoch: int | None = None, nak: NakConfig | None = None,
                 ack: AckConfig | None = None, options: SocketOptions | None = None,
                 context: zmq.Context[zmq.Socket[bytes]] | None = None,
                 hello_interval_s: float = 0.1, max_rate_msgs: float | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 timeline_interval_s: float = 0.05,
                 shared_key: SharedKey | None = None,
                 repair: RepairConfig | None = None, linger_s: float = LINGER_S,
                 frame_msgs: int = FRAME_MSGS, frame_bytes: int = FRAME_BYTES,
                 remember_rate: bool = False) -> None:
        self.mode = check_mode(mode)
        if not stream or len(stream) > 256:
            raise ConfigError("stream must be a name of 1..256 characters")
        self.stream = stream
        self.sender_id = sender_id or f"s-{uuid.uuid4().hex[:12]}"
        self.epoch = int(time.time() * 1000) if epoch is None else int(epoch)
        if self.epoch < 0:
            raise ConfigError("epoch must be >= 0")
        self.hello_interval_s = hello_interval_s
        self.max_frame_bytes = max_frame_bytes
        self._t0 = time.monotonic()
        self._wall_offset = time.time() - self._t0
        data_uris, fb_uris = parse_endpoints(data), parse_endpoints(feedback)
        self._rate_key = ((stream, tuple(sorted(data_uris)))
                          if remember_rate and self.mode == "nak" else None)
        self.start_rate_msgs: float | None = None  # where slow start began, if remembered
        if self._rate_key is not None:
            self.start_rate_msgs = RATE_MEMORY.recall(self._rate_key, now=self._t0)
            if self.start_rate_msgs is not None:
                cfg = nak or NakConfig()
                nak = replace(cfg, initial_rate_msgs=min(max(
                    self.start_rate_msgs, cfg.min_rate_msgs), cfg.max_rate_msgs))
        self.core = SenderCore(mode=self.mode, stream=stream, sender_id=self.sender_id,
                               epoch=self.epoch, nak=nak, ack=ack, repair=repair,
                               max_rate_msgs=max_rate_msgs, shared_key=shared_key,
                               max_frame_bytes=max_frame_bytes, wall_offset=self._wall_offset,
                               timeline_interval_s=timeline_interval_s)
        self._flow = self.core.flow
        self._batch = FrameBatcher(linger_s=linger_s, max_msgs=frame_msgs,
                                   max_bytes=frame_bytes, max_frame_bytes=max_frame_bytes,
                                   names_bytes=len(stream.encode()) + len(
                                       self.sender_id.encode()))
        self._batching = self._batch.enabled
        # held by the application's thread in every call, and by the linger timer while
        # it sends a frame whose linger is over (the PUB socket is used by both)
        self._lock = threading.Lock()
        self._timer = _LingerTimer(self._batch, self._lock, self._send_frame,
                                   f"nakflow-tx-linger-{self.sender_id}")
        self._ctx = context or zmq.Context.instance()
        self._pub, _ = open_pub(self._ctx, data_uris, bind=False, options=options)
        try:
            self._sub, _ = open_sub(self._ctx, fb_uris, bind=False, options=options)
        except BaseException:
            self._pub.close(0)
            raise
        self._poller = zmq.Poller()
        self._poller.register(self._sub, zmq.POLLIN)
        self._pid = os.getpid()
        self._next_fb_check = self._t0
        self._next_hello = self._t0
        self._allow = 0  # messages admitted ahead by the policy, not yet sent
        self._allow_until = 0.0  # ... usable until then
        self._closed = False
        self.blocked_s = 0.0
        self.credit_stalled_s = 0.0
        self.try_refused = 0

    @property
    def seq(self) -> int:
        """The next seq; every seq below it was sent, or waits in the frame being built
        (it leaves within ``linger_s``, or on ``flush``/``close``)."""
        return self.core.seq + len(self._batch)

    @property
    def sent(self) -> int:
        """Messages sent (or waiting in the frame being built)."""
        return self.core.seq + len(self._batch)

    @property
    def frames(self) -> int:
        """DATA frames sent (repairs not counted)."""
        return self.core.frames

    @property
    def timeline(self) -> Any:
        return self.core.timeline

    def _send_frame(self, now: float) -> None:
        """Send the frame being built, stamped with its first message's time."""
        if self._batch.payloads:
            payloads, first = self._batch.take(now)
            self._pub.send(self.core.data(payloads, now=first))
            self.core.sample(now, self.blocked_s)

    def _take_allowance(self, now: float) -> bool:
        """Give back what is left of the last allowance, look at feedback (and send due
        repairs) if due, and take permission for up to ALLOWANCE_MSGS messages; False if
        none was granted."""
        self._give_back()
        if now >= self._next_fb_check:
            self._read_feedback(now, 0.0)
        self.core.sample(now, self.blocked_s)
        k = self._flow.admit_up_to(ALLOWANCE_MSGS, now=now)
        self._allow = k
        self._allow_until = self._next_fb_check
        return k > 0

    def _give_back(self) -> None:
        if self._allow:
            self._flow.refund(self._allow)
            self._allow = 0

    def _wait_admit(self, n: int, wait: float, now: float, timeout: float | None) -> float:
        start = now
        give_up = math.inf if timeout is None else now + timeout
        while True:
            deadline = self._flow.next_deadline()
            limit = min(now + wait, give_up, deadline if deadline is not None else math.inf)
            if math.isinf(wait):  # waiting for credit: let new receivers learn of us
                limit = min(limit, self._next_hello)
            self._read_feedback(now, max(0.0, limit - now))
            before, now = now, time.monotonic()
            if math.isinf(wait):  # nothing granted: the slowest receiver's credit is spent
                self.credit_stalled_s += now - before
            self.core.sample(now, self.blocked_s)
            if math.isinf(wait) and now >= self._next_hello:
                self._hello(now)
            granted, wait = self._flow.admit(n, now=now)
            if granted:
                self.blocked_s += now - start
                return now
            if now >= give_up:
                self.blocked_s += now - start
                raise TimeoutError(f"no permission to send within {timeout} s ({self.mode})")

    def _read_feedback(self, now: float, timeout_s: float) -> None:
        """Handle pending feedback, waiting up to ``timeout_s`` for the first frame; then
        send the repairs the policy admits."""
        self._next_fb_check = now + FEEDBACK_CHECK_S
        core = self.core
        if (timeout_s > 0 and not self._poller.poll(max(1, math.ceil(timeout_s * 1000)))
                and not core.repairs_pending):
            return
        frames = drain(self._sub, 10_000)
        now = time.monotonic()
        for buf in frames:
            core.on_feedback(buf, now=now)
        for buf in core.repairs_due(now=now):
            self._pub.send(buf)

    def _hello(self, now: float) -> None:
        self._next_hello = now + self.hello_interval_s
        self._pub.send(self.core.hello(now=now))

    def wait_for_receivers(self, n: int, timeout: float = 10.0) -> int:
        """Block until ``n`` receivers answer this sender's HELLO on the data channel.

        An answer proves the data path from this sender to that receiver is up,
        which guards against ZeroMQ's slow-joiner loss. In ACK mode each of them
        must also have granted credit: until its first grant arrives the ledger does
        not know it, and the others' credit alone would let the sender overrun it.
        In NAK mode this presence is used only here, never for flow control.
        Raises TimeoutError.
        """
        with self._lock:
            return self._wait_for_receivers(n, timeout)

    def _wait_for_receivers(self, n: int, timeout: float) -> int:
        end = time.monotonic() + timeout
        flow = self._flow
        while True:
            now = time.monotonic()
            ready = set(self.core.echoed)
            if isinstance(flow, AckFlow):
                ready = ready & set(flow.ledger.receivers)
            if len(ready) >= n:
                return len(ready)
            if now >= end:
                raise TimeoutError(f"{len(ready)} of {n} receivers answered in {timeout} s")
            if now >= self._next_hello:
                self._hello(now)
            self._read_feedback(now, max(0.0, min(self._next_hello, end) - now))

    def _linger_for_repairs(self) -> None:
        """After END, answer repair requests while the core says to (``linger_wait``)."""
        start = time.monotonic()
        while True:
            now = time.monotonic()
            wait = self.core.linger_wait(start, now=now)
            if wait is None:
                return
            if self.core.repairs_pending:  # do not sleep on feedback while repairs wait:
                wait = min(wait, REPAIR_POLL_S)  # they leave as fast as the limit admits
            self._read_feedback(now, wait)

    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready."""
        return sender_snapshot(self)


class Sender(_SenderLink):
    """Publishes a stream to nakflow receivers under ``nak``, ``ack`` or ``none`` control.

    Args:
        data: receivers' data endpoints (list or comma-separated), or a multicast group.
        feedback: receivers' feedback endpoints, or the feedback multicast group.
        mode: ``"nak"`` (default), ``"ack"`` or ``"none"``.
        stream: stream name; feedback for other streams is ignored.
        sender_id: unique id of this sender (default: random).
        epoch: incarnation number; a restarted sender must use a new one
            (default: milliseconds since the Unix epoch, so restarts increase it).
        nak, ack: policy parameters.
        hello_interval_s: how often a sender waiting for receivers or credit says HELLO.
        max_rate_msgs: a cap in every mode (``nak``: its ceiling), msgs/s.
        timeline_interval_s: sampling interval of ``snapshot()["timeline"]`` (sent,
            rate limit, credit, blocked time over time; bounded in size).
        shared_key: seal every frame sent and accept only sealed feedback (HMAC-SHA256,
            replays refused; see ``nakflow._auth``). For multicast, where CURVE cannot go.
        repair: history and repair (``nak`` mode; on by default): receivers' requests
            for lost messages are answered from a bounded history of recent DATA.
        linger_s, frame_msgs, frame_bytes: natural batching (``nakflow._batch``):
            ``send`` appends to the DATA frame being built, which leaves when it holds
            ``frame_msgs`` messages or ``frame_bytes`` payload bytes, when its first
            message has waited ``linger_s`` (a timer thread sees to it while the
            application does not call in), before any wait, and on ``flush``, ``poll``
            and ``close``; a message after an idle spell of ``linger_s`` leaves at once.
            ``linger_s=0``: one message a frame.
        remember_rate: (``nak``) start from the rate the last sender on the same path
            (stream and data endpoints) in this process validated, if it ended within
            10 s, instead of slow start's ``initial_rate_msgs`` (``_rate_memory.RateMemory``;
            ``start_rate_msgs`` says where it began). For jobs that send in a series of
            short-lived senders, as Spark tasks do.

    Raises:
        ConfigError, transports.EndpointError: bad arguments.
    """

    def try_send(self, payload: bytes) -> bool:
        """Send one message if the policy allows it now; never blocks. True: it was
        admitted (it leaves with the frame being built, within ``linger_s``)."""
        with self._lock:
            now = time.monotonic()
            if not (self._allow and now < self._allow_until) and not self._take_allowance(now):
                self.try_refused += 1
                return False
            if self._batching:
                self._add(payload, now)
                self._allow -= 1
            else:
                self._allow -= 1
                self._emit(now, (payload,))
            return True

    def send(self, payload: bytes, timeout: float | None = None) -> None:
        """Send one message, waiting while the rate limit or credit says so.

        Raises TimeoutError if ``timeout`` seconds pass without permission, and
        ValueError for a payload larger than a frame may be.
        """
        with self._lock:
            now = time.monotonic()
            if self._batching:
                if (self._allow and now < self._allow_until) or self._take_allowance(now):
                    r = self._batch.offer(payload, now)  # raises before the permission
                    if r:  # is spent
                        self._offered(r, payload, now)
                    self._allow -= 1
                    return
                self._batch.check(payload)
                self._send_frame(now)  # what waits goes out before the sender waits
                granted, wait = self._flow.admit(1, now=now)
                if not granted:
                    now = self._wait_admit(1, wait, now, timeout)
                self._add(payload, now)
                return
            self._send_unbatched(payload, timeout, now)

    def _add(self, payload: bytes, now: float) -> None:
        """Append an admitted payload to the frame being built; send the frame if it
        should leave now (``FrameBatcher.offer``)."""
        r = self._batch.offer(payload, now)
        if r:
            self._offered(r, payload, now)

    def _offered(self, r: int, payload: bytes, now: float) -> None:
        if self._batch.settle(r, payload, now, self._send_frame):
            self._timer.arm()

    def _send_unbatched(self, payload: bytes, timeout: float | None, now: float) -> None:
        core = self.core
        if self._allow and now < self._allow_until and core.history is None and core.mac is None:
            seq = core.seq  # the hot path: permission in hand, nothing to remember or seal
            buf = pack_frame([VERSION, T_DATA, self.stream, self.sender_id, self.epoch, seq,
                              now + self._wall_offset, [payload], core.grtt_us])
            size = len(buf)
            if size > self.max_frame_bytes:
                raise ValueError(f"message of {size} bytes exceeds max_frame_bytes")
            self._pub.send(buf)
            self._allow -= 1
            core.seq = seq + 1
            core.frames += 1
            core.bytes += size
            return
        if (self._allow and now < self._allow_until) or self._take_allowance(now):
            self._allow -= 1
        else:
            granted, wait = self._flow.admit(1, now=now)
            if not granted:
                now = self._wait_admit(1, wait, now, timeout)
        self._emit(now, (payload,))

    def send_batch(self, payloads: Sequence[bytes], timeout: float | None = None) -> None:
        """Send many messages in few DATA frames, paced by the policy as a whole.

        Raises TimeoutError if ``timeout`` seconds pass without any permission;
        the messages sent before that stay sent (``self.seq`` says how many).
        """
        with self._lock:
            self._send_frame(time.monotonic())
            self._send_batch(payloads, timeout)

    def _send_batch(self, payloads: Sequence[bytes], timeout: float | None) -> None:
        self._give_back()
        i, n = 0, len(payloads)
        while i < n:
            j, size = i, 0
            while j < n and j - i < MAX_BATCH_MSGS and (size < MAX_BATCH_BYTES or j == i):
                size += len(payloads[j])
                j += 1
            now = time.monotonic()
            if now >= self._next_fb_check:
                self._read_feedback(now, 0.0)
            granted, wait = self._flow.admit(j - i, now=now)
            if not granted:
                if math.isinf(wait):  # credit: take what is granted when it comes
                    now = self._wait_admit(1, wait, now, timeout)
                    granted = 1
                else:
                    now = self._wait_admit(j - i, wait, now, timeout)
                    granted = j - i
            self._emit(now, payloads[i:i + granted])
            i += granted

    def _emit(self, now: float, payloads: Sequence[bytes]) -> None:
        self._pub.send(self.core.data(payloads, now=now))
        self.core.sample(now, self.blocked_s)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Handle feedback and serve repairs for up to ``timeout_s`` (a sender with nothing
        to send calls this now and then, so receivers' repair requests are answered).
        The frame being built leaves first."""
        with self._lock:
            self._give_back()
            self._send_frame(time.monotonic())
            end = time.monotonic() + timeout_s
            while True:
                now = time.monotonic()
                self._read_feedback(now, max(0.0, end - now))
                if time.monotonic() >= end:
                    return

    def flush(self) -> None:
        """Send the frame being built, then mark the stream complete: END with the final
        sequence number."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        self._give_back()
        now = time.monotonic()
        self._send_frame(now)
        self._read_feedback(now, 0.0)
        if self.core.seq == 0 and not self.core.said_hello:  # receivers count ENDs of
            self._hello(now)  # streams they heard
        self._pub.send(self.core.end(now=now))

    def close(self, linger_s: float | None = None) -> None:
        """Send END (again), serve repair requests for a moment, send BYE, close sockets."""
        self._close(linger_s, end=True)

    def abort(self, linger_s: float | None = None) -> None:
        """Leave without END: receivers see this (sender, epoch) as incomplete.

        For a sender whose work failed part-way (a Spark task that raised and
        will be retried under a new epoch): END would claim the stream complete.
        """
        self._close(linger_s, end=False)

    def _close(self, linger_s: float | None, *, end: bool) -> None:
        if self._closed:
            return
        if os.getpid() != self._pid:  # a forked copy must not touch the parent's sockets
            self._closed = True
            return
        with self._lock:
            self._closed = True
            self._timer.closed = True
            try:
                if end:
                    self._flush()  # END again even after flush(): it is idempotent, and on
                    # a lossy transport (multicast without flow control) one copy can be lost
                    self._linger_for_repairs()
                    self._remember_rate()
                else:  # what was admitted goes out; the stream stays incomplete (no END)
                    self._send_frame(time.monotonic())
                self._pub.send(self.core.bye(now=time.monotonic()))
            finally:
                linger = None if linger_s is None else int(linger_s * 1000)
                self._pub.close(linger)
                self._sub.close(0)
        self._timer.stop()

    def _remember_rate(self) -> None:
        """A stream that ended leaves its validated rate for the next sender on its path."""
        ctrl = getattr(self._flow, "controller", None)
        if self._rate_key is None or ctrl is None:
            return
        now = time.monotonic()
        rate = ctrl.validated_rate(now=now)
        if rate is not None:
            RATE_MEMORY.remember(self._rate_key, rate, now=now)

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sender_snapshot(tx: Any) -> dict[str, Any]:
    """A sender's snapshot from its parts (shared by Sender and AsyncSender)."""
    elapsed = time.monotonic() - tx._t0
    core = tx.core.snapshot()
    policy = core.pop("policy")
    sent = tx.sent
    return {
        "sender_id": tx.sender_id,
        "epoch": tx.epoch,
        "stream": tx.stream,
        "mode": tx.mode,
        "sent": sent,
        "frames": tx.core.frames,
        "bytes": tx.core.bytes,
        "elapsed_s": round(elapsed, 6),
        "rate_msgs": round(sent / elapsed, 1) if elapsed > 0 else 0.0,
        "blocked_s": round(tx.blocked_s, 6),
        "credit_stalled_s": round(tx.credit_stalled_s, 6),
        "try_refused": tx.try_refused,
        "start_rate_msgs": getattr(tx, "start_rate_msgs", None),
        **core,
        "policy": policy,
        "timeline": tx.core.timeline.as_dict(t0=tx._t0),
    }


from ._speedups import use_compiled  # noqa: E402

use_compiled(globals())
