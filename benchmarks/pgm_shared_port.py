"""Does PGM repair its loss when a second socket of the group's port lives on the host?

    .venv/bin/python benchmarks/pgm_shared_port.py          (root; runs in its own netns)

Raw pyzmq epgm, no nakflow: a PUB sends 20,000 numbered 1 kB messages to a SUB through
a token-bucket (``tbf``) qdisc on the namespace's loopback, which drops packets. PGM
repairs the drops from its transmit window. It runs twice: with one SUB, and with a
second, idle SUB on the same group and port (as on a host with two receivers, or a
nakflow receiver's feedback PUB beside its overhearing SUB). OpenPGM unicasts NAKs to
the source's UDP port, which every PGM socket of the group on that host has bound; the
kernel hands each NAK to one of them. Prints what arrived, what is missing for good and
the longest silence at the receiver (PGM holds later data while it waits for a repair).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import zmq

URL = "epgm://127.0.0.1;239.192.30.1:7001"
SETUP = ("ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo && "
         "tc qdisc add dev lo root tbf rate 40mbit burst 20kb latency 5ms && exec \"$@\"")
COUNT, BUDGET_S = 20_000, 40.0


def run(extra_subs: int) -> str:
    ctx = zmq.Context()
    socks = []
    for _ in range(extra_subs):  # idle SUBs bound to the same port
        idle = ctx.socket(zmq.SUB)
        idle.connect(URL)
        socks.append(idle)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVHWM, 10**6)
    sub.setsockopt(zmq.RECOVERY_IVL, 5000)
    sub.connect(URL)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 10**6)
    pub.setsockopt(zmq.RATE, 100_000)
    pub.setsockopt(zmq.RECOVERY_IVL, 5000)
    pub.connect(URL)
    time.sleep(1.0)
    for i in range(COUNT):
        pub.send(i.to_bytes(4, "big") + b"x" * 1000)
    seen: set[int] = set()
    t0 = last = time.monotonic()
    silence = 0.0
    while time.monotonic() - t0 < BUDGET_S and COUNT - 1 not in seen:
        if sub.poll(200):
            now = time.monotonic()
            silence, last = max(silence, now - last), now
            seen.add(int.from_bytes(sub.recv()[:4], "big"))
    for s in [pub, sub, *socks]:
        s.close(0)
    ctx.term()
    return (f"{1 + extra_subs} SUB(s) on the port: {len(seen):,} of {COUNT:,} arrived, "
            f"{COUNT - len(seen):,} missing, longest silence {silence:.2f} s")


def main() -> int:
    if os.environ.get("PGM_PORT_INNER") == "1":
        print(run(int(sys.argv[1])), flush=True)
        return 0
    if not zmq.has("pgm"):
        print("this pyzmq has no OpenPGM: run scripts/setup.sh as root")
        return 2
    for extra in (0, 1):
        proc = subprocess.run(["unshare", "-n", "sh", "-c", SETUP, "sh", sys.executable,
                               __file__, str(extra)], capture_output=True, text=True,
                              env={**os.environ, "PGM_PORT_INNER": "1"}, timeout=120)
        lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("Warn:")]
        print("\n".join(lines) or proc.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
