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
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import zmq

from transports import SocketOptions, drain, open_pub, open_sub, parse_endpoints

from ._auth import AuthError, FrameAuth, SharedKey, looks_sealed, origin, unseal
from ._codec import (
    DEFAULT_MAX_FRAME_BYTES,
    Bye,
    Data,
    End,
    Frame,
    Hello,
    decode,
    decode_data,
    encode,
)
from ._config import AckConfig, NakConfig, check_mode
from ._episodes import BackpressureEpisodes
from ._errors import ConfigError, ProtocolError
from ._flow import is_other_modes_feedback, make_receiver_flow
from ._seqtrack import MAX_STREAMS, SequenceTracker
from ._timeline import Timeline

log = logging.getLogger("nakflow.receiver")

OVERFLOW_POLICIES = ("drop-newest", "drop-oldest", "block")
LATENCY_SAMPLES = 1 << 16
LATENCY_PER_CALL = 32  # latency samples taken per get_many call, at most about
#: A sampled "latency" outside this range is a wrong clock or a forged timestamp, not a
#: latency: it is counted (``latency_ms["outliers"]``) and left out, s.
LATENCY_MIN_S, LATENCY_MAX_S = -3_600.0, 86_400.0
IDLE_POLL_S = 0.1  # longest the I/O thread sleeps with nothing due (close() also wakes it)
#: Socket backlog is part of the inbound queue but ZeroMQ cannot report its size. When
#: every read finds a full chunk waiting, the I/O thread is behind; after being behind for
#: these multiples of the NAK window, the queue counts as 50/75/87/100 % full.
SATURATION_FILL = ((4.0, 1.0), (2.0, 0.87), (1.0, 0.75), (0.2, 0.5))


_key_of = itemgetter(0)
_message_of = itemgetter(1)


class Message(NamedTuple):
    """One delivered message."""

    sender: str
    epoch: int
    seq: int
    ts: float
    payload: bytes


