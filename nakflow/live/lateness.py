"""How late a driver's I/O thread ran: time it could not run although it had work.

A frame that waited in the socket because the receiving process was descheduled (two
cores, five busy processes) looks, by its timestamps, like a frame that waited in a
network queue, and the queueing-delay signal would slow every sender for it. A driver
measures its own lateness per look at the socket and hands it to the core
(``ReceiverCore.late``), which discounts it from the delays of the frames read then:
a late process is not a path queue.

Lateness is the time the thread was runnable but not running (Linux's ``run_delay`` in
``/proc/thread-self/schedstat``, which covers the wait for a CPU after a poll wakes it),
or, if longer, the time a poll overran its timeout (a process stopped with SIGSTOP while
it waited in the poll is not runnable, so ``run_delay`` misses it: a receiver back from
a 3 s stop looked punctual and its backlog looked like 3 s of path queueing), plus the
time it spent off the CPU outside the poll while working (wall time minus CPU time:
preemption, the GIL held by the application's thread). Where schedstat is missing only
the last two are measured.
"""

from __future__ import annotations

import math
import os
import time


class Lateness:
    """``wait_started(now, timeout_s)`` before the poll, ``woke(now)`` after it: the lateness of the
    look that follows, s. One per thread (it reads that thread's statistics)."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        self._wall = time.monotonic()
        self._cpu = time.thread_time()
        self._off = 0.0
        self._rd = self._run_delay()
        self._wait_at, self._timeout = self._wall, 0.0
        self._data_at = -math.inf

    def _run_delay(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def poll_ms(self, timeout_s: float, now: float) -> int:
        """The timeout for the poll that begins at ``now``, whole ms: ``timeout_s``, but
        at most FLOWING_POLL_S while frames arrive (see ``data_read``)."""
        if now - self._data_at <= FLOWING_S:
            timeout_s = min(timeout_s, FLOWING_POLL_S)
        return max(0, math.ceil(timeout_s * 1000))

    def data_read(self, now: float) -> None:
        """The look at ``now`` found frames on the data socket."""
        self._data_at = now

    def wait_started(self, now: float, timeout_s: float) -> None:
        """A poll of at most ``timeout_s`` begins at ``now``."""
        cpu = time.thread_time()
        self._off = max(0.0, (now - self._wall) - (cpu - self._cpu))
        self._rd = self._run_delay()
        self._wait_at, self._timeout = now, timeout_s

    def woke(self, now: float) -> float:
        overrun = (now - self._wait_at) - self._timeout - POLL_SLACK_S
        late = self._off + max(0.0, self._run_delay() - self._rd, overrun)
        self._wall, self._cpu = now, time.thread_time()
        return late

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


#: A poll may return this much after its timeout without the process being late, s
#: (its timeout is rounded up to whole milliseconds).
POLL_SLACK_S = 0.002
#: While frames arrive (one was read within FLOWING_S), a poll waits at most this long,
#: s. A process stopped inside a poll is seen only by how far the poll overran its
#: timeout: a receiver stopped (SIGSTOP) 150 ms inside a poll of up to 100 ms read as
#: late by 50-100 ms, not as the hold-up it was, and its backlog's queue NAK went out
#: as news (a cut, in one fresh-clone suite).
FLOWING_POLL_S = 0.01
FLOWING_S = 1.0
