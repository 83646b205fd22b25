"""The live receiver's bounded queue: the I/O thread puts, the application takes.

One lock guards it, and the queue waits and wakes on its own (``_wait``, ``_notify_all``;
``_wait`` says why not with a ``threading.Condition``). ``put`` applies the overflow policy
and returns what entered and what was dropped (for the protocol core); ``take`` hands
messages out in the consumer's batches, remembers per stream how many left (the core
learns it on the I/O thread, ``released``), wakes the I/O thread when enough was freed for
a new grant, and samples send-to-delivery latency.
"""

from __future__ import annotations

import math
import threading
import time
from _thread import allocate_lock
from array import array
from collections import Counter, deque
from collections.abc import Callable, Sized
from itertools import islice
from operator import itemgetter
from typing import Any

from ..config import check_count, check_timeout
from ..core.receiver_core import Message
from ..wire import SenderKey

LATENCY_SAMPLES = 1 << 16
LATENCY_PER_CALL = 32  # latency samples taken per take() call, at most about
#: A sampled "latency" outside this range is a wrong clock or a forged timestamp, not a
#: latency: it is counted (``latency_ms["outliers"]``) and left out, s.
LATENCY_MIN_S, LATENCY_MAX_S = -3_600.0, 86_400.0

_key_of = itemgetter(0)
_message_of = itemgetter(1)
Item = tuple[SenderKey, Message]


