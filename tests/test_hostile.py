"""Valid-but-absurd frames on both channels while real traffic flows: huge seqs, epochs
going backwards, unknown streams, out-of-range levels, forged NAK(100)s. Nothing
crashes, the sender's rate never falls below its floor, and every real message is
delivered or counted."""

from __future__ import annotations

import random

import msgpack
import pytest

from nakflow import NakConfig
from nakflow.wire import Credit, Data, End, Hello, Nak, encode
from tests.flood import send_under_flood

pytestmark = pytest.mark.slow
MAX = 2**63 - 1


def absurd_data(rng: random.Random, real_id: str, real_epoch: int) -> bytes:
    k = rng.randrange(8)
    if k == 0:
        return encode(Data("other-stream", "x", 0, rng.randrange(MAX), 1.0, (b"?",)))
    if k == 1:  # a stranger with a huge seq
        return encode(Data("default", f"fake-{rng.randrange(50)}", rng.randrange(MAX),
                           MAX - rng.randrange(10), 1.0, (b"fake",)))
    if k == 2:  # the real sender's id, an epoch going backwards
        return encode(Data("default", real_id, max(0, real_epoch - 1 - rng.randrange(5)),
                           rng.randrange(MAX), 1.0, (b"fake",)))
    if k == 3:
        return encode(Hello("default", f"fake-{rng.randrange(50)}", "sender", "nak", 0,
                            MAX, "", 1.0))
    if k == 4:
        return encode(End("default", f"fake-{rng.randrange(50)}", 0, MAX, 1.0))
    if k == 5:  # feedback frames on the data channel
        return encode(Nak("default", "mallory", 100, 100.0, 1.0))
    bad = [[1, 1, "default", "s", -1, 0, 1.0, [b"x"]], [1, 2, "default", "r", 0, 50.0, 1.0],
           [1, 2, "default", "r", 101, 50.0, 1.0], [1, 1, "default", "s", 0, MAX + 1, 1.0,
                                                    [b"x"]], [1, 4, "default", "s", "king"]]
    return msgpack.packb(rng.choice(bad))


def absurd_feedback(rng: random.Random, real_id: str) -> bytes:
    k = rng.randrange(6)
    if k == 0:
        return encode(Nak("other-stream", "mallory", 100, 100.0, 1.0))
    if k == 1:  # a real-looking NAK(100) for this stream: bounded by min_rate_msgs
        return encode(Nak("default", "mallory", 100, 999.0, 1.0))
    if k == 2:  # credit for a nak-mode sender, huge
        return encode(Credit("default", "mallory", real_id, 0, MAX, 1.0))
    if k == 3:
        return encode(Hello("default", "mallory", "receiver", "ack", MAX, MAX, real_id, 1.0))
    bad = [[1, 2, "default", "r", 0, 50.0, 1.0], [1, 2, "default", "r", 100, -5.0, 1.0],
           [1, 3, "default", "r", real_id, 0, -1, 1.0], [9, 2]]
    return msgpack.packb(rng.choice(bad))


def test_absurd_frames_on_both_channels_change_nothing_real():
    rng = random.Random(11)
    real_id, count, floor = "real", 10_000, 3_000.0
    run = send_under_flood(lambda: absurd_data(rng, real_id, 5),
                           lambda: absurd_feedback(rng, real_id), count=count,
                           sender_id=real_id, epoch=5, nak=NakConfig(min_rate_msgs=floor),
                           # a quarter of the junk opens a new (sender, epoch) stream: keep
                           # them under the tracker's 10,000, or junk still queued behind
                           # the real END evicts the real stream, ended ones going first
                           # (by design: test_memory covers the eviction)
                           max_junk=30_000)
    snap, tx_snap = run.rx_snap, run.tx_snap
    assert run.junk_sent > 1_000
    assert snap["error"] is None
    real = next(s for s in snap["senders"] if s["sender"] == real_id and s["epoch"] == 5)
    assert real["status"] == "complete" and real["lost"] == 0 and real["duplicates"] == 0
    delivered_real = sum(1 for m in run.delivered if m.sender == real_id and m.epoch == 5)
    assert delivered_real + snap["dropped"] >= count and delivered_real <= count
    assert snap["malformed"] > 100 and snap["foreign"] > 100
    assert tx_snap["feedback_malformed"] > 100 and tx_snap["feedback_foreign"] > 100
    assert tx_snap["naks_received"].get("100", 0) > 0  # the forged NAKs were heard ...
    assert min(run.rate_limits) >= floor and tx_snap["sent"] == count  # ... only floored
