"""One deterministic workload over the hot modules; prints a digest of each part's results.

tests/test_speedups.py runs it on the compiled modules and with NAKFLOW_PURE_PYTHON=1 and
compares: the two must agree bit for bit (floats included). The first line of the output
says which modules ran compiled.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import deque
from dataclasses import replace
from typing import Any

from nakflow._speedups import status
from nakflow.core.batch import FrameBatcher
from nakflow.core.receiver_core import Message
from nakflow.core.seqtrack import SequenceTracker
from nakflow.errors import ProtocolError
from nakflow.live.delivery_queue import DeliveryQueue
from nakflow.wire import (
    Bye,
    Credit,
    Data,
    End,
    Gone,
    Hello,
    Nak,
    RData,
    Receipt,
    Repair,
    encode,
)
from nakflow.wire.codec import decode, decode_data
from simulations.cores import CoreSimParams, simulate_cores


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()


def codec(rng: random.Random) -> list[str]:
    """Frames of every type, encoded and decoded; then each with random bytes flipped,
    cut or extended: what decode makes of them (a frame or the ProtocolError's words)."""
    def name() -> str:
        return "".join(rng.choice("abcxyzé-") for _ in range(rng.randint(1, 8)))

    def u() -> int:
        return rng.choice([0, 1, rng.randint(0, 2**31), 2**63 - 1])

    out = []
    for _ in range(300):
        ts = rng.uniform(-1e9, 1e9)
        frame = rng.choice([
            Data(name(), name(), u(), u(), ts, tuple(rng.randbytes(rng.randint(0, 30))
                                                     for _ in range(rng.randint(1, 6))), u()),
            Nak(name(), name(), rng.randint(1, 100), rng.uniform(0, 100), ts),
            Credit(name(), name(), name(), u(), u(), ts),
            Hello(name(), name(), rng.choice(["sender", "receiver"]),
                  rng.choice(["nak", "ack", "none"]), u(), u(), name(), ts,
                  rng.random() < 0.5, rng.random() < 0.5),
            Bye(name(), name(), "receiver", u(), ts), End(name(), name(), u(), u(), ts),
            RData(name(), name(), u(), u(), ts, (rng.randbytes(5),)),
            Repair(name(), name(), name(), u(), ((1, 5), (9, 12)), ts, rng.random() < 0.5,
                   rng.random() < 0.5),
            Gone(name(), name(), u(), 3, 9, ts),
            Receipt(name(), name(), name(), u(), u(), (u(), u(), u(), u()), ts)])
        buf = encode(frame)
        out.append(buf.hex())
        for variant in (buf, *(mutate(rng, buf) for _ in range(6))):
            for fn in (decode, decode_data):
                try:
                    out.append(repr(fn(variant)))
                except ProtocolError as e:
                    out.append(f"ProtocolError: {e}")
    return out


def mutate(rng: random.Random, buf: bytes) -> bytes:
    b = bytearray(buf)
    kind = rng.randrange(3)
    if kind == 0 and b:
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:
        del b[rng.randrange(len(b) + 1):]
    else:
        b += rng.randbytes(rng.randint(1, 10))
    return bytes(b)


def tracker(rng: random.Random) -> list[Any]:
    """Frames of two senders arriving reordered, duplicated and lost; repairs, a Gone,
    drops and END: every range the tracker returns, then its totals."""
    t = SequenceTracker(max_streams=4)
    out: list[Any] = []
    seqs = {("a", 0): 0, ("b", 1): 0}
    for _ in range(2_000):
        key = rng.choice(list(seqs))
        count = rng.randint(1, 8)
        seq = max(0, seqs[key] + rng.randint(-20, 10))
        seqs[key] = max(seqs[key], seq + count)
        r = rng.random()
        if r < 0.1:
            out.append(("repair", t.on_repair(*key, seq, count)))
        elif r < 0.12:
            out.append(("gone", t.on_gone(*key, seq, seq + count)))
        elif r < 0.15:
            t.on_dropped(*key, seq)
        else:
            out.append(("data", t.on_data(*key, seq, count)))
    for key, end in seqs.items():
        out.append(repr(t.on_end(*key, end)))
    out.append(t.totals())
    out.append(t.per_sender())
    return out


def batcher(rng: random.Random) -> list[Any]:
    b = FrameBatcher(linger_s=0.0005, max_msgs=16, max_bytes=600, max_frame_bytes=1_000,
                     names_bytes=20)
    out: list[Any] = []
    now = 0.0
    for _ in range(3_000):
        now += rng.expovariate(20_000)
        payload = rng.randbytes(rng.choice([1, 10, 100, 300]))
        try:
            r = b.offer(payload, now)
        except ValueError as e:
            out.append(str(e))
            continue
        out.append(r)
        if r in (2, 3):
            out.append(b.take(now)[1])
    return out


def inbox(rng: random.Random) -> list[Any]:
    out: list[Any] = []
    for overflow in ("drop-newest", "drop-oldest"):
        box = DeliveryQueue(50, overflow, wake=lambda: None, wake_every=5)
        dropped: list[int] = []
        for i in range(300):
            pending = deque((("s", 0), Message("s", 0, i * 10 + j, 0.0, b"x"))
                            for j in range(rng.randint(0, 20)))
            enq, lost = box.put(pending)
            dropped += [m.seq for m in lost]
            out.append(sorted(enq.items()))
            out.append([m.seq for m in box.take(rng.randint(0, 15), timeout=0)])
        out.append((dropped, box.delivered, box.queue_peak, len(box)))
    return out


def cores() -> dict[str, Any]:
    p = CoreSimParams(receivers=4, paused=1, pause_for_s=0.3, duration_s=1.0, data_loss=0.01)
    runs = {m: simulate_cores(p, m, seed=7) for m in ("nak", "ack", "none")}
    runs["nak-rtt"] = simulate_cores(replace(p, rtt_s=0.05, paused=0), "nak", seed=3)
    return runs


def main() -> None:
    rng = random.Random(13)
    print(json.dumps(status(), sort_keys=True))
    parts = {"codec": codec(rng), "tracker": tracker(rng), "batcher": batcher(rng),
             "inbox": inbox(rng), "cores": cores()}
    print(json.dumps({k: digest(v) for k, v in parts.items()}, sort_keys=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
