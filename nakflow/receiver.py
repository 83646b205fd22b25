"""The live receiver: an I/O thread fills a bounded queue; the application drains it.

The I/O thread owns every socket: it reads DATA into the queue, accounts
sequence numbers, and sends the feedback the policy decides (``nak``: a
FillMonitor's NAKs; ``ack``: a CreditGranter's credits). The application
consumes by iteration, ``get``, ``get_many`` or a handler callback.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import zmq

from transports import SocketOptions, drain, open_pub, open_sub, parse_endpoints

from ._auth import SharedKey
from ._backpressure import BackpressureEpisodes
from ._codec import DEFAULT_MAX_FRAME_BYTES
from ._config import AckConfig, NakConfig, RepairConfig, check_mode
from ._delivery_queue import OVERFLOW_POLICIES, DeliveryQueue
from ._errors import ConfigError
from ._receiver_core import Key, Message, ReceiverCore
from ._seqtrack import MAX_STREAMS
from ._timeline import Timeline

__all__ = ["OVERFLOW_POLICIES", "Message", "Receiver"]

log = logging.getLogger("nakflow.receiver")

IDLE_POLL_S = 0.1  # longest the I/O thread sleeps with nothing due (close() also wakes it)


class _ReceiverIO:
    """The I/O thread's half of a Receiver: it owns the sockets, reads DATA through the
    core into the queue (``DeliveryQueue``), and sends the feedback the core decides."""

    core: ReceiverCore
    overflow: str
    hello_interval_s: float
    timeline: Timeline
    error: BaseException | None
    _data: Any
    _fb: Any
    _hear: Any
    _auth: Any
    _wake_r: int
    _wake_w: int
    _inbox: DeliveryQueue
    _episodes: BackpressureEpisodes
    _pending: deque[tuple[Key, Message]]
    _behind_since: float | None
    _ends_seen: int
    _chunk: int
    _stopping: bool
    _core_lock: threading.Lock
    _t_end: float | None

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    # -- I/O thread ----------------------------------------------------------------
    def _io_main(self) -> None:
        try:
            self._io_loop()
        except BaseException as exc:  # surfaced in snapshot()["error"] and the log
            self.error = exc
            log.exception("receiver I/O thread failed")
        finally:
            try:
                self._fb.send(self.core.bye(now=time.monotonic()))
            except zmq.ZMQError:
                pass
            self._t_end = time.monotonic()
            for s in (self._data, self._fb, self._hear):
                if s is not None:
                    s.close(200)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._stop_auth()
            self._inbox.finish()

    def _stop_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def _io_loop(self) -> None:
        core = self.core
        with_data = zmq.Poller()
        without_data = zmq.Poller()
        for p in (with_data, without_data):
            if self._hear is not None:
                p.register(self._hear, zmq.POLLIN)
            p.register(self._wake_r, zmq.POLLIN)
        with_data.register(self._data, zmq.POLLIN)
        next_hello = time.monotonic()
        while not self._stopping:
            now = time.monotonic()
            if now >= next_hello:
                with self._core_lock:
                    self._fb.send(core.hello(now=now))
                next_hello = now + self.hello_interval_s
            deadline = min(next_hello, now + IDLE_POLL_S)
            fd = core.next_deadline()
            if fd is not None:
                deadline = min(deadline, fd)
            blocked = self._pending or (self.overflow == "block" and self._inbox.full)
            poller = without_data if blocked else with_data
            events = dict(poller.poll(max(0, math.ceil((deadline - now) * 1000))))
            with self._core_lock:  # snapshot() reads the core's tables from other threads
                self._handle(events)

    def _handle(self, events: dict[Any, int]) -> None:
        if self._data in events:
            self._read_data()
        if self._hear is not None and self._hear in events:
            now = time.monotonic()
            for buf in drain(self._hear, 1000):
                self.core.on_overheard(buf, now=now)
        if self._wake_r in events:
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass
        if self._pending:
            self._flush_chunk()
        self._feedback(time.monotonic())

    def _read_data(self) -> None:
        """Read until a chunk of *messages* is pending (a batched frame holds many)."""
        core, pend, chunk, frames = self.core, self._pending, self._chunk, 0
        recv, deliver, send = self._data.recv, pend.append, self._fb.send
        now = time.monotonic()
        try:
            while len(pend) < chunk and frames < chunk:
                buf = recv(zmq.NOBLOCK)
                frames += 1
                for out in core.on_data(buf, deliver, now=now):
                    send(out)
        except zmq.Again:
            pass
        # behind = frames still waiting after a whole chunk was read
        full = ((len(pend) >= chunk or frames >= chunk)
                and bool(int(self._data.get(zmq.EVENTS)) & zmq.POLLIN))
        self._flush_chunk()
        if core.ends_changed != self._ends_seen:
            self._ends_seen = core.ends_changed
            self._inbox.set_ends(core.ends, len(core.left))
        if not full:
            self._behind_since = None
        elif self._behind_since is None:
            self._behind_since = time.monotonic()

    def _feedback(self, now: float) -> None:
        core = self.core
        released, depth = self._inbox.released()
        for key, n in released.items():
            core.on_released(key, n)
        self._episodes.observe(depth, now=now)
        seen_depth = core.seen_depth(depth, self._behind_since, now=now)
        for buf in core.poll(seen_depth, now=now):
            self._fb.send(buf)
        if self.timeline.due(now):
            self.timeline.sample(now, depth, seen_depth, core.messages_in, self.delivered,
                                 core.dropped)

    @property
    def delivered(self) -> int:
        """Messages the application took."""
        return self._inbox.delivered

    def _flush_chunk(self) -> None:
        """Move pending messages into the queue, applying the overflow policy."""
        self._inbox.put(self._pending, on_dropped=self.core.on_dropped,
                        on_enqueued=self.core.on_enqueued)



class Receiver(_ReceiverIO):
    """Receives a stream into a bounded queue and speaks up only as its policy says.

    Args:
        data: endpoints to bind for DATA (tcp/ipc/inproc; ``tcp://127.0.0.1:*`` picks a
            port, see ``data_endpoints``) or the multicast group to join.
        feedback: endpoints to bind for feedback, or the feedback multicast group.
        mode: ``"nak"`` (default), ``"ack"`` or ``"none"``.
        capacity_msgs: queue bound, messages.
        overflow: ``"drop-newest"`` (default), ``"drop-oldest"`` or ``"block"``
            (stop reading the socket while full; ZeroMQ then queues, and past its
            high-water mark the sender's PUB drops, seen here as loss in flight).
        drop_duplicates: deliver each (sender id, seq) once across epochs.
        overhear: other receivers' feedback endpoints, to suppress NAKs they already
            sent (with multicast everyone hears everyone and this is not needed).
        handler: if given, a consumer thread calls it for every message.
        timeline_interval_s: sampling interval of ``snapshot()["timeline"]`` (queue depth,
            delivered, dropped, NAK level held over time; bounded in size).
        shared_key: accept only frames sealed with this key (replays refused) and seal
            this receiver's feedback (HMAC-SHA256; see ``nakflow._auth``). For multicast,
            where CURVE cannot go.
        max_streams: (sender, epoch) streams accounted at once; past it the oldest
            ended one is forgotten (bounds memory whatever arrives).
        repair: repair requests (``nak`` mode; on by default): messages lost in flight,
            and those this receiver's full queue dropped once room is back, are asked
            for from the senders' histories. Repaired messages arrive after newer ones
            (each ``Message`` carries its seq); what the history no longer holds is
            reported as ``beyond_history``.
        test_data_loss: for tests: drop this fraction of DATA frames after reading them,
            as loss in flight would (counted in ``test_dropped``).

    Raises:
        ConfigError, transports.EndpointError, zmq.ZMQError (e.g. address in use).
    """

    def __init__(self, data: str | Sequence[str], feedback: str | Sequence[str], *,
                 mode: str = "nak", stream: str = "default", receiver_id: str | None = None,
                 capacity_msgs: int = 10_000, overflow: str = "drop-newest",
                 drop_duplicates: bool = False, overhear: str | Sequence[str] = (),
                 nak: NakConfig | None = None, ack: AckConfig | None = None,
                 options: SocketOptions | None = None,
                 context: zmq.Context[zmq.Socket[bytes]] | None = None,
                 hello_interval_s: float = 0.5,
                 handler: Callable[[Message], object] | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 timeline_interval_s: float = 0.05,
                 shared_key: SharedKey | None = None,
                 max_streams: int = MAX_STREAMS,
                 repair: RepairConfig | None = None, test_data_loss: float = 0.0) -> None:
        self.mode = check_mode(mode)
        if overflow not in OVERFLOW_POLICIES:
            raise ConfigError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}")
        if capacity_msgs < 1:
            raise ConfigError("capacity_msgs must be >= 1")
        self.stream = stream
        self.receiver_id = receiver_id or f"r-{uuid.uuid4().hex[:12]}"
        self.capacity_msgs = capacity_msgs
        self.overflow = overflow
        self.hello_interval_s = hello_interval_s
        self.max_frame_bytes = max_frame_bytes
        if max_streams < 1:
            raise ConfigError("max_streams must be >= 1")
        self._t0 = time.monotonic()
        self._wall_offset = time.time() - self._t0
        self.core = ReceiverCore(mode=self.mode, stream=stream, receiver_id=self.receiver_id,
                                 capacity_msgs=capacity_msgs, nak=nak, ack=ack, repair=repair,
                                 rng=random.Random(), drop_duplicates=drop_duplicates,
                                 max_streams=max_streams, shared_key=shared_key,
                                 max_frame_bytes=max_frame_bytes,
                                 wall_offset=self._wall_offset, test_data_loss=test_data_loss)
        self._episodes = BackpressureEpisodes(capacity_msgs)
        self._chunk = max(1, min(256, capacity_msgs // 20))
        ack_cfg = ack or AckConfig()

        sockets = open_receiver_sockets(context, data, feedback, overhear, options)
        self._data, self.data_endpoints, self._fb, self.feedback_endpoints = sockets[:4]
        self._hear, self._auth = sockets[4:]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

        # shared between the I/O thread and consumers
        self._inbox = DeliveryQueue(capacity_msgs, overflow, wake=self._wake, wake_every=max(
            1, int(capacity_msgs * ack_cfg.regrant_fraction / 4)))
        self._stopping = False
        self._core_lock = threading.Lock()  # held by the I/O thread while it uses the core
        # owned by the I/O thread
        self._pending: deque[tuple[Key, Message]] = deque()
        self._behind_since: float | None = None
        self._ends_seen = 0
        self.handler_errors = 0
        self.error: BaseException | None = None
        self._t_end: float | None = None
        self.timeline = Timeline(("depth", "seen_depth", "received", "delivered", "dropped"),
                                 interval_s=timeline_interval_s)

        self._io = threading.Thread(target=self._io_main, name=f"nakflow-rx-{self.receiver_id}",
                                    daemon=True)
        self._io.start()
        self._consumer: threading.Thread | None = None
        if handler is not None:
            self._consumer = threading.Thread(target=self._consume_with, args=(handler,),
                                              name="nakflow-rx-handler", daemon=True)
            self._consumer.start()

    # -- application side --------------------------------------------------------
    def get(self, timeout: float | None = None) -> Message | None:
        """Next message; None on timeout, or once closed and drained."""
        out = self.get_many(1, timeout)
        return out[0] if out else None

    def get_many(self, max_n: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_n`` messages; waits up to ``timeout`` for the first one."""
        return self._inbox.take(max_n, timeout)

    @property
    def queue_peak(self) -> int:
        return self._inbox.queue_peak

    def __iter__(self) -> Iterator[Message]:
        """Messages until the receiver is closed and drained."""
        while True:
            batch = self.get_many(256, timeout=None)
            if not batch:
                return
            yield from batch

    def _consume_with(self, handler: Callable[[Message], object]) -> None:
        for msg in self:
            try:
                handler(msg)
            except Exception:
                self.handler_errors += 1
                log.exception("handler raised on %s/%d seq %d", msg.sender, msg.epoch, msg.seq)

    def depth(self) -> int:
        return len(self._inbox)

    @property
    def frames_in(self) -> int:
        """Frames read from the data channel (any, malformed ones included)."""
        return self.core.frames_in

    @property
    def dropped(self) -> int:
        """Messages the full queue dropped (some may have been repaired since)."""
        return self.core.dropped

    def awaiting_repair(self) -> int:
        """Streams still missing messages this receiver asks to have repaired (0 once
        everything arrived, or was reported beyond history or given up)."""
        return len(self.core.tracker.with_gaps)

    def ends(self) -> dict[Key, int]:
        """END frames seen: (sender, epoch) -> final seq. Only of streams this receiver
        heard before their END (DATA or HELLO; a sender that sent nothing says HELLO before
        END), so a stranger's END cannot make ``wait_for_ends`` return early."""
        return self._inbox.ends()

    def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        """Wait until END arrived from ``n`` distinct senders; False on timeout."""
        return self._inbox.wait_for_ends(n, timeout)

    def finished(self) -> int:
        """Senders heard that ended (END) or left without END (an aborted sender)."""
        return self._inbox.finished()

    def done(self, senders: int) -> bool:
        """``senders`` senders have finished, every repair this receiver waits for came
        (or was given up), and the queue is empty: their streams are over here."""
        return (self.finished() >= senders and not self.awaiting_repair()
                and not len(self._inbox) and not self._pending)

    def messages(self, senders: int = 1, timeout: float | None = 30.0) -> Iterator[Message]:
        """The messages of ``senders`` streams, until they are over here (``done``).

        Raises TimeoutError if that takes more than ``timeout`` seconds (None: no limit):
        a sender that died without END never finishes. ``for msg in rx`` instead runs
        until the receiver is closed (a service's loop).
        """
        end = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            batch = self.get_many(256, timeout=0.05)
            yield from batch
            if not batch and self.done(senders):
                return
            if time.monotonic() >= end:
                raise TimeoutError(f"{self.finished()} of {senders} senders finished within "
                                   f"{timeout} s")

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until the consumer has emptied the queue; False on timeout."""
        return self._inbox.wait_empty(self._pending, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the I/O thread (sending BYE) and close the sockets.

        Messages still queued stay available to ``get`` and are reported as
        ``queued`` in the snapshot: nothing disappears silently.
        """
        with self._inbox.cond:
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

    # -- metrics -----------------------------------------------------------------
    def latency_ms(self) -> dict[str, float | None]:
        """Send-to-delivery latency (see ``DeliveryQueue.latency_ms``)."""
        return self._inbox.latency_ms()

    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready.

        ``dropped`` counts what the full queue dropped; ``dropped_unrepaired``, ``lost``
        (in flight) and ``beyond_history`` what is still missing for good or for now;
        ``repaired`` how many of ``delivered`` came by repair.
        """
        with self._core_lock:  # the I/O thread changes the tables while it handles frames
            core_snap = self.core.snapshot()
        return receiver_snapshot(self, core_snap, len(self._pending))


def receiver_snapshot(rx: Any, core_snap: dict[str, Any], pending: int) -> dict[str, Any]:
    """A receiver's snapshot from its parts (shared by Receiver and AsyncReceiver)."""
    now = time.monotonic()
    core, inbox = rx.core, rx._inbox
    elapsed = (rx._t_end or now) - rx._t0
    first = None if core.first_data_at is None else core.first_data_at + rx._wall_offset
    last = inbox.t_last_delivery
    active = max(0.0, last - first) if first is not None and last is not None else 0.0
    return {
        "receiver_id": rx.receiver_id,
        "stream": rx.stream,
        "mode": rx.mode,
        "capacity_msgs": rx.capacity_msgs,
        "overflow": rx.overflow,
        "elapsed_s": round(elapsed, 6),
        "started_at": round(rx._t0 + rx._wall_offset, 6),  # wall time of timeline t=0
        "delivered": inbox.delivered,
        "active_s": round(active, 6),
        "goodput_msgs": round(inbox.delivered / active, 1) if active > 0 else 0.0,
        "queued": len(inbox) + pending,
        "queue_peak": inbox.queue_peak,
        **core_snap,
        "latency_ms": inbox.latency_ms(),
        **rx._episodes.snapshot(now=now),
        "handler_errors": rx.handler_errors,
        "error": None if rx.error is None else repr(rx.error),
        "timeline": rx.timeline.as_dict(t0=rx._t0),
    }


def open_receiver_sockets(context: zmq.Context[zmq.Socket[bytes]] | None, data: str | Sequence[str],
                  feedback: str | Sequence[str], overhear: str | Sequence[str],
                  options: SocketOptions | None) -> tuple[Any, list[str], Any, list[str], Any,
                                                          Any]:
    """(data SUB, its endpoints, feedback PUB, its endpoints, overhearing SUB or None,
    CURVE authenticator or None), all closed again if any of them fails."""
    curve = options.curve if options is not None else None
    auth: Any = None
    if curve is not None:
        if not curve.authorized_dir:
            raise ConfigError("a CURVE receiver needs authorized_dir (--curve-authorized): "
                              "a directory of the public keys allowed to connect")
        if not os.path.isdir(curve.authorized_dir):
            raise ConfigError(f"CURVE authorized_dir {curve.authorized_dir!r} is not a "
                              "directory (it holds the public keys allowed to connect)")
        from zmq.auth.thread import ThreadAuthenticator

        # the ZAP handler belongs to a context: give this receiver its own
        ctx = context or zmq.Context()
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=curve.authorized_dir)
    else:
        ctx = context or zmq.Context.instance()
    sockets: list[zmq.Socket[bytes]] = []
    try:
        sub, data_eps = open_sub(ctx, parse_endpoints(data), bind=True, options=options)
        sockets.append(sub)
        pub, fb_eps = open_pub(ctx, parse_endpoints(feedback), bind=True, options=options)
        sockets.append(pub)
        hear_uris = parse_endpoints(overhear) if overhear else []
        fb_uris = parse_endpoints(feedback)
        if any(u.startswith(("epgm://", "pgm://")) for u in fb_uris):
            hear_uris += fb_uris  # on multicast, the feedback group is where the others speak
        hear = None
        if hear_uris:
            hear, _ = open_sub(ctx, hear_uris, bind=False, options=options)
            sockets.append(hear)
    except BaseException:
        for sock in sockets:
            sock.close(0)
        if auth is not None:
            auth.stop()
        raise
    return sub, data_eps, pub, fb_eps, hear, auth
