"""NORM (NRL's libnorm, RFC 5740) with NORM-CC on, as a peer row beside nakflow.

    python -m benchmarks.norm_peer recv --group 239.193.7.9:6003 --iface eth0 \
        --count N --ready-file F [--timeout S]
    python -m benchmarks.norm_peer send --group 239.193.7.9:6003 --iface eth0 \
        --count N --size B [--window-mib 32]

Driven through ctypes against Debian's ``libnorm1`` as NRL's own ``normCast`` drives it on
a LAN: GRTT estimate 1 ms, backoff 0, 1,400-byte segments, FEC blocks of 64 data + 8
parity (parity only on repair), UDP socket buffers 4 MiB, congestion control on
(``NormSetCongestionControl(session, true, true)``). Messages are fixed-size stream
records (8-byte seq first), each marked end-of-message, so a receiver that loses part of
the stream (beyond the repair window) resynchronises at the next record and counts the gap.
The sender's repair window (``--window-mib``) is its stream buffer; make it larger than the
transfer for NORM to be as reliable as it can be. Each process prints one JSON report.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import select
import struct
import sys
import time
from typing import Any

SEGMENT, FEC_DATA, FEC_PARITY = 1400, 64, 8
SOCKET_BUFFER = 4 << 20
NORM_FLUSH_ACTIVE = 2
NORM_NODE_ANY = 0xFFFFFFFF
# NormEventType values (normApi.h)
TX_QUEUE_VACANCY, TX_QUEUE_EMPTY, TX_FLUSH_COMPLETED = 1, 2, 3
TX_OBJECT_PURGED, LOCAL_SENDER_CLOSED = 7, 9
RX_OBJECT_NEW, RX_OBJECT_UPDATED, RX_OBJECT_COMPLETED, RX_OBJECT_ABORTED = 17, 19, 20, 21
TIMELINE_S = 0.1


class NormEvent(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("session", ctypes.c_void_p),
                ("sender", ctypes.c_void_p), ("object", ctypes.c_void_p)]


def norm_unavailable() -> str | None:
    """Why NORM cannot run here, or None."""
    if ctypes.util.find_library("norm") is None:
        return "libnorm is not installed (Debian: apt-get install libnorm1)"
    return None


def load() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("norm") or "libnorm.so.1")
    vp, b, u, u16, d = ctypes.c_void_p, ctypes.c_bool, ctypes.c_uint, ctypes.c_uint16, \
        ctypes.c_double
    sig = {
        "NormCreateInstance": (vp, [b]),
        "NormDestroyInstance": (None, [vp]),
        "NormCreateSession": (vp, [vp, ctypes.c_char_p, u16, ctypes.c_uint32]),
        "NormDestroySession": (None, [vp]),
        "NormGetDescriptor": (ctypes.c_int, [vp]),
        "NormGetNextEvent": (b, [vp, ctypes.POINTER(NormEvent), b]),
        "NormSetMulticastInterface": (b, [vp, ctypes.c_char_p]),
        "NormSetTTL": (b, [vp, ctypes.c_uint8]),
        "NormSetRxSocketBuffer": (b, [vp, u]),
        "NormSetTxSocketBuffer": (b, [vp, u]),
        "NormSetCongestionControl": (None, [vp, b, b]),
        "NormSetGrttEstimate": (None, [vp, d]),
        "NormSetBackoffFactor": (None, [vp, d]),
        "NormSetAutoParity": (None, [vp, ctypes.c_uint8]),
        "NormGetTxRate": (d, [vp]),
        "NormStartSender": (b, [vp, u16, ctypes.c_uint32, u16, u16, u16, ctypes.c_uint8]),
        "NormStopSender": (None, [vp]),
        "NormStartReceiver": (b, [vp, ctypes.c_uint32]),
        "NormStopReceiver": (None, [vp]),
        "NormStreamOpen": (vp, [vp, ctypes.c_uint32, ctypes.c_char_p, u]),
        "NormStreamWrite": (u, [vp, ctypes.c_char_p, u]),
        "NormStreamMarkEom": (None, [vp]),
        "NormStreamFlush": (None, [vp, b, ctypes.c_int]),
        "NormStreamClose": (None, [vp, b]),
        "NormStreamRead": (b, [vp, vp, ctypes.POINTER(u)]),
        "NormStreamSeekMsgStart": (b, [vp]),
        "NormObjectGetType": (ctypes.c_int, [vp]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class Session:
    """One NORM instance and session on ``group`` (``addr:port``) via ``iface``."""

    def __init__(self, group: str, iface: str, node_id: int) -> None:
        self.lib = lib = load()
        addr, port = group.rsplit(":", 1)
        self.instance = lib.NormCreateInstance(False)
        if not self.instance:
            raise RuntimeError("NormCreateInstance failed")
        self.session = lib.NormCreateSession(self.instance, addr.encode(), int(port), node_id)
        if not self.session:
            raise RuntimeError(f"NormCreateSession({group}) failed")
        if iface and not lib.NormSetMulticastInterface(self.session, iface.encode()):
            raise RuntimeError(f"NormSetMulticastInterface({iface}) failed")
        lib.NormSetTTL(self.session, 1)
        lib.NormSetGrttEstimate(self.session, 0.001)  # normCast's LAN timers
        lib.NormSetBackoffFactor(self.session, 0.0)
        self.fd = lib.NormGetDescriptor(self.instance)
        self.event = NormEvent()

    def next_event(self, timeout: float) -> int | None:
        """The next event's type, waiting up to ``timeout`` s (None: none came)."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready or not self.lib.NormGetNextEvent(self.instance, ctypes.byref(self.event),
                                                      False):
            return None
        return int(self.event.type)

    def close(self) -> None:
        self.lib.NormDestroySession(self.session)
        self.lib.NormDestroyInstance(self.instance)