def check_take(max_n: int, timeout: float | None) -> None:
    """``get_many`` (threaded or asyncio) refuses a negative ``max_n`` (it failed inside
    ``islice``) and a ``timeout`` < 0 or NaN: ValueError (another kind: TypeError)."""
    check_count(max_n, "get_many", "max_n")
    check_timeout(timeout, "get_many")


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class DeliveryQueue:
    """Bounded, thread-safe queue of ``(stream key, Message)``."""

    def __init__(self, capacity_msgs: int, overflow: str, *, wake: Callable[[], None],
                 wake_every: int) -> None:
        self.capacity_msgs = capacity_msgs
        self.overflow = overflow
        #: Held for every look at the queue. A ``threading.Lock``, whose ``with`` enters
        #: and leaves in C: a signal cannot leave it held (``_wait``).
        self.lock = threading.Lock()
        self._waiters: list[Any] = []  # locks of the threads in _wait, held until notified
        self._wake = wake
        self._wake_every = wake_every
        self._queue: deque[Item] = deque()
        self._released: dict[SenderKey, int] = {}
        self._since_wake = 0
        self._ends: dict[SenderKey, int] = {}
        self._finished = 0  # sender ids finished: END, or left without (core.silence)
        self.closed = False  # the I/O thread has finished: nothing more will come
        self.delivered = 0
        self.queue_peak = 0
        self.t_last_delivery: float | None = None  # wall time
        self._lat = array("d", bytes(8 * LATENCY_SAMPLES))  # no numpy on executors
        self._lat_n = 0
        self._lat_max = 0.0
        self._lat_outliers = 0

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.capacity_msgs

    # -- the application's side ------------------------------------------------
    def take(self, max_n: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_n`` messages; waits up to ``timeout`` for the first one. A signal's
        exception (KeyboardInterrupt) raised in it has taken nothing. Raises ValueError for
        a negative ``max_n``, or a ``timeout`` that is negative or NaN."""
        check_take(max_n, timeout)
        with self.lock:
            q = self._queue
            if not q:
                end = None if timeout is None else time.monotonic() + timeout
                while not q:
                    if self.closed:
                        return []
                    remaining = None if end is None else end - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return []
                    self._wait(remaining)
            was_full = len(q) >= self.capacity_msgs
            n = min(max_n, len(q))
            items = list(islice(q, n))
            counts = Counter(map(_key_of, items))
            wake = (self._since_wake + n >= self._wake_every
                    or (was_full and self.overflow == "block"))
            if wake:  # before anything is taken: the I/O thread reads what left once it has
                self._wake()  # the lock, after this take
            # what follows calls no Python-level code a signal's exception could stop half-way
            if n == len(q):  # all of it (a consumer that keeps up): no per-item pops
                q.clear()
            else:
                for _ in range(n):
                    q.popleft()
            released = self._released
            for key, count in counts.items():
                released[key] = released.get(key, 0) + count
            self.delivered += n
            now_wall = time.time()
            self.t_last_delivery = now_wall
            if not q:
                self._notify_all()  # wait_empty()
            self._since_wake = 0 if wake else self._since_wake + n
            self._sample_latency(items, now_wall)
        return list(map(_message_of, items))

    # -- waiting ----------------------------------------------------------------------------
    def _wait(self, timeout: float | None) -> None:
        """Called holding ``lock``: release it, wait up to ``timeout`` s for a
        ``_notify_all``, take it back, also when a signal's exception ends the wait.

        ``threading.Condition``'s, without its Python-level steps. A signal handler runs
        between bytecodes: one that raised inside ``Condition.__enter__`` after the lock
        was taken left it held for ever, and the I/O thread blocked on it (a
        KeyboardInterrupt in ``Receiver.get`` stopped the receiver's I/O in 8 of 40
        tries; ``close`` then waited its 5 s and no BYE went out). Compiled, this method and
        the ``with self.lock`` blocks run no bytecode; the only call a signal interrupts is
        the wait itself, and the lock is taken back after it whatever happened."""
        waiter = allocate_lock()
        waiter.acquire()
        self._waiters.append(waiter)
        self.lock.release()
        late: BaseException | None = None
        try:
            if timeout is None:
                waiter.acquire()
            else:
                waiter.acquire(True, max(0.0, timeout))
        finally:
            while True:  # a signal that comes while the I/O thread holds the lock ends this
                try:  # acquire with its exception: the lock is still ours to take back
                    self.lock.acquire()
                    break
                except BaseException as exc:
                    late = late or exc
            try:
                self._waiters.remove(waiter)
            except ValueError:  # notified: _notify_all took it off
                pass
        if late is not None:
            raise late

    def _notify_all(self) -> None:
        """Called holding ``lock``: every thread in ``_wait`` returns."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.release()

    def _sample_latency(self, items: list[Item], now_wall: float) -> None:
        # latency of a sample (the first, the oldest, is always in it): per-item
        # bookkeeping would cost more than the rest of the delivery
        lat, i = self._lat, self._lat_n
        for _, m in items[::max(1, len(items) // LATENCY_PER_CALL)]:
            d = now_wall - m.ts
            if not LATENCY_MIN_S <= d <= LATENCY_MAX_S:
                self._lat_outliers += 1
                continue
            lat[i % LATENCY_SAMPLES] = d
            i += 1
            if d > self._lat_max:
                self._lat_max = d
        self._lat_n = i

    def wait_empty(self, pending: Sized, timeout: float | None = None) -> bool:
        """Wait until the queue and ``pending`` (the I/O thread's) are empty."""
        end = math.inf if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self._queue or len(pending):
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                self._wait(min(remaining, 1.0))
        return True

    def ends(self) -> dict[SenderKey, int]:
        with self.lock:
            return dict(self._ends)

    def wait_for_ends(self, n: int, timeout: float | None = None) -> bool:
        end = math.inf if timeout is None else time.monotonic() + timeout
        with self.lock:
            while len(self._ends) < n:
                remaining = end - time.monotonic()
                if remaining <= 0 or self.closed:
                    return len(self._ends) >= n
                self._wait(min(remaining, 1.0))
        return True

    # -- the I/O thread's side -------------------------------------------------
    def put(self, pending: deque[Item], hold: bool = False,
            ) -> tuple[dict[SenderKey, int], list[Message]]:
        """Move ``pending`` into the queue, applying the overflow policy (``block`` leaves
        what does not fit in ``pending``, as any policy does with ``hold``, the core's word
        that what comes is its own backlog): (messages enqueued per stream, those
        dropped)."""
        enq: dict[SenderKey, int] = {}
        dropped: list[Message] = []
        if not pending:
            return enq, dropped
        cap = self.capacity_msgs
        with self.lock:
            q = self._queue
            if len(q) + len(pending) <= cap:  # all of it fits (a consumer that keeps up):
                enq.update(Counter(map(_key_of, pending)))  # no per-item checks
                q.extend(pending)
                pending.clear()
            while pending:
                if len(q) >= cap:
                    if hold or self.overflow == "block":
                        break
                    if self.overflow == "drop-newest":
                        dropped.append(pending.popleft()[1])
                        continue
                    old_key, old = q.popleft()  # drop-oldest
                    self._released[old_key] = self._released.get(old_key, 0) + 1
                    dropped.append(old)
                item = pending.popleft()
                q.append(item)
                enq[item[0]] = enq.get(item[0], 0) + 1
            if len(q) > self.queue_peak:
                self.queue_peak = len(q)
            self._notify_all()
        return enq, dropped

    def released(self) -> tuple[dict[SenderKey, int], int]:
        """What left the queue since the last call, per stream, and the depth now."""
        with self.lock:
            released, self._released = self._released, {}
            return released, len(self._queue)

    def set_ends(self, ends: dict[SenderKey, int], finished: int = 0) -> None:
        """END seen from ``ends``; ``finished`` sender ids finished (END, or left without
        one: ``core.silence``)."""
        with self.lock:
            self._ends = dict(ends)
            self._finished = finished
            self._notify_all()

    def finished(self) -> int:
        """Sender ids finished: an epoch ended (END), or the newest left without END
        (``core.silence``)."""
        with self.lock:
            return self._finished

    def finish(self) -> None:
        """The I/O thread is done: waiters return."""
        with self.lock:
            self.closed = True
            self._notify_all()

    def snapshot(self, first_data_wall: float | None, pending: int) -> dict[str, Any]:
        """The queue's own figures (``first_data_wall``: when the first DATA arrived, wall
        time; ``pending``: messages the core holds for it)."""
        last = self.t_last_delivery
        active = (max(0.0, last - first_data_wall)
                  if first_data_wall is not None and last is not None else 0.0)
        return {"delivered": self.delivered, "active_s": round(active, 6),
                "last_delivery_at": None if last is None else round(last, 6),
                "goodput_msgs": round(self.delivered / active, 1) if active > 0 else 0.0,
                "queued": len(self) + pending, "queue_peak": self.queue_peak,
                "latency_ms": self.latency_ms()}

    def latency_ms(self) -> dict[str, float | None]:
        """Send-to-delivery latency: percentiles over the last 65,536 samples (each
        ``take`` samples at most about LATENCY_PER_CALL of its messages, the oldest
        always), and the largest sampled since start. ``outliers``: samples left out as
        impossible (timestamps more than an hour ahead or a day behind)."""
        with self.lock:
            n = min(self._lat_n, LATENCY_SAMPLES)
            sample = sorted(self._lat[:n])
            worst = self._lat_max
            outliers = self._lat_outliers
        if n == 0:
            return {"p50": None, "p99": None, "max": None, "samples": 0, "outliers": outliers}
        p50, p99 = (_percentile(sample, q) * 1000.0 for q in (0.5, 0.99))
        return {"p50": round(float(p50), 3), "p99": round(float(p99), 3),
                "max": round(worst * 1000.0, 3), "samples": int(self._lat_n),
                "outliers": outliers}


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