class Receiver:
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
                 max_streams: int = MAX_STREAMS) -> None:
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
        self._flow = make_receiver_flow(mode, stream=stream, receiver=self.receiver_id,
                                        capacity_msgs=capacity_msgs, nak=nak, ack=ack,
                                        rng=random.Random())
        self._mac = (None if shared_key is None
                      else FrameAuth(shared_key))
        self._warned_auth = False
        if max_streams < 1:
            raise ConfigError("max_streams must be >= 1")
        self._tracker = SequenceTracker(drop_duplicates=drop_duplicates, max_streams=max_streams)
        self._episodes = BackpressureEpisodes(capacity_msgs)
        self._chunk = max(1, min(256, capacity_msgs // 20))
        ack_cfg = ack or AckConfig()
        self._wake_every = max(1, int(capacity_msgs * ack_cfg.regrant_fraction / 4))

        curve = options.curve if options is not None else None
        self._auth: Any = None
        if curve is not None:
            if not curve.authorized_dir or not os.path.isdir(curve.authorized_dir):
                raise ConfigError("a CURVE receiver needs authorized_dir: a directory of the "
                                  "public keys allowed to connect")
            from zmq.auth.thread import ThreadAuthenticator

            # the ZAP handler belongs to a context: give this receiver its own
            ctx = context or zmq.Context()
            self._auth = ThreadAuthenticator(ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=curve.authorized_dir)
        else:
            ctx = context or zmq.Context.instance()
        sockets: list[zmq.Socket[bytes]] = []
        try:
            self._data, self.data_endpoints = open_sub(ctx, parse_endpoints(data), bind=True,
                                                       options=options)
            sockets.append(self._data)
            self._fb, self.feedback_endpoints = open_pub(ctx, parse_endpoints(feedback),
                                                         bind=True, options=options)
            sockets.append(self._fb)
            hear = parse_endpoints(overhear) if overhear else []
            fb_uris = parse_endpoints(feedback)
            if any(u.startswith(("epgm://", "pgm://")) for u in fb_uris):
                hear += fb_uris  # on multicast, the feedback group is where the others speak
            self._hear: zmq.Socket[bytes] | None = None
            if hear:
                self._hear, _ = open_sub(ctx, hear, bind=False, options=options)
                sockets.append(self._hear)
        except BaseException:
            for s in sockets:
                s.close(0)
            self._stop_auth()
            raise
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

        # shared between the I/O thread and consumers, under _cond
        self._cond = threading.Condition()
        self._queue: deque[tuple[tuple[str, int], Message]] = deque()
        self._released: dict[tuple[str, int], int] = {}
        self._since_wake = 0
        self._stopping = False
        self._io_done = False
        self.delivered = 0
        self._t_last_delivery: float | None = None
        self._lat = np.zeros(LATENCY_SAMPLES)
        self._lat_n = 0
        self._lat_max = 0.0
        self._lat_outliers = 0
        # owned by the I/O thread
        self._pending: deque[tuple[tuple[str, int], Message]] = deque()
        self._behind_since: float | None = None
        self._window_s = (nak or NakConfig()).window_s
        self._ends: dict[tuple[str, int], int] = {}
        self._hellos: dict[tuple[str, int], None] = {}  # senders heard saying HELLO
        self._warned_mode = False
        self.frames_in = 0
        self.messages_in = 0
        self.malformed = 0
        self.foreign = 0
        self.dropped = 0
        self.queue_peak = 0
        self.feedback_sent = 0
        self.feedback_bytes = 0
        self.handler_errors = 0
        self.saturated_polls = 0
        self._dropped_seen = 0
        self.error: BaseException | None = None
        self._t0 = time.monotonic()
        self._wall_offset = time.time() - self._t0
        self._t_end: float | None = None
        self._t_first_data: float | None = None
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
        wake = False
        with self._cond:
            q = self._queue
            if not q:
                end = None if timeout is None else time.monotonic() + timeout
                while not q:
                    if self._io_done:
                        return []
                    remaining = None if end is None else end - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return []
                    self._cond.wait(remaining)
            was_full = len(q) >= self.capacity_msgs
            n = min(max_n, len(q))
            if n == len(q):  # all of it (a consumer that keeps up): no per-item pops
                items = list(q)
                q.clear()
            else:
                items = [q.popleft() for _ in range(n)]
            released = self._released
            for key, count in Counter(map(_key_of, items)).items():
                released[key] = released.get(key, 0) + count
            self.delivered += n
            now_wall = time.time()
            self._t_last_delivery = now_wall
            if not q:
                self._cond.notify_all()  # wait_drained()
            self._since_wake += n
            if self._since_wake >= self._wake_every or (was_full and self.overflow == "block"):
                self._since_wake = 0
                wake = True
            lat, i = self._lat, self._lat_n
            # latency of a sample (the first, the oldest, is always in it): per-item
            # bookkeeping would cost more than the rest of the delivery
            for _, m in items[::max(1, n // LATENCY_PER_CALL)]:
                d = now_wall - m.ts
                if not LATENCY_MIN_S <= d <= LATENCY_MAX_S:
                    self._lat_outliers += 1
                    continue
                lat[i % LATENCY_SAMPLES] = d
                i += 1
                if d > self._lat_max:
                    self._lat_max = d
            self._lat_n = i
        if wake:
            self._wake()
        return list(map(_message_of, items))

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
        return len(self._queue)

    def ends(self) -> dict[tuple[str, int], int]:
        """END frames seen: (sender, epoch) -> final seq. Only of streams this receiver
        heard before their END (DATA or HELLO; a sender that sent nothing says HELLO before
        END), so a stranger's END cannot make ``wait_for_ends`` return early."""
        return dict(self._ends)

    def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        """Wait until END arrived from ``n`` distinct senders; False on timeout."""
        end = math.inf if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._ends) < n:
                remaining = end - time.monotonic()
                if remaining <= 0 or self._io_done:
                    return len(self._ends) >= n
                self._cond.wait(min(remaining, 1.0))
        return True

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until the consumer has emptied the queue; False on timeout."""
        end = math.inf if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._pending:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 1.0))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the I/O thread (sending BYE) and close the sockets.

        Messages still queued stay available to ``get`` and are reported as
        ``queued`` in the snapshot: nothing disappears silently.
        """
        with self._cond:
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
                self._fb.send(self._seal(encode(Bye(self.stream, self.receiver_id, "receiver", 0,
                                                    time.monotonic() + self._wall_offset))))
            except zmq.ZMQError:
                pass
            self._t_end = time.monotonic()
            for s in (self._data, self._fb, self._hear):
                if s is not None:
                    s.close(200)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._stop_auth()
            with self._cond:
                self._io_done = True
                self._cond.notify_all()

    def _stop_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def _io_loop(self) -> None:
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
                self._send(Hello(self.stream, self.receiver_id, "receiver", self.mode, 0, 0, "",
                                 now + self._wall_offset))
                next_hello = now + self.hello_interval_s
            deadline = min(next_hello, now + IDLE_POLL_S)
            fd = self._flow.next_deadline()
            if fd is not None:
                deadline = min(deadline, fd)
            blocked = self._pending or (self.overflow == "block"
                                        and len(self._queue) >= self.capacity_msgs)
            poller = without_data if blocked else with_data
            events = dict(poller.poll(max(0, math.ceil((deadline - now) * 1000))))
            if self._data in events:
                # read until a chunk of *messages* is pending (a batched frame holds many)
                pend, chunk, frames = self._pending, self._chunk, 0
                recv = self._data.recv
                try:
                    while len(pend) < chunk and frames < chunk:
                        buf = recv(zmq.NOBLOCK)
                        frames += 1
                        self._on_data_socket(buf)
                except zmq.Again:
                    pass
                # behind = frames still waiting after a whole chunk was read
                full = ((len(pend) >= chunk or frames >= chunk)
                        and bool(int(self._data.get(zmq.EVENTS)) & zmq.POLLIN))
                self._flush_chunk()
                if not full:
                    self._behind_since = None
                elif self._behind_since is None:
                    self._behind_since = time.monotonic()
            if self._hear is not None and self._hear in events:
                now = time.monotonic()
                for buf in drain(self._hear, 1000):
                    self._on_overheard(buf, now)
            if self._wake_r in events:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            if self._pending:
                self._flush_chunk()
            self._feedback(time.monotonic())

    def _seal(self, buf: bytes) -> bytes:
        return buf if self._mac is None else self._mac.seal(buf, now=time.time())

    def _send(self, frame: Frame) -> None:
        buf = self._seal(encode(frame))
        self._fb.send(buf)
        self.feedback_sent += 1
        self.feedback_bytes += len(buf)

    def _feedback(self, now: float) -> None:
        with self._cond:
            released, self._released = self._released, {}
            depth = len(self._queue)
        for key, n in released.items():
            self._flow.on_released(key, n)
        self._episodes.observe(depth, now=now)
        seen_depth = depth
        if self.dropped > self._dropped_seen:  # overflowed since the last look: it was full
            self._dropped_seen = self.dropped
            seen_depth = self.capacity_msgs
        if self._behind_since is not None:
            behind = (now - self._behind_since) / self._window_s
            for windows, fill in SATURATION_FILL:
                if behind >= windows:
                    seen_depth = max(depth, math.ceil(fill * self.capacity_msgs))
                    self.saturated_polls += 1
                    break
        for frame in self._flow.poll(seen_depth, now=now):
            self._send(frame)
        if self.timeline.due(now):
            self.timeline.sample(now, depth, seen_depth, self.messages_in, self.delivered,
                                 self.dropped)

    def _decode_own(self, buf: bytes) -> Frame | None:
        """Decode a frame of this stream; count and drop malformed, foreign, unsealed
        (with a shared key) and replayed ones."""
        try:
            body, counter = unseal(self._mac, buf)
            frame = decode(body, self.max_frame_bytes)
        except AuthError as exc:
            self._warn_auth(f"frame refused: {exc}")
            return None
        except ProtocolError:
            self._count_malformed(buf)
            return None
        if frame.stream != self.stream:
            self.foreign += 1
            return None
        if self._mac is not None and not self._admit(origin(frame), counter):
            return None
        return frame

    def _admit(self, node: tuple[str, int], counter: int) -> bool:
        assert self._mac is not None
        return self._mac.admit(node, counter, now=time.monotonic() + self._wall_offset)

    def _count_malformed(self, buf: bytes) -> None:
        self.malformed += 1
        if self._mac is None and looks_sealed(buf):
            self._warn_auth("frames are sealed with a shared key, but this receiver has "
                            "none (shared_key=)")

    def _warn_auth(self, what: str) -> None:
        if not self._warned_auth:
            self._warned_auth = True
            log.warning("stream %r: %s (counted in snapshot()['auth'])", self.stream, what)

    def _on_data_socket(self, buf: bytes) -> None:
        self.frames_in += 1
        auth = self._mac
        try:
            body, counter = unseal(auth, buf)
            got = decode_data(body, self.max_frame_bytes)
        except AuthError as exc:
            self._warn_auth(f"frame refused: {exc}")
            return
        except ProtocolError:
            self._count_malformed(buf)
            return
        if type(got) is tuple:  # DATA, the hot path
            stream, sender, epoch, seq, ts, payloads = got
            if stream != self.stream:
                self.foreign += 1
                return
            if auth is not None and not self._admit((sender, epoch), counter):
                return
            self._on_data(sender, epoch, seq, ts, payloads)
            return
        frame = got
        assert not isinstance(frame, tuple)
        if frame.stream != self.stream:
            self.foreign += 1
            return
        if auth is not None and not self._admit(origin(frame), counter):
            return
        now = time.monotonic()
        if isinstance(frame, Data):  # DATA that the hot path left to the full decoder
            self._on_data(frame.sender, frame.epoch, frame.seq, frame.ts, frame.payloads)
        elif isinstance(frame, Hello) and frame.role == "sender":
            if frame.mode != self.mode:
                self._warn_mode(f"sender {frame.node} runs mode {frame.mode!r}")
            # a sender repeats HELLO while it waits (for receivers, or for credit)
            key = (frame.node, frame.epoch)
            self._flow.on_sender(key, frame.next_seq, now=now, waiting=True)
            if key not in self._hellos:
                self._hellos[key] = None
                if len(self._hellos) > self._tracker.max_streams:
                    del self._hellos[next(iter(self._hellos))]
            self._send(Hello(self.stream, self.receiver_id, "receiver", self.mode, 0, 0, frame.node,
                             now + self._wall_offset))
        elif isinstance(frame, End):
            key = (frame.sender, frame.epoch)
            heard = key in self._hellos or key in self._tracker.streams
            self._tracker.on_end(frame.sender, frame.epoch, frame.final_seq)
            self._flow.on_sender_gone(key)
            if heard:
                with self._cond:
                    self._ends[key] = frame.final_seq
                    if len(self._ends) > self._tracker.max_streams:  # bounded, like the tracker
                        del self._ends[next(iter(self._ends))]
                    self._cond.notify_all()
        elif isinstance(frame, Bye) and frame.role == "sender":
            # after END this changes nothing; without END (an aborted sender) its stream
            # stays incomplete and its credit window is freed for the others
            self._flow.on_sender_gone((frame.node, frame.epoch))
        else:
            self.foreign += 1  # feedback-type frames do not belong on the data channel

    def _on_data(self, sender: str, epoch: int, seq: int, ts: float,
                 payloads: Sequence[bytes]) -> None:
        key = (sender, epoch)
        count = len(payloads)
        if self._t_first_data is None:
            self._t_first_data = time.time()
        self.messages_in += count
        ranges = self._tracker.on_data(sender, epoch, seq, count)
        self._flow.on_sender(key, seq + count, now=time.monotonic())
        pend = self._pending
        if len(ranges) == 1 and ranges[0] == (0, count):  # all new: the usual case
            pend.extend([(key, Message(sender, epoch, seq + i, ts, p))
                         for i, p in enumerate(payloads)])
            return
        for lo, hi in ranges:
            for i in range(lo, hi):
                pend.append((key, Message(sender, epoch, seq + i, ts, payloads[i])))

    def _flush_chunk(self) -> None:
        """Move pending messages into the queue, applying the overflow policy."""
        pend = self._pending
        if not pend:
            return
        cap = self.capacity_msgs
        enq: dict[tuple[str, int], int] = {}
        dropped = 0
        with self._cond:
            q = self._queue
            while pend:
                if len(q) >= cap:
                    if self.overflow == "block":
                        break
                    if self.overflow == "drop-newest":
                        pend.popleft()
                        dropped += 1
                        continue
                    old_key, _ = q.popleft()  # drop-oldest
                    self._released[old_key] = self._released.get(old_key, 0) + 1
                    dropped += 1
                item = pend.popleft()
                q.append(item)
                enq[item[0]] = enq.get(item[0], 0) + 1
            if len(q) > self.queue_peak:
                self.queue_peak = len(q)
            self._cond.notify_all()
        self.dropped += dropped
        for key, n in enq.items():
            self._flow.on_enqueued(key, n)

    def _on_overheard(self, buf: bytes, now: float) -> None:
        frame = self._decode_own(buf)
        if frame is None:
            return
        if is_other_modes_feedback(frame, self.mode):
            self._warn_mode(f"{type(frame).__name__} from receiver {frame.receiver}")
        self._flow.on_overheard(frame, now=now)

    def _warn_mode(self, what: str) -> None:
        if not self._warned_mode:
            self._warned_mode = True
            log.warning("mode mismatch on stream %r (this receiver: %r): %s", self.stream,
                        self.mode, what)

    # -- metrics -----------------------------------------------------------------
    def latency_ms(self) -> dict[str, float | None]:
        """Send-to-delivery latency: percentiles over the last 65,536 samples (each
        ``get_many`` call samples at most about LATENCY_PER_CALL of its messages, the oldest
        always), and the largest sampled since start. ``outliers``: samples left out as
        impossible (timestamps more than an hour ahead or a day behind)."""
        with self._cond:
            n = min(self._lat_n, LATENCY_SAMPLES)
            sample = self._lat[:n].copy()
            worst = self._lat_max
            outliers = self._lat_outliers
        if n == 0:
            return {"p50": None, "p99": None, "max": None, "samples": 0, "outliers": outliers}
        p50, p99 = np.percentile(sample, [50, 99]) * 1000.0
        return {"p50": round(float(p50), 3), "p99": round(float(p99), 3),
                "max": round(worst * 1000.0, 3), "samples": int(self._lat_n),
                "outliers": outliers}

    def snapshot(self) -> dict[str, Any]:
        """Metrics, JSON-ready."""
        now = time.monotonic()
        flow = self._flow.snapshot()
        totals = self._tracker.totals()
        elapsed = (self._t_end or now) - self._t0
        first, last = self._t_first_data, self._t_last_delivery
        active = max(0.0, last - first) if first is not None and last is not None else 0.0
        return {
            "receiver_id": self.receiver_id,
            "stream": self.stream,
            "mode": self.mode,
            "capacity_msgs": self.capacity_msgs,
            "overflow": self.overflow,
            "elapsed_s": round(elapsed, 6),
            "started_at": round(self._t0 + self._wall_offset, 6),  # wall time of timeline t=0
            "frames": self.frames_in,
            "received": totals["received"],
            "delivered": self.delivered,
            "active_s": round(active, 6),
            "goodput_msgs": round(self.delivered / active, 1) if active > 0 else 0.0,
            "queued": len(self._queue) + len(self._pending),
            "dropped": self.dropped,
            "lost": totals["lost"],
            "missed_before_join": totals["missed_before_join"],
            "duplicates": totals["duplicates"],
            "streams_evicted": self._tracker.evicted,
            "malformed": self.malformed,
            "foreign": self.foreign,
            "auth": None if self._mac is None else self._mac.snapshot(),
            "queue_peak": self.queue_peak,
            "policy": flow,
            "naks_sent": flow.get("naks_sent", {}),
            "naks_suppressed": flow.get("naks_suppressed", 0),
            "credits_sent": flow.get("credits_sent", 0),
            "feedback_frames": self.feedback_sent,
            "feedback_bytes": self.feedback_bytes,
            "latency_ms": self.latency_ms(),
            **self._episodes.snapshot(now=now),
            "senders": self._tracker.per_sender(),
            "handler_errors": self.handler_errors,
            "io_saturated_polls": self.saturated_polls,
            "error": None if self.error is None else repr(self.error),
            "timeline": self.timeline.as_dict(t0=self._t0),
        }
