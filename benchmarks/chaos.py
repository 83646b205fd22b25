"""Chaos run: random faults against real sender and receiver processes, then an exact
check of every receiver's accounting.

    .venv/bin/python benchmarks/chaos.py --seed 1 --duration-s 20          # short
    .venv/bin/python benchmarks/chaos.py --seed 7 --duration-s 150         # 10 minutes

Per transport (tcp; epgm inside a private network namespace, root only) and mode (nak,
ack), a round of ``--duration-s`` seconds runs receiver processes (one slow) and sender
processes that send stream after stream, while a seeded schedule:

* stops a receiver (SIGSTOP, SIGCONT 0.2-1.5 s later) or a sender (0.2-1 s);
* kills a receiver (SIGKILL) and starts a new one in its place 0.2-1 s later;
* kills a sender and starts it again (a new epoch);
* bursts garbage frames onto the data and the feedback paths.

All the time, a proxy between the receivers' feedback and the senders drops 10 % of
NAK, CREDIT and REPAIR frames and delays the rest by 0-30 ms.

Afterwards every receiver that was not killed reports, besides its snapshot, which seqs
of each (sender, epoch) its application took (``nakflow receive --deliveries``). A
violation is any of:

* a message delivered twice within one (sender, epoch);
* a stream whose END arrived where final seq != distinct delivered + dropped_unrepaired
  + lost + beyond_history + missed_before_join (nothing unaccounted, nothing silent);
* a stream a sender finished (its report says how many it sent) that a receiver alive
  all through it does not report, or reports with another final seq;
* over tcp, a stream whose sender was stopped part way (SIGTERM: no END) that a receiver
  alive all through it did not hear to the last seq its sender counted as sent, or heard
  with a gap;
* in ack, a message dropped by a full queue or lost in flight at a receiver that was up
  before the stream began (one that joins mid-stream may take a burst before the
  sender hears its first credit: reported, not a violation).

Not a violation, but counted (``finished_short``) and listed (SHORT): a finished stream
that a receiver up all through it ended short of, lost, dropped or beyond the history
(the sender's report names that receiver incomplete or unconfirmed).

The fault schedule and the accounting table are printed; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from nakflow import ProtocolError  # noqa: E402
from nakflow.testing import free_port, nakflow_cmd  # noqa: E402
from nakflow.wire import Credit, Nak, Repair, decode  # noqa: E402
from transports import open_pub, open_sub  # noqa: E402

NETNS_SETUP = ("ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo && "
               "exec \"$@\"")
STREAM_MSGS = 20_000
CAPACITY = 2_000
SLOW_RATE = 5_000.0


class FeedbackProxy:
    """SUB to the receivers' feedback, PUB to the senders: drops a seeded share of the
    ``lossy`` frame types (everything else passes, so HELLO answers still work), delays
    what passes by up to ``delay_s``; can inject garbage. (tests/test_chaos.py uses it.)"""

    def __init__(self, upstream: list[str], downstream: str, *, bind: bool, drop: float,
                 delay_s: float, seed: int,
                 lossy: tuple[type, ...] = (Nak, Credit, Repair)) -> None:
        # through the transport layer, as nakflow's own sockets: over epgm a bare PUB sends
        # at libzmq's default ZMQ_RATE, 100 kbit/s, and the feedback of an epgm round
        # queued for seconds behind it (a sender's measured RTT 168 ms on loopback, NAKs
        # of a receiver killed 2.3 s before; senders heard no PROGRESS and sent whole
        # streams into the slow receiver's queue: 14,289 and 15,111 beyond history)
        ctx = zmq.Context.instance()
        self.sub, _ = open_sub(ctx, upstream, bind=False)
        self.pub, _ = open_pub(ctx, [downstream], bind=bind)
        self.rng = random.Random(seed)
        self.drop, self.delay_s, self.lossy = drop, delay_s, lossy
        self.dropped = self.passed = 0
        self._held: list[tuple[float, bytes]] = []
        self._garbage = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def garbage(self, n: int) -> None:
        with self._lock:
            self._garbage += n

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sub.poll(5):
                buf = self.sub.recv()
                try:
                    lossy = isinstance(decode(buf), self.lossy)
                except ProtocolError:
                    lossy = False
                if lossy and self.rng.random() < self.drop:
                    self.dropped += 1
                else:
                    delay = self.rng.uniform(0, self.delay_s) if self.delay_s else 0.0
                    self._held.append((time.monotonic() + delay, buf))
            now = time.monotonic()
            due = sorted((t, b) for t, b in self._held if t <= now)
            self._held = [(t, b) for t, b in self._held if t > now]
            for _, buf in due:  # a delay may reorder frames, as a network may
                self.pub.send(buf)
                self.passed += 1
            with self._lock:
                n, self._garbage = self._garbage, 0
            for _ in range(n):
                self.pub.send(self.rng.randbytes(self.rng.randint(0, 200)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sub.close(0)
        self.pub.close(0)


@dataclass
class Incarnation:
    """One receiver or sender process."""

    name: str
    proc: subprocess.Popen[str]
    started: float
    ended: float | None = None
    killed: bool = False
    report: dict[str, Any] | None = None
    #: the report of a sender stopped part way (SIGTERM): not a finished stream's, but it
    #: says how far the sender got (a violation's trace)
    stopped_report: dict[str, Any] | None = None
    deliveries: dict[str, Any] | None = None
    path: str = ""
    wall: float = field(default_factory=time.time)


@dataclass
class Round:
    transport: str
    mode: str
    seed: int
    duration_s: float
    tmp: str
    rng: random.Random = field(init=False)
    receivers: dict[int, Incarnation] = field(default_factory=dict)
    past_receivers: list[Incarnation] = field(default_factory=list)
    senders: dict[int, Incarnation] = field(default_factory=dict)
    past_senders: list[Incarnation] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    faults: bool = True
    t0: float = 0.0
    counter: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        if self.transport == "tcp":
            self.rx_ports = [(free_port(), free_port()) for _ in range(3)]
            self.fb_down = f"tcp://127.0.0.1:{free_port()}"
            self.data = ",".join(f"tcp://127.0.0.1:{d}" for d, _ in self.rx_ports)
            self.rx_feedback = [f"tcp://127.0.0.1:{f}" for _, f in self.rx_ports]
        else:  # one group each way; the proxy republishes feedback on a third group
            self.data = "epgm://127.0.0.1;239.192.40.1:7101"
            self.rx_feedback = ["epgm://127.0.0.1;239.192.41.1:7201"]
            self.fb_down = "epgm://127.0.0.1;239.192.42.1:7301"

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, text: str) -> None:
        self.schedule.append(f"t={self.now():6.2f}  {text}")

    # -- processes -----------------------------------------------------------------
    def start_receiver(self, slot: int) -> None:
        self.counter += 1
        name = f"r{slot}.{self.counter}"
        path = os.path.join(self.tmp, f"{self.transport}-{self.mode}-{name}.json")
        if self.transport == "tcp":
            d, f = self.rx_ports[slot]
            data, fb = f"tcp://127.0.0.1:{d}", f"tcp://127.0.0.1:{f}"
        else:
            data, fb = self.data, self.rx_feedback[0]
        args = ["receive", "--data", data, "--feedback", fb, "--mode", self.mode,
                "--id", name, "--capacity", str(CAPACITY), "--json", "--deliveries", path,
                "--allow-loss"]  # the run checks every stream's accounting itself
        if slot == 0:
            args += ["--consume-rate", str(SLOW_RATE)]
        proc = subprocess.Popen(nakflow_cmd(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.receivers[slot] = Incarnation(name, proc, self.now(), path=path)

    def start_sender(self, slot: int) -> None:
        args = ["send", "--data", self.data, "--feedback", self.fb_down, "--feedback-proxy",
                "--mode", self.mode,
                "--id", f"s{slot}", "--count", str(STREAM_MSGS), "--json", "--allow-loss",
                # start once every receiver answered (a PUB drops what it sends to a peer
                # not yet connected), or after 5 s without (one is down)
                "--wait-receivers", "3",
                "--wait-timeout", "5"]
        proc = subprocess.Popen(nakflow_cmd(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.senders[slot] = Incarnation(f"s{slot}", proc, self.now())

    def reap_senders(self) -> None:
        """Senders that finished their stream: keep the report, start the next stream."""
        for slot, inc in list(self.senders.items()):
            if inc.proc.poll() is not None:
                out, err = inc.proc.communicate()
                inc.ended = self.now()
                # 1: the garbage counted as peers of another mode or key (the report says)
                if inc.proc.returncode in (0, 1) and out.strip():
                    inc.report = json.loads(out.strip().splitlines()[-1])
                    self.log(f"sender {inc.name} epoch {inc.report['epoch']} sent "
                             f"{inc.report['sent']:,} in {inc.ended - inc.started:.1f} s")
                else:
                    why = (err.strip().splitlines() or ["?"])[-1]
                    self.log(f"sender {inc.name} exited {inc.proc.returncode}: {why}")
                self.past_senders.append(inc)
                self.start_sender(slot)

    # -- faults --------------------------------------------------------------------
    def fault(self, proxy: FeedbackProxy, garbage: zmq.Socket[bytes]) -> list[Any]:
        """Do one random fault; returns (when, action) pairs still to do."""
        kind = self.rng.choice(["stop-rx", "stop-tx", "kill-rx", "kill-tx", "garbage"])
        if kind in ("stop-rx", "kill-rx") and not self.receivers:
            return []  # every receiver is being restarted
        if kind == "stop-rx":
            slot = self.rng.choice(sorted(self.receivers))
            inc, t = self.receivers[slot], self.rng.uniform(0.2, 1.5)
            inc.proc.send_signal(signal.SIGSTOP)
            self.log(f"SIGSTOP receiver {inc.name} for {t:.2f} s")
            return [(time.monotonic() + t, lambda: inc.proc.send_signal(signal.SIGCONT))]
        if kind == "stop-tx":
            slot = self.rng.choice(sorted(self.senders))
            inc, t = self.senders[slot], self.rng.uniform(0.2, 1.0)
            if inc.proc.poll() is None:
                inc.proc.send_signal(signal.SIGSTOP)
                self.log(f"SIGSTOP sender {inc.name} (epoch running) for {t:.2f} s")
                return [(time.monotonic() + t, lambda: inc.proc.send_signal(signal.SIGCONT))]
            return []
        if kind == "kill-rx":
            slot = self.rng.choice(sorted(self.receivers))
            inc, t = self.receivers.pop(slot), self.rng.uniform(0.2, 1.0)
            inc.proc.kill()
            inc.proc.communicate()
            inc.killed, inc.ended = True, self.now()
            self.past_receivers.append(inc)
            self.log(f"SIGKILL receiver {inc.name}; a new one in {t:.2f} s")
            return [(time.monotonic() + t, lambda: self.start_receiver(slot))]
        if kind == "kill-tx":
            slot = self.rng.choice(sorted(self.senders))
            inc = self.senders.pop(slot)
            inc.proc.kill()
            inc.proc.communicate()
            inc.killed, inc.ended = True, self.now()
            self.past_senders.append(inc)
            self.log(f"SIGKILL sender {inc.name}; restarted (a new epoch)")
            self.start_sender(slot)
            return []
        n = self.rng.randint(50, 300)
        for _ in range(n):
            garbage.send(self.rng.randbytes(self.rng.randint(0, 300)))
        proxy.garbage(n)
        self.log(f"{n} garbage frames on the data path and {n} on the feedback path")
        return []

    def run(self) -> None:
        proxy = FeedbackProxy(self.rx_feedback, self.fb_down, bind=self.transport == "tcp",
                              drop=0.1, delay_s=0.03, seed=self.seed)
        ctx = zmq.Context.instance()
        garbage, _ = open_pub(ctx, self.data.split(","), bind=False)  # at nakflow's rate
        self.t0 = time.monotonic()
        for slot in range(3):
            self.start_receiver(slot)
        time.sleep(1.0)  # receivers bind before the senders connect
        for slot in range(2):
            self.start_sender(slot)
        pending: list[Any] = []
        next_fault = time.monotonic() + self.rng.uniform(0.5, 2.0)
        end = self.t0 + self.duration_s
        try:
            while time.monotonic() < end:
                time.sleep(0.05)
                now = time.monotonic()
                for item in [p for p in pending if p[0] <= now]:
                    pending.remove(item)
                    item[1]()
                if now >= next_fault and self.faults:
                    pending += self.fault(proxy, garbage)
                    next_fault = now + self.rng.uniform(0.5, 2.0)
                self.reap_senders()
            for _, action in sorted(pending, key=lambda p: p[0]):
                action()  # every SIGCONT and restart still due
            self.finish()
        finally:
            for inc in [*self.senders.values(), *self.receivers.values()]:
                if inc.proc.poll() is None:
                    inc.proc.kill()
            proxy.close()
            garbage.close(0)
        self.log(f"feedback proxy: {proxy.dropped} frames dropped, {proxy.passed} passed")

    def finish(self) -> None:
        """Senders stop (SIGTERM: one still sending leaves without END, its stream is
        not a finished one; one in its close stops waiting for receipts); receivers
        report."""
        for inc in self.senders.values():
            inc.proc.send_signal(signal.SIGCONT)
            inc.proc.send_signal(signal.SIGTERM)
        for inc in self.senders.values():
            try:
                out, err = inc.proc.communicate(timeout=30)
                if inc.proc.returncode == 0 and out.strip():
                    inc.report = json.loads(out.strip().splitlines()[-1])
                elif inc.proc.returncode == 128 + signal.SIGTERM and out.strip():
                    inc.stopped_report = json.loads(out.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                inc.proc.kill()
                inc.proc.communicate()
                inc.killed = True
                self.log(f"sender {inc.name} did not end within 30 s of SIGTERM: killed")
            inc.ended = self.now()
            self.past_senders.append(inc)
        self.senders.clear()
        time.sleep(3.0)  # repairs still in flight reach the receivers
        for inc in self.receivers.values():
            inc.proc.send_signal(signal.SIGCONT)
            inc.proc.send_signal(signal.SIGTERM)
        for inc in self.receivers.values():
            out, err = inc.proc.communicate(timeout=60)
            inc.ended = self.now()
            if inc.proc.returncode in (0, 1) and out.strip():  # 1: garbage looked like
                # peers of another mode or key (exit-codes.md: --allow-loss excuses no such)
                inc.report = json.loads(out.strip().splitlines()[-1])
                with open(inc.path) as f:
                    inc.deliveries = json.load(f)
            else:
                self.log(f"receiver {inc.name} exited {inc.proc.returncode}: {err[-300:]}")
            self.past_receivers.append(inc)
        self.receivers.clear()


def check(rnd: Round) -> tuple[dict[str, Any], list[str], list[str]]:
    """The accounting table row of a round, its violations, and the finished streams a
    receiver up all through them ended short of (not violations: the sender named it)."""
    row = dict.fromkeys(("sent", "streams", "delivered", "dropped_unrepaired", "lost",
                         "beyond_history", "missed", "repaired", "incomplete", "malformed",
                         "finished_short"), 0)
    bad: list[str] = []
    short: list[str] = []
    finished = {(s.report["sender_id"], s.report["epoch"]): (s, s.report["sent"])
                for s in rnd.past_senders if s.report is not None}
    row["sent"] = sum(s.report["sent"] for s in rnd.past_senders if s.report is not None)
    reported = [r for r in rnd.past_receivers if r.report is not None]

    def started(sender: str, epoch: int) -> float | None:
        """When the process that sent (sender, epoch) started: the epoch is its start in
        ms since 1970, so it is the last incarnation of that id started before it."""
        runs = [s for s in rnd.past_senders if s.name == sender and s.wall <= epoch / 1000 + 0.5]
        return max(runs, key=lambda s: s.wall).started if runs else None

    def up_through(rx: Incarnation, tx: Incarnation) -> bool:
        """``rx`` was up from a second before ``tx`` started until it ended."""
        return rx.started <= tx.started - 1.0 and (rx.ended or 1e9) >= (tx.ended or 0.0)

    for rx in reported:
        assert rx.report is not None and rx.deliveries is not None
        row["malformed"] += rx.report["malformed"]
        took = {(d["sender"], d["epoch"]): d for d in rx.deliveries["streams"]}
        heard = set()
        for st in rx.report["senders"]:
            key = (st["sender"], st["epoch"])
            heard.add(key)
            d = took.get(key, {"distinct": 0, "duplicates": 0})
            row["streams"] += 1
            row["delivered"] += d["distinct"]
            row["dropped_unrepaired"] += st["dropped"]
            row["lost"] += st["lost"]
            row["beyond_history"] += st["beyond_history"]
            row["missed"] += st["missed_before_join"]
            row["repaired"] += st["repaired"]
            where = f"{rx.name} {st['sender']}/{st['epoch']}"
            if d["duplicates"]:
                bad.append(f"{where}: {d['duplicates']} delivered twice")
            if st["final_seq"] is None:
                row["incomplete"] += 1
            else:
                accounted = (d["distinct"] + st["dropped"] + st["lost"] + st["beyond_history"]
                             + st["missed_before_join"])
                if accounted != st["final_seq"]:
                    bad.append(f"{where}: final seq {st['final_seq']} but {accounted} "
                               f"accounted ({d['distinct']} delivered, {st['dropped']} "
                               f"dropped, {st['lost']} lost, {st['beyond_history']} beyond "
                               f"history, {st['missed_before_join']} missed)")
                if key in finished and finished[key][1] != st["final_seq"]:
                    bad.append(f"{where}: sender sent {finished[key][1]}, END said "
                               f"{st['final_seq']}")
            t_start = started(*key)
            missing = st["dropped"] + st["lost"] + st["beyond_history"]
            if missing and key in finished:
                tx = finished[key][0]
                if up_through(rx, tx):
                    row["finished_short"] += 1
                    said = next((f"{a['status']} ({a['why']})" for a in
                                 (tx.report or {}).get("at_close") or []
                                 if a.get("receiver") == rx.name), "not named")
                    short.append(f"{where}: {missing:,} short ({st['dropped']:,} dropped, "
                                 f"{st['lost']:,} lost, {st['beyond_history']:,} beyond "
                                 f"history) of a finished stream it was up all through; "
                                 f"the sender said {said}")
            if (rnd.mode == "ack" and (st["dropped"] or st["lost"])
                    and t_start is not None and rx.started <= t_start - 1.0):
                bad.append(f"{where}: ack lost {st['lost']} and dropped {st['dropped']}; "
                           + _trace(rnd, key, st, d))
        for key, (tx, _) in finished.items():
            if up_through(rx, tx) and key not in heard:
                sent = tx.report["sent"] if tx.report else "?"
                bad.append(f"{rx.name}: never reports {key[0]}/{key[1]} ({sent} sent, "
                           f"t={tx.started:.2f}-{tx.ended:.2f} s), though it was up all "
                           "through")
        if rnd.transport == "tcp":  # nothing is lost in flight: a sender stopped part way
            # (SIGTERM) sent what it counted before its BYE, and a receiver up all through
            # it heard every seq of it (a signal's exception once lost a frame with its seqs)
            by_key = {(st["sender"], st["epoch"]): st for st in rx.report["senders"]}
            for tx in rnd.past_senders:
                r = tx.stopped_report
                if r is None or not r["sent"] or not up_through(rx, tx):
                    continue
                key = (r["sender_id"], r["epoch"])
                st = by_key.get(key)
                if st is None or st["next_seq"] != r["sent"] or st["lost"]:
                    d = took.get(key, {})
                    bad.append(f"{rx.name} {key[0]}/{key[1]}: its sender, stopped by SIGTERM, "
                               f"sent {r['sent']}, and this receiver up all through it "
                               + ("never reports it" if st is None else
                                  f"heard up to seq {st['next_seq']} with {st['lost']} lost; "
                                  + _trace(rnd, key, st, d)))
    row["violations"] = len(bad)
    return row, bad, short


def _trace(rnd: Round, key: tuple[str, int], st: dict[str, Any],
           d: dict[str, Any]) -> str:
    """Where a stream's messages went missing at a receiver, and how far its sender got:
    a violation says enough to look for its cause without running it again."""
    tx = next((s for s in rnd.past_senders for r in (s.report, s.stopped_report)
               if r is not None and (r["sender_id"], r["epoch"]) == key), None)
    said = "no report (killed)"
    if tx is not None:
        r = tx.report or tx.stopped_report or {}
        said = (f"{'finished' if tx.report else 'stopped by SIGTERM'} at t={tx.ended:.2f} "
                f"having sent {r.get('sent')} in {r.get('frames')} frames, started "
                f"t={tx.started:.2f}")
    return (f"seqs not taken [lo, hi): {d.get('holes')} (received {st.get('received')}, "
            f"next seq {st.get('next_seq')}, final seq {st['final_seq']}); its sender: "
            f"{said}")


def run_rounds(args: argparse.Namespace, transport: str) -> tuple[list[dict[str, Any]], int]:
    rows, violations = [], 0
    with tempfile.TemporaryDirectory(prefix="nakflow-chaos-") as tmp:
        for k, mode in enumerate(args.modes.split(",")):
            rnd = Round(transport, mode, args.seed * 100 + k, args.duration_s, tmp,
                        faults=not args.no_faults)
            print(f"[chaos] {transport} {mode}: {args.duration_s:.0f} s, seed "
                  f"{rnd.seed} ...", file=sys.stderr, flush=True)
            rnd.run()
            row, bad, short = check(rnd)
            print(f"[chaos] {transport} {mode} fault schedule:")
            for line in rnd.schedule:
                print(f"    {line}")
            for line in short:
                print(f"    SHORT {line}")
            for line in bad:
                print(f"    VIOLATION {line}")
            rows.append({"transport": transport, "mode": mode, **row})
            violations += len(bad)
    return rows, violations


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seed", type=int, default=1, help="the same seed, the same schedule")
    ap.add_argument("--duration-s", type=float, default=20.0, help="length of each round")
    ap.add_argument("--modes", default="nak,ack", help="modes, a round each")
    ap.add_argument("--transports", default="tcp,epgm",
                    help="tcp; epgm runs in a private network namespace (root, pgm)")
    ap.add_argument("--no-faults", action="store_true",
                    help="a baseline: the same run without faults (the proxy still drops)")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    violations = 0
    transports = args.transports.split(",")
    # the epgm rounds run in their own namespace at the same time as the tcp rounds here
    # (independent groups: it halves the run, and each group's accounting must hold with
    # the other loading the machine)
    inner = None
    if "epgm" in transports and not args.inner:
        transports.remove("epgm")
        why = _multicast_unavailable()
        if why:
            print(f"[chaos] epgm skipped: {why}", file=sys.stderr)
        else:
            inner = _start_epgm_rounds(args)
    for transport in transports:
        r, v = run_rounds(args, transport)
        rows += r
        violations += v
    if inner is not None:
        r, v = _epgm_results(inner, args.duration_s * 4 + 300)
        rows += r
        violations += v
    if args.json:
        print(json.dumps({"rows": rows, "violations": violations}))
        return 0 if violations == 0 else 1
    from nakflow.tables import format_table

    print(format_table(rows, notes=NOTES))
    print(f"{violations} violation(s)")
    return 0 if violations == 0 else 1


NOTES = {
    "transport": "tcp on 127.0.0.1, or epgm in a private network namespace",
    "sent": "messages sent by the sender processes that were not killed (each receiver "
            "should see them)",
    "streams": "(receiver, sender epoch) pairs reported by the receivers that were not "
               "killed",
    "delivered": "distinct messages their applications took",
    "missed": "missed_before_join: sent before a (restarted) receiver heard the sender",
    "incomplete": "streams without END (their sender was killed), reported as such",
    "malformed": "garbage frames the receivers counted and dropped",
    "violations": "accounting violations (see the schedule above for each)",
    "dropped_unrepaired": "dropped by a full queue and never repaired",
    "finished_short": "(receiver, stream) pairs where a sender finished its stream (its "
                      "report is in) and a receiver up all through it ended short: not "
                      "violations (the sender's report names that receiver), but what "
                      "nak's repair did not make whole (SHORT lines above)",
}


def _start_epgm_rounds(args: argparse.Namespace) -> subprocess.Popen[str]:
    """This script's epgm rounds, in a private network namespace (the safety rule)."""
    argv2 = [sys.executable, os.path.abspath(__file__), "--inner", "--json",
             "--transports", "epgm", "--seed", str(args.seed), "--duration-s",
             str(args.duration_s), "--modes", args.modes,
             *(["--no-faults"] if args.no_faults else [])]
    return subprocess.Popen(["unshare", "-n", "sh", "-c", NETNS_SETUP, "sh", *argv2],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _epgm_results(proc: subprocess.Popen[str], timeout_s: float) -> tuple[list[Any], int]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n[chaos] the epgm rounds did not end within {timeout_s:.0f} s\n"
    sys.stderr.write("".join(line for line in err.splitlines(True)
                             if not line.startswith("Warn: Interface lo")))
    lines = [ln for ln in out.strip().splitlines()
             if not ln.startswith("Warn: Interface lo")]  # OpenPGM on loopback
    print("\n".join(lines[:-1]))
    try:
        inner = json.loads(lines[-1])
    except (IndexError, ValueError):
        print("[chaos] the epgm rounds gave no result", file=sys.stderr)
        return [], 1
    return inner["rows"], inner["violations"]


def _multicast_unavailable() -> str | None:
    from tests.netns import multicast_unavailable  # the project's root is on sys.path

    return multicast_unavailable()


if __name__ == "__main__":
    sys.exit(main())
