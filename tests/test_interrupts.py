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


def _compiled_sources() -> set[str]:
    """The source files of the compiled modules: they run no bytecode (compiled), and
    their pure-Python fallback's own check points are left out, as above."""
    import importlib

    from nakflow._speedups import status

    return {importlib.import_module(f"nakflow.{name}").__file__ or "" for name in status()}


def _all_of_a_stream_over(rx: Any) -> list[Any]:
    """The messages of the receiver's one stream, once it is over (END, or BYE: not
    ``messages()``, which waits RETRY_WAIT_S for a retry of an aborted sender)."""
    got: list[Any] = []
    end = time.monotonic() + 30
    while time.monotonic() < end:
        batch = rx.get_many(256, timeout=0.02)
        got += batch
        if not batch and rx.snapshot()["senders"] and not rx.live_streams():
            return got + rx.get_many(256, timeout=0)
    raise AssertionError(f"the stream was not over within 30 s: {rx.snapshot()['senders']}")


# a strike as a generator is finalized is ignored, as Python ignores a real signal's
# exception there ("Exception ignored in"); pytest would report it as a warning
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("call", ["send", "send_batch", "close"])
def test_a_signal_at_any_check_point_of_a_send_loses_no_message_sent(call: str) -> None:
    """Where CPython runs a real signal's handler in a sender's call: as each Python
    function is entered, and as each compiled call returns (pyzmq's sends too, their frame
    gone). A profile function raises at the k-th such point, for every k until the call
    completes untouched; the application then leaves the sender to its timers for a moment
    (an idle sender announces its last seq) and aborts, or closes. Every message the
    sender counts as sent reaches the receiver, in order, none lost or twice. On the code
    before it, frames handed to the socket as a list were lost after a send that raised
    (and ``zmq.Socket.send``'s own entry is such a point, before its frame goes): the next
    frame, or the announcement, made them ``lost`` at every receiver (an ACK chaos run:
    133 at all three receivers of a sender stopped by SIGTERM); and a frame built but not
    yet handed out was lost so too."""
    from nakflow.live.receiver import Receiver
    from nakflow.live.sender import Sender

    skip = _compiled_sources() | {__file__}
    k, struck_at = 0, []
    while True:
        k += 1
        seen, where = 0, ""

        def profile(frame: FrameType, event: str, arg: object, k: int = k) -> None:
            nonlocal seen, where
            if event in ("call", "c_return") and frame.f_code.co_filename not in skip:
                seen += 1
                if seen == k:
                    where = (f"{event} {getattr(arg, '__qualname__', '')} in "
                             f"{frame.f_code.co_qualname}:{frame.f_lineno}")
                    raise Strike

        with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="ack") as rx:
            tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode="ack",
                        frame_msgs=3, linger_s=10.0)
            try:
                tx.wait_for_receivers(1, timeout=10)
                for i in range(5):  # a frame of 3 went; 2 wait for the third
                    tx.send(b"m%d" % i)
                sys.setprofile(profile)
                try:
                    if call == "send":  # frames of 3 leave as they fill
                        for i in range(5, 13):
                            tx.send(b"m%d" % i)
                    elif call == "send_batch":  # frames of 3, and the rest waits
                        tx.send_batch([b"m%d" % i for i in range(5, 13)])
                    else:  # the frame being built, END
                        tx.close()
                    struck = False
                except Strike:
                    struck = True
                finally:
                    sys.setprofile(None)
                if struck:
                    struck_at.append(k)
                    if call != "close":
                        tx.poll(0.12)  # the timers: it announces its last seq
                    tx.abort()
                else:
                    tx.close()
                sent = tx.snapshot()["sent"]
            finally:
                tx.abort()
            got = [m.payload for m in _all_of_a_stream_over(rx)]
            (stream,) = rx.snapshot()["senders"]
        assert got == [b"m%d" % i for i in range(sent)], (k, where, sent, got)
        assert stream["lost"] == 0 and stream["received"] == sent, (k, where, stream)
        if not struck:
            break
        assert k < 600, "struck at every one of 600 check points"
    assert len(struck_at) >= 20, struck_at  # the call has check points to strike at
