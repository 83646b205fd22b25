"""A signal's exception (Ctrl-C's KeyboardInterrupt) in an application's call into the live
receiver's queue: wherever it strikes, the queue stays usable by the I/O thread and loses
nothing.

A Python signal handler runs in the main thread between two bytecodes, so it can strike
inside any Python-level function the call runs. A trace function stands in for it here:
it raises at the k-th opcode of every Python frame the call enters, for every k until the
call completes untouched. The compiled queue runs no bytecode of its own, so with it every
point where a real signal could strike is covered; the pure-Python fallback's own
bytecodes are left out (its lines have the gaps any Python code has).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from types import FrameType, SimpleNamespace
from typing import Any

import pytest

from nakflow.live import delivery_queue
from nakflow.live.delivery_queue import DeliveryQueue

HERE = delivery_queue.__file__


KEY = ("s", 1)


def _message() -> Any:
    """What the queue needs of a message: its send time."""
    return SimpleNamespace(ts=time.time())


class Strike(BaseException):
    """The stand-in for KeyboardInterrupt (so a real one still stops pytest)."""


def _call_with_a_strike_at(k: int, call: Any, *args: Any) -> tuple[bool, Any]:
    """Run ``call(*args)`` raising ``Strike`` at the k-th opcode of the Python frames it enters
    (not the queue's own): (struck, what it returned)."""
    seen = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal seen
        if frame.f_code.co_filename == HERE:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            seen += 1
            if seen == k:
                raise Strike
        return trace

    sys.settrace(trace)
    try:
        return False, call(*args)
    except Strike:
        return True, None
    finally:
        sys.settrace(None)


def _io_thread_can_put(q: DeliveryQueue) -> bool:
    """The I/O thread's side still works: a put from another thread completes."""
    done = threading.Event()

    def put() -> None:
        q.put(deque([(KEY, _message())]), hold=True)
        q.released()
        done.set()

    threading.Thread(target=put, daemon=True).start()
    return done.wait(30)  # returns at once unless the lock was left held


@pytest.mark.parametrize("queued", [0, 5], ids=["waiting", "taking"])
def test_a_signal_anywhere_in_a_take_leaves_the_queue_whole_and_usable(queued: int) -> None:
    """On the code before it, a KeyboardInterrupt inside ``threading.Condition.__enter__``
    left the queue's lock held: the I/O thread blocked on it for good, and ``close``
    waited its 5 s and sent no BYE (8 of 40 real Ctrl-Cs in ``Receiver.get_many``)."""
    wakes: list[int] = []
    strikes = 0
    msgs = [_message() for _ in range(queued)]
    for k in range(1, 5_000):
        q = DeliveryQueue(10, "block", wake=lambda: wakes.append(1), wake_every=1)
        q.put(deque((KEY, m) for m in msgs))
        struck, got = _call_with_a_strike_at(k, q.take, 3, 0.001)
        assert _io_thread_can_put(q), f"the lock was left held by a strike at opcode {k}"
        if struck:  # nothing was taken: all still queued, none counted delivered
            strikes += 1
            assert (len(q) - 1, q.delivered) == (queued, 0), k
        else:
            assert (got, q.delivered) == (msgs[:3], min(3, queued)), k
            assert len(q) - 1 == queued - min(3, queued)
            break
    else:
        pytest.fail("the take was struck at every one of 5,000 opcodes")
    # with no Python-level code in the call there is nothing to strike (the compiled
    # queue waiting); the taking one runs Counter and the wake
    assert strikes > 0 or queued == 0
