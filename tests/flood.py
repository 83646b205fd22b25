"""Send real traffic while a thread floods both channels with junk (hostile-input tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from nakflow.live.receiver import Message, Receiver
from nakflow.live.sender import Sender


@dataclass
class FloodRun:
    rx_snap: dict[str, Any]
    tx_snap: dict[str, Any]
    delivered: list[Message]
    junk_sent: int
    rate_limits: list[float] = field(default_factory=list)


#: Junk frames sent per channel before the last real message, at least, spread over the
#: real ones (``send_under_flood``): how much junk meets the real traffic must not depend
#: on how fast the real sender is (a fast one met 872 in one run).
MIN_JUNK = 2_000


def send_under_flood(junk_data: Callable[[], bytes], junk_feedback: Callable[[], bytes], *,
                     count: int = 10_000, max_junk: int = 100_000, min_junk: int = MIN_JUNK,
                     **sender_kwargs: Any) -> FloodRun:
    """One receiver and one sender on loopback; ``count`` real messages ``real-<i>`` are
    sent while junk goes to the receiver's data endpoint and to a feedback endpoint the
    sender listens to: before real message ``i`` the sender waits until ``min_junk`` x
    i / count junk frames went on each. Returns both snapshots after END and a drained
    queue."""
    if not 0 <= min_junk <= max_junk:
        raise ValueError("min_junk must be within 0..max_junk")
    ctx = zmq.Context.instance()
    got: list[Message] = []
    limits: list[float] = []
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", capacity_msgs=50_000,
                  handler=got.append) as rx:
        jd = ctx.socket(zmq.PUB)
        jd.connect(rx.data_endpoints[0])
        jf = ctx.socket(zmq.PUB)
        port = jf.bind_to_random_port("tcp://127.0.0.1")
        stop = threading.Event()
        sent = [0]
        progressed = threading.Condition()

        def flood() -> None:
            while not stop.is_set() and sent[0] < max_junk:
                jd.send(junk_data())
                jf.send(junk_feedback())
                sent[0] += 1
                if sent[0] % 50 == 0:
                    with progressed:
                        progressed.notify_all()
                if sent[0] % 200 == 0:
                    time.sleep(0.001)
            with progressed:
                progressed.notify_all()

        def junk_reached(n: int) -> None:
            with progressed:
                if not progressed.wait_for(lambda: sent[0] >= n, timeout=20):
                    raise TimeoutError(f"the flood sent {sent[0]} junk frames of {n} in 20 s")

        # the junk comes on a feedback endpoint of its own, beside the receiver's
        with Sender(rx.data_endpoints, [rx.feedback_endpoints[0], f"tcp://127.0.0.1:{port}"],
                    feedback_proxy=True, **sender_kwargs) as tx:
            tx.wait_for_receivers(1, timeout=15)
            flooder = threading.Thread(target=flood)
            flooder.start()
            try:
                for i in range(count):
                    if i % 500 == 0 or i == count - 1:
                        junk_reached(min_junk * (i + 1) // count)
                    tx.send(b"real-%d" % i, timeout=20)
                    if i % 500 == 0 and (limit := tx.snapshot()["rate_limit"]) is not None:
                        limits.append(limit)  # None: in its start, the window paces it
            finally:
                stop.set()
                flooder.join()
                jd.close(0)
                jf.close(0)
            tx.flush()
            assert rx.wait_for_ends(1, timeout=15) and rx.wait_drained(timeout=15)
            tx_snap = tx.snapshot()
        rx_snap = rx.snapshot()
        assert rx.handler_errors == 0
    return FloodRun(rx_snap, tx_snap, got, sent[0], limits)
