"""The peers nakflow is measured against: plain ZeroMQ PUB/SUB without nakflow.

    python benchmarks/peers.py recv --ready-file F [--consume-rate R] [--count N]
    python benchmarks/peers.py send --connect URI[,URI] --subscribers N --count N
                                    [--nodrop] [--rate R] [--epgm]

Frames are msgpack ``[seq, wall_ts, payload]``; seq -1 marks the end. ``send``
uses an XPUB socket so it can wait until every subscriber's subscription has
arrived (no slow-joiner loss) before timing; with ``--nodrop`` it sets
``XPUB_NODROP`` and blocks when a subscriber's pipe is full: ZeroMQ's own TCP
backpressure, where the slowest subscriber holds everyone back. Each process
prints one JSON report. Receivers consume their socket directly: ZeroMQ's
receive buffer (RCVHWM) is their queue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import zmq

END = -1
TIMELINE_S = 0.05


def _decode(unpack: Callable[[bytes], Any], buf: bytes) -> tuple[int, float] | None:
    """A frame's (seq, wall stamp), or None if it is no ``[seq, wall_ts, payload]``."""
    try:
        seq, ts, _payload = unpack(buf)
    except (ValueError, TypeError):  # msgpack's errors are ValueErrors
        return None
    if type(seq) is not int or type(ts) not in (int, float):
        return None
    return seq, ts


def recv_main(args: argparse.Namespace) -> int:
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, args.hwm)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if args.connect:
        sub.connect(args.connect)
        endpoint = args.connect
    else:
        sub.bind(args.bind)
        endpoint = sub.getsockopt_string(zmq.LAST_ENDPOINT)
    with open(args.ready_file + ".tmp", "w") as f:
        json.dump({"data": endpoint}, f)
    os.replace(args.ready_file + ".tmp", args.ready_file)
    unpack = msgpack.unpackb
    received = lost = malformed = 0
    expect = None
    lat = np.zeros(1 << 16)
    n_lat = 0
    first = last = None
    timeline: list[tuple[float, int]] = []
    next_sample = 0.0
    deadline = time.monotonic() + args.timeout
    interval = 1.0 / args.consume_rate if args.consume_rate else 0.0
    next_free = 0.0
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    last_mono = None
    while time.monotonic() < deadline:
        if not poller.poll(100):
            if last_mono is not None and time.monotonic() - last_mono > args.idle_exit:
                break  # END was lost (a PUB drops for a subscriber that cannot keep up)
            continue
        last_mono = time.monotonic()
        buf = sub.recv()
        frame = _decode(unpack, buf)
        if frame is None:  # pgm hands on part of a message after unrecoverable loss
            malformed += 1  # (libzmq issue 3768): counted, dropped; its seq's gap is lost
            continue
        seq, ts = frame
        now = time.time()
        if seq == END:
            break
        if first is None:
            first = now
        last = now
        received += 1
        if expect is not None and seq > expect:
            lost += seq - expect
        expect = seq + 1
        lat[n_lat & 0xFFFF] = now - ts
        n_lat += 1
        if now >= next_sample:
            timeline.append((round(now, 4), received))
            next_sample = now + TIMELINE_S
        if interval:  # a consumer of fixed speed: the socket buffer is its queue
            t = time.monotonic()
            next_free = max(next_free, t) + interval
            if next_free - t > 0.001:
                time.sleep(next_free - t)
    if expect is not None and args.count and expect < args.count:
        lost += args.count - expect  # the tail never came
    sample = lat[:min(n_lat, 1 << 16)]
    p50, p99 = (np.percentile(sample, [50, 99]) * 1000).tolist() if n_lat else (None, None)
    elapsed = (last - first) if first is not None and last is not None else 0.0
    print(json.dumps({
        "received": received, "lost": lost, "malformed": malformed, "elapsed_s": elapsed,
        "goodput_msgs": received / elapsed if elapsed > 0 else 0.0,
        "latency_ms": {"p50": p50, "p99": p99,
                       "max": float(sample.max() * 1000) if n_lat else None},
        "timeline": timeline,
    }))
    return 0


def send_main(args: argparse.Namespace) -> int:
    ctx = zmq.Context.instance()
    # multicast (--bind): a plain PUB, pgm carries no subscriptions upstream
    pub = ctx.socket(zmq.PUB if args.bind else zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, args.hwm)
    if not args.bind:
        pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, not just the first
    if args.nodrop:
        pub.setsockopt(zmq.XPUB_NODROP, 1)
    if args.multicast_rate_kbps:
        pub.setsockopt(zmq.RATE, args.multicast_rate_kbps)
    for uri in args.connect.split(","):
        if args.bind:
            pub.bind(uri)
        else:
            pub.connect(uri)
    if not args.bind:  # epgm has no subscription messages: the caller waits instead
        subscribed = 0
        end = time.monotonic() + 10.0
        while subscribed < args.subscribers:
            if time.monotonic() > end:
                print(f"only {subscribed} of {args.subscribers} subscribed", file=sys.stderr)
                return 1
            if pub.poll(100) and pub.recv()[:1] == b"\x01":
                subscribed += 1
    else:
        time.sleep(args.join_wait)
    pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
    payload = b"x" * args.size
    send = pub.send
    interval = 1.0 / args.rate if args.rate else 0.0
    count = args.count
    t0 = time.monotonic()
    next_t = t0
    end = t0 + args.duration if args.duration else None
    i = 0
    while (count is None or i < count) and (end is None or (i & 255) or time.monotonic() < end):
        if interval:
            next_t += interval
            wait = next_t - time.monotonic()
            if wait > 0.001:
                time.sleep(wait)
        send(pack([i, time.time(), payload]))
        i += 1
    elapsed = time.monotonic() - t0
    for _ in range(3):  # END (repeated: on multicast one copy may be lost)
        send(pack([END, time.time(), b""]))
    pub.close(linger=5000 if args.bind else -1)
    print(json.dumps({"sent": i, "elapsed_s": elapsed, "rate_msgs": i / elapsed}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="tcp://127.0.0.1:*")
    r.add_argument("--connect", default=None, help="join a multicast group instead")
    r.add_argument("--ready-file", required=True)
    r.add_argument("--consume-rate", type=float, default=None)
    r.add_argument("--count", type=int, default=None)
    r.add_argument("--hwm", type=int, default=1000)
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--idle-exit", type=float, default=2.0, help="exit after this long idle")
    r.set_defaults(func=recv_main)
    s = sub.add_parser("send")
    s.add_argument("--connect", required=True)
    s.add_argument("--bind", action="store_true", help="bind (multicast) instead of connect")
    s.add_argument("--join-wait", type=float, default=1.0)
    s.add_argument("--subscribers", type=int, default=1)
    s.add_argument("--count", type=int, default=None)
    s.add_argument("--duration", type=float, default=None)
    s.add_argument("--size", type=int, default=100)
    s.add_argument("--rate", type=float, default=None)
    s.add_argument("--nodrop", action="store_true")
    s.add_argument("--hwm", type=int, default=1000)
    s.add_argument("--multicast-rate-kbps", type=int, default=None)
    s.set_defaults(func=send_main)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