def send_main(args: argparse.Namespace) -> dict[str, Any]:
    s = Session(args.group, args.iface, node_id=1)
    lib, session = s.lib, s.session
    lib.NormSetTxSocketBuffer(session, SOCKET_BUFFER)
    lib.NormSetCongestionControl(session, True, True)
    window = args.window_mib << 20
    if not lib.NormStartSender(session, os.getpid() & 0xFFFF, window, SEGMENT, FEC_DATA,
                               FEC_PARITY, 0):
        raise RuntimeError("NormStartSender failed")
    lib.NormSetAutoParity(session, 0)
    stream = lib.NormStreamOpen(session, window, None, 0)
    pad = b"x" * (args.size - 8)
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    rates: list[float] = []
    next_sample = t0
    for seq in range(args.count):
        rec = struct.pack("!q", seq) + pad
        done = 0
        while done < len(rec):
            done += lib.NormStreamWrite(stream, rec[done:], len(rec) - done)
            if done < len(rec):  # the stream buffer is full: wait for vacancy
                if time.monotonic() > deadline:
                    raise TimeoutError(f"NORM sender stuck at seq {seq}")
                s.next_event(0.1)
        lib.NormStreamMarkEom(stream)
        now = time.monotonic()
        if now >= next_sample:
            rates.append(round(lib.NormGetTxRate(session) / 8 / args.size, 1))
            next_sample = now + TIMELINE_S
    written_s = time.monotonic() - t0
    lib.NormStreamFlush(stream, True, NORM_FLUSH_ACTIVE)
    flushed = False
    while time.monotonic() < deadline:  # until the flush is acknowledged or times out
        if s.next_event(0.2) == TX_FLUSH_COMPLETED:
            flushed = True
            break
    send_s = time.monotonic() - t0
    lib.NormStreamClose(stream, True)
    end = time.monotonic() + 2.0
    while time.monotonic() < end and s.next_event(0.2) not in (TX_OBJECT_PURGED,
                                                                 LOCAL_SENDER_CLOSED):
        pass
    lib.NormStopSender(session)
    s.close()
    return {"system": "norm-cc", "sent": args.count, "written_s": round(written_s, 3),
            "send_s": round(send_s, 3), "flush_completed": flushed,
            "tx_rate_msgs_timeline": rates}


