"""Fuzzing the live Receiver's and Sender's frame handling over real sockets.

Each Hypothesis example is a burst of wire frames: valid frames with edge values
and colliding ids (the real sender's and receivers' among them), the same frames
with a byte changed, cut short or followed by junk, frame look-alikes, and random
bytes. The burst goes over ZeroMQ to a running node; after every burst the node
must still be alive and consistent. After the whole run a real stream must still
go through complete, so no burst corrupted the state that matters.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from nakflow import AckConfig, NakConfig
from nakflow.core.sender_core import ALLOWANCE_MSGS
from nakflow.live.receiver import Receiver
from nakflow.live.sender import Sender
from nakflow.wire import Data, encode
from tests.fuzz import budget, wire

pytestmark = pytest.mark.slow
bursts = st.lists(wire, min_size=1, max_size=30)


def wait_until(cond, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture(scope="module")
def fuzzed_receiver():
    """A receiver (ack mode: the policy with the most per-peer state) and a PUB that
    reaches its data channel."""
    rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="ack", capacity_msgs=5_000,
                  drop_duplicates=True, ack=AckConfig(sender_timeout_s=1.0))
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.connect(rx.data_endpoints[0])
    assert wait_until(lambda: (pub.send(b"probe"), rx.frames_in > 0)[1]), "no subscription"
    yield rx, pub
    pub.close(0)
    rx.close()


@given(bursts)
@budget(150)
def test_receiver_survives_any_burst_of_frames(fuzzed_receiver, burst):
    rx, pub = fuzzed_receiver
    before = rx.frames_in
    for buf in burst:
        pub.send(buf)
    # ZeroMQ's subscription filter keeps back what no prefix of the receiver matches (an
    # empty frame; a repair behind another receiver's target prefix): never read, by design
    subs = rx.core.subscriptions()
    passing = sum(1 for buf in burst if any(buf.startswith(p) for p in subs))
    assert wait_until(lambda: rx.frames_in >= before + passing), "frames not read"
    rx.get_many(10_000, timeout=0)
    snap = rx.snapshot()
    assert snap["error"] is None and rx._io.is_alive()
    json.dumps(snap, allow_nan=False)  # the metrics stay reportable (no inf, no nan)
    assert 0 <= snap["queued"] <= rx.capacity_msgs and snap["dropped"] >= 0


def test_forged_timestamps_do_not_poison_the_latency_metrics(fuzzed_receiver):
    """Found by the long fuzz run: a DATA frame stamped -1.7e308 made p99 latency inf."""
    rx, pub = fuzzed_receiver
    before = rx.latency_ms()["outliers"]
    for i, ts in enumerate((-1.7e308, 1.7e308, 0.0, time.time() + 7_200)):
        pub.send(encode(Data("default", "clockless", 1, i, ts, (b"x",))))
    assert wait_until(lambda: (rx.get_many(100, timeout=0),
                               rx.latency_ms()["outliers"] >= before + 4)[1])
    lat = rx.latency_ms()
    json.dumps(lat, allow_nan=False)
    assert lat["p99"] is None or abs(lat["p99"]) < 86_400_000


def test_receiver_after_the_fuzz_still_receives_a_real_stream_whole(fuzzed_receiver):
    """Forged senders (made-up HELLO and DATA) hold credit here until they time out
    (``sender_timeout_s``, 1 s in this fixture): then the real stream gets all of it."""
    rx, _ = fuzzed_receiver
    rx.get_many(1 << 20, timeout=0)
    assert wait_until(lambda: rx.snapshot()["policy"]["senders"] == 0), "forged senders kept"
    with Sender(rx.data_endpoints, rx.feedback_endpoints, mode="ack", sender_id="after-fuzz",
                epoch=1) as tx:
        tx.wait_for_receivers(1, timeout=10)
        for i in range(2_000):
            tx.send(b"m%d" % i, timeout=20)
        tx.flush()
        got = []
        assert wait_until(lambda: (got.extend(rx.get_many(1_000, timeout=0)), len(got))[1]
                          >= 2_000, 20)
    assert [m.payload for m in got if m.sender == "after-fuzz"] == [b"m%d" % i
                                                                    for i in range(2_000)]
    row = next(s for s in rx.snapshot()["senders"] if s["sender"] == "after-fuzz")
    assert row["status"] == "complete" and row["lost"] == 0


@pytest.fixture(scope="module", params=["nak", "ack"])
def fuzzed_sender(request):
    """A sender listening to a PUB the test writes feedback on (nothing receives its data)."""
    pub = zmq.Context.instance().socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    nak = NakConfig(min_rate_msgs=100.0)
    tx = Sender("tcp://127.0.0.1:1", f"tcp://127.0.0.1:{port}", mode=request.param,
                sender_id="real", epoch=1, nak=nak, ack=AckConfig(), max_rate_msgs=1e6)

    def heard() -> int:
        return tx.snapshot()["feedback_bytes"]

    assert wait_until(lambda: (pub.send(b"probe"), tx.try_send(b"x"), heard() > 0)[2])
    yield tx, pub, heard
    tx.close(linger_s=0)
    pub.close(0)


@given(bursts)
@budget(150)
def test_sender_survives_any_burst_of_feedback(fuzzed_sender, burst):
    tx, pub, heard = fuzzed_sender
    before = heard()
    for buf in burst:
        pub.send(buf)
    assert wait_until(lambda: (tx.try_send(b"x"), heard() >= before + sum(map(len, burst)))[1])
    snap = tx.snapshot()
    json.dumps(snap, allow_nan=False)
    if tx.mode == "nak":  # a sane limit, or none while the start's window paces it
        limit = snap["rate_limit"]
        if limit is None:
            assert snap["policy"]["starting"], snap["policy"]
        else:
            assert 100.0 <= limit <= 1e6 and math.isfinite(limit)
    else:
        policy = snap["policy"]
        # the ledger counts what was sent plus the allowance taken and not yet spent
        assert policy["receivers"] <= 4096
        assert 0 <= policy["next_seq"] - snap["sent"] <= ALLOWANCE_MSGS