def recv_main(args: argparse.Namespace) -> dict[str, Any]:
    s = Session(args.group, args.iface, node_id=args.node_id)
    lib, session = s.lib, s.session
    lib.NormSetRxSocketBuffer(session, SOCKET_BUFFER)
    if not lib.NormStartReceiver(session, args.window_mib << 20):
        raise RuntimeError("NormStartReceiver failed")
    with open(args.ready_file + ".tmp", "w") as f:
        json.dump({"group": args.group}, f)
    os.replace(args.ready_file + ".tmp", args.ready_file)
    size, buf = args.size, ctypes.create_string_buffer(args.size)
    n = ctypes.c_uint(0)
    got, delivered, lost, expect, breaks = 0, 0, 0, 0, 0
    times: list[float] = []  # wall time of every 100th delivery, for mid-run rates
    streams: set[int] = set()
    deadline = time.monotonic() + args.timeout
    last_heard = None

    def read(stream: int) -> None:
        nonlocal got, delivered, lost, expect, breaks
        while True:
            n.value = size - got
            ok = lib.NormStreamRead(stream, ctypes.addressof(buf) + got, ctypes.byref(n))
            if not ok:  # a break: what was lost is beyond repair; resync at a record
                breaks += 1
                got = 0
                if not lib.NormStreamSeekMsgStart(stream):
                    return
                continue
            if n.value == 0:
                return
            got += n.value
            if got == size:
                got = 0
                seq = struct.unpack_from("!q", buf.raw)[0]
                if seq > expect:
                    lost += seq - expect
                expect = max(expect, seq + 1)
                delivered += 1
                if delivered % 100 == 0:
                    times.append(time.time())

    while time.monotonic() < deadline and expect < args.count:
        etype = s.next_event(0.1)
        if etype in (RX_OBJECT_NEW, RX_OBJECT_UPDATED, RX_OBJECT_COMPLETED):
            streams.add(s.event.object)
            last_heard = time.monotonic()
        if etype == RX_OBJECT_ABORTED:
            streams.discard(s.event.object)
        for st in list(streams):  # libnorm does not always post an update after a break
            read(st)
        if (last_heard is not None and expect < args.count
                and time.monotonic() - last_heard > args.idle_exit):
            break
    lib.NormStopReceiver(session)
    s.close()
    return {"system": "norm-cc", "delivered": delivered, "lost": lost + args.count - expect,
            "breaks": breaks, "times_per_100": times}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.norm_peer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("send", "recv"):
        q = sub.add_parser(name)
        q.add_argument("--group", required=True, help="multicast addr:port")
        q.add_argument("--iface", default="eth0")
        q.add_argument("--count", type=int, required=True)
        q.add_argument("--size", type=int, default=1000, help="bytes per record (>= 8)")
        q.add_argument("--window-mib", type=int, default=32,
                       help="repair window (sender) / receive buffer (receiver), MiB")
        q.add_argument("--timeout", type=float, default=120.0)
    sub.choices["recv"].add_argument("--ready-file", required=True)
    sub.choices["recv"].add_argument("--node-id", type=int, default=2)
    sub.choices["recv"].add_argument("--idle-exit", type=float, default=10.0,
                                     help="give up after this long without stream events")
    args = p.parse_args(argv)
    if args.size < 8:
        p.error("--size must be at least 8")
    why = norm_unavailable()
    if why:
        print(f"norm_peer: {why}", file=sys.stderr)
        return 2
    report = send_main(args) if args.cmd == "send" else recv_main(args)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
