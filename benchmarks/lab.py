"""An emulated multi-host network for trying the modes over real IP multicast (epgm).

    sudo .venv/bin/python -m benchmarks.lab                  # nak, ack, none; a table
    sudo .venv/bin/python -m benchmarks.lab --bottleneck 8mbit --modes nak --json

Each host is its own network namespace with one interface (``eth0``, 10.99.0.N/24)
joined by a Linux bridge that lives in a namespace of its own, so nothing of it touches
the machine's real interfaces: multicast (224.0.0.0/4) is routed to ``eth0`` inside each
host only. Host ``tx`` sends; ``rx1``..``rxN`` receive as separate processes
(``nakflow send`` / ``nakflow receive``). The last receiver's link is a bottleneck: a
``tbf`` qdisc on the bridge's port towards it (what a slow WAN link or a congested
switch port does: it queues, then drops). Needs root, iproute2 and a pyzmq with OpenPGM.

Exit status 1 if a receiver of a flow-controlled mode (nak, ack) lacks any message; the
table says by what (``lost``, ``dropped_unrepaired``, ``beyond_history``) and what the
sender's close learnt of it (``at_close``). ``none`` is the control: its losses are shown,
not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from nakflow.tables import format_table
from nakflow.testing import feedback_phases, first_signal

SUBNET = "10.99.0"
DATA_GROUP, FEEDBACK_GROUP = "239.193.7.1:5601", "239.193.7.2:5602"
LAB_NOTES = {"transport": "tcp (each receiver's own connections), epgm (PGM multicast over "
                          "UDP) or norm (the NORM-CC peer), through the namespaces' bridge",
             "rows_per_s": "the whole run at the sender: messages sent / the time it took "
                           "to send them (the same on every row of a run)",
             "receiver": "rx1, rx2 on full-speed links; the last one behind the --bottleneck "
                        "link (a tbf qdisc)",
             "link": "the receiver's link: bridge port rate (tbf) or 'full'",
             "repair_reqs": "repair requests this receiver sent (nak mode)",
             "mid_run": "msgs/s between a quarter and three quarters of the messages "
                        "delivered (steady state)",
             "goodput": "msgs/s over the whole run at this receiver",
             "signal_s": "s from the sender's first DATA frame to its first signal: its "
                         "start's end on a delay rise, a full pipe, a NAK or a stall, or "
                         "else its first cut (nak; the same on each row of a run; None: "
                         "neither came)",
             "sent_before": "messages the sender sent before that first signal: the "
                            "start's overshoot at most (the link carries ~950 a second)",
             "rise_s": "s from the sender's first DATA frame to its start's first delay "
                       "rise (its growth slows from then; None: none)",
             "sent_at_rise": "messages the sender sent before that delay rise",
             "in_flight_at_rise": "of those, what the slowest receiver had not confirmed "
                                  "then: in the link's queue or on the way (the link's "
                                  "token bucket passes its first 32 KB at once)",
             "at_close": "what the sender's close learnt of this receiver (its receipt: "
                         "complete or incomplete; gone; unconfirmed)"}
#: Modes with flow control: a receiver of theirs that lacks a message makes the run fail
#: (exit 1). ``none`` is the control that shows what happens without.
CONTROLLED = ("nak", "ack")


def losses(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per receiver of a flow-controlled mode that lacks messages."""
    return [f"{r['mode']} over {r['transport']}: {r['receiver']} lacks {r['missing']:,} "
            f"(lost {r['lost']}, dropped_unrepaired {r['dropped_unrepaired']}, "
            f"beyond_history {r['beyond_history']}; sender: {r['at_close']})"
            for r in rows if r["mode"] in CONTROLLED and r["missing"]]


def lab_unavailable() -> str | None:
    """Why the lab cannot run here, or None if it can."""
    import zmq

    if not zmq.has("pgm"):
        return "pyzmq has no OpenPGM (zmq.has('pgm') is False): run scripts/setup.sh as root"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    return None


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {run.stderr.strip()}")


_LABS = itertools.count()


class Lab:
    """``with Lab(["tx", "rx1", "rx2", "rx3"], bottleneck={"rx3": "8mbit"}) as lab:``"""

    def __init__(self, hosts: Sequence[str], bottleneck: dict[str, str] | None = None,
                 prefix: str | None = None, queue_ms: int = 200) -> None:
        self.hosts = list(hosts)
        self.queue_ms = queue_ms
        self.bottleneck = dict(bottleneck or {})
        self.prefix = prefix or f"nfl{os.getpid()}n{next(_LABS)}"  # several labs at once
        self.switch = f"{self.prefix}-sw"
        self.address = {h: f"{SUBNET}.{i + 1}" for i, h in enumerate(self.hosts)}
        self.procs: list[subprocess.Popen[str]] = []

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def __enter__(self) -> Lab:
        try:
            self._build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns, port = self.ns(host), f"p{i}"
            _ip("netns", "add", ns)
            # the pair is made inside the switch's namespace, its far end moved to the host:
            # it never exists in the machine's own namespace
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up", "multicast", "on")
            _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
            rate = self.bottleneck.get(host)
            if rate:  # traffic from the bridge to this host passes the token bucket
                run = subprocess.run(
                    ["ip", "netns", "exec", self.switch, "tc", "qdisc", "add", "dev", port,
                     "root", "tbf", "rate", rate, "burst", "32kb", "latency",
                     f"{self.queue_ms}ms"],
                    capture_output=True, text=True)
                if run.returncode != 0:
                    raise RuntimeError(f"tc tbf on {port}: {run.stderr.strip()}")

    def popen(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv], text=True, **kw)
        self.procs.append(proc)
        return proc

    def endpoint(self, host: str, group: str) -> str:
        return f"epgm://{self.address[host]};{group}"

    def qdisc_stats(self, host: str) -> str:
        port = f"p{self.hosts.index(host)}"
        return subprocess.run(["ip", "netns", "exec", self.switch, "tc", "-s", "qdisc", "show",
                               "dev", port], capture_output=True, text=True).stdout

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for name in [self.ns(h) for h in self.hosts] + [self.switch]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def nakflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "nakflow", *args]


def endpoints(lab: Lab, transport: str) -> dict[str, tuple[str, str]]:
    """(data, feedback) per host: the multicast groups on each host's address (epgm), or
    each receiver's own TCP ports, which the sender connects to all of (tcp)."""
    if transport == "epgm":
        return {h: (lab.endpoint(h, DATA_GROUP), lab.endpoint(h, FEEDBACK_GROUP))
                for h in lab.hosts}
    rxs = lab.hosts[1:]
    out = {h: (f"tcp://{lab.address[h]}:5601", f"tcp://{lab.address[h]}:5602") for h in rxs}
    out[lab.hosts[0]] = (",".join(out[h][0] for h in rxs), ",".join(out[h][1] for h in rxs))
    return out


def run_mode(lab: Lab, mode: str, *, count: int, size: int, timeout_s: float,
             transport: str = "epgm", capacity: int = 5_000,
             send_args: Sequence[str] = ()) -> dict[str, Any]:
    """One sender on ``lab.hosts[0]``, a receiver on each other host; their snapshots."""
    tx, rxs = lab.hosts[0], lab.hosts[1:]
    eps = endpoints(lab, transport)
    tmp = tempfile.mkdtemp(prefix="nakflow-lab-")
    procs = {}
    for host in rxs:
        ready = os.path.join(tmp, f"{host}.json")
        procs[host] = lab.popen(host, nakflow(
            "receive", "--data", eps[host][0], "--feedback", eps[host][1], "--mode", mode,
            "--id", host, "--capacity", str(capacity), "--senders", "1",
            "--duration", str(timeout_s), "--json", "--ready-file", ready),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    for host in rxs:
        while not os.path.exists(os.path.join(tmp, f"{host}.json")):
            if procs[host].poll() is not None or time.monotonic() > deadline:
                why = procs[host].stderr.read() if procs[host].stderr else ""
                raise RuntimeError(f"receiver {host} did not start: {why}")
            time.sleep(0.05)
    t0 = time.monotonic()
    sender = lab.popen(tx, nakflow(
        "send", "--data", eps[tx][0], "--feedback", eps[tx][1], "--mode", mode, "--id", "tx",
        "--count", str(count), "--size", str(size), "--wait-receivers", str(len(rxs)),
        "--wait-timeout", "30", "--json", *send_args), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = sender.communicate(timeout=timeout_s + 60)
    if sender.returncode not in (0, 1):  # 1: a receiver lacks data (the report says which)
        raise RuntimeError(f"sender failed ({sender.returncode}): {err[-2000:]}")
    send_s = time.monotonic() - t0
    result: dict[str, Any] = {"mode": mode, "transport": transport, "send_s": send_s,
                              "sender": json.loads(out), "receivers": {}}
    for host, proc in procs.items():
        out, err = proc.communicate(timeout=timeout_s + 60)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"receiver {host} failed ({proc.returncode}): {err[-2000:]}")
        result["receivers"][host] = json.loads(out)
    result["bottleneck_qdisc"] = {h: lab.qdisc_stats(h) for h in lab.bottleneck}
    shutil.rmtree(tmp, ignore_errors=True)
    return result


NORM_GROUP = "239.193.7.9:6003"


def run_norm(lab: Lab, *, count: int, size: int, timeout_s: float) -> dict[str, Any]:
    """The same transfer with NORM-CC (``benchmarks/norm_peer.py``): a NORM receiver on each
    receiver host, a NORM sender on ``lab.hosts[0]``, group NORM_GROUP on ``eth0``."""
    tx, rxs = lab.hosts[0], lab.hosts[1:]
    tmp = tempfile.mkdtemp(prefix="nakflow-lab-norm-")
    peer = [sys.executable, "-m", "benchmarks.norm_peer"]
    common = ["--group", NORM_GROUP, "--iface", "eth0", "--count", str(count), "--size",
              str(size), "--timeout", str(timeout_s)]
    procs = {}
    for i, host in enumerate(rxs):
        procs[host] = lab.popen(host, [*peer, "recv", *common, "--node-id", str(i + 2),
                                       "--ready-file", os.path.join(tmp, f"{host}.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for host in rxs:
        end = time.monotonic() + 30
        while not os.path.exists(os.path.join(tmp, f"{host}.json")):
            if procs[host].poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"NORM receiver {host} did not start: "
                                   f"{procs[host].stderr.read() if procs[host].stderr else ''}")
            time.sleep(0.05)
    t0 = time.time()
    sender = lab.popen(tx, [*peer, "send", *common], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out, err = sender.communicate(timeout=timeout_s + 60)
    if sender.returncode != 0:
        raise RuntimeError(f"NORM sender failed ({sender.returncode}): {err[-2000:]}")
    result: dict[str, Any] = {"mode": "norm-cc", "transport": "norm", "started_at": t0,
                              "sender": json.loads(out), "receivers": {}}
    result["send_s"] = result["sender"]["send_s"]
    for host, proc in procs.items():
        out, err = proc.communicate(timeout=timeout_s + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"NORM receiver {host} failed ({proc.returncode}): {err[-2000:]}")
        result["receivers"][host] = json.loads(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def mid_run_rate(times: Sequence[float], counts: Sequence[float], total: int) -> float | None:
    """The rate between a quarter and three quarters of ``total`` delivered: steady state,
    without the start-up and the tail."""
    import numpy as np

    if len(times) < 2 or counts[-1] < 0.75 * total:
        return None
    ta, tb = np.interp([0.25 * total, 0.75 * total], counts, times)
    return 0.5 * total / (tb - ta) if tb > ta else None


def _receiver_row(res: dict[str, Any], host: str, snap: dict[str, Any], count: int,
                  lab: Lab) -> dict[str, Any]:
    if res["mode"] == "norm-cc":
        times = snap["times_per_100"]
        whole = (snap["delivered"] / (times[-1] - res["started_at"])) if times else 0.0
        return {"mode": "norm-cc", "transport": "norm", "receiver": host,
                "link": lab.bottleneck.get(host, "full"),
                "rows_per_s": round(count / res["send_s"]), "goodput": round(whole),
                "mid_run": _round(mid_run_rate(times, [100 * (i + 1) for i in
                                                       range(len(times))], count)),
                "delivered": snap["delivered"], "missing": count - snap["delivered"],
                "dropped": "-", "repaired": "-", "lost": snap["lost"],
                "dropped_unrepaired": "-", "beyond_history": "-",
                "naks": "-", "progress": "-", "credits": "-", "repair_reqs": "-",
                "fb_start": "-",
                "fb_after": "-", "flow_start": "-", "flow_after": "-", "signal_s": "-",
                "sent_before": "-", "rise_s": "-", "sent_at_rise": "-",
                "in_flight_at_rise": "-",
                "at_close": "-"}  # NORM
    # does not say
    tl = snap.get("timeline") or {}
    times = [snap["started_at"] + t for t in tl.get("t", [])]
    at_close = {c["receiver"]: c for c in res["sender"].get("at_close") or []}.get(host)
    return {"mode": res["mode"], "transport": res["transport"], "receiver": host,
            "link": lab.bottleneck.get(host, "full"),
            "rows_per_s": round(count / res["send_s"]),
            "goodput": round(snap["goodput_msgs"]),
            "mid_run": _round(mid_run_rate(times, tl.get("delivered", []), count)),
            "delivered": snap["delivered"], "missing": count - snap["delivered"],
            "dropped": snap["dropped"], "repaired": snap["repaired"], "lost": snap["lost"],
            "dropped_unrepaired": snap["dropped_unrepaired"],
            "beyond_history": snap["beyond_history"],
            "naks": sum(snap["naks_sent"].values()), "progress": snap["progress_sent"],
            "credits": snap["credits_sent"],
            "repair_reqs": (snap["repair"] or {}).get("requests_sent", 0),
            **feedback_phases(snap), **first_signal(res["sender"]),
            "at_close": "-" if at_close is None else at_close["status"]}


def _round(x: float | None) -> int | None:
    return None if x is None else round(x)


def table_rows(results: list[dict[str, Any]], lab: Lab, count: int) -> list[dict[str, Any]]:
    return [_receiver_row(res, host, snap, count, lab)
            for res in results for host, snap in res["receivers"].items()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="nak,ack,none", help="comma-separated modes to run")
    p.add_argument("--transport", choices=("epgm", "tcp"), default="epgm",
                   help="IP multicast (PGM over UDP), or TCP to each receiver host")
    p.add_argument("--receivers", type=int, default=3, help="receiver hosts (last: slow link)")
    p.add_argument("--bottleneck", default="8mbit",
                   help="tbf rate of the last receiver's link (tc units: kbit, mbit)")
    p.add_argument("--queue-ms", type=int, default=200,
                   help="the bottleneck's queue, as milliseconds at its rate (tbf latency); "
                        "past it the link drops")
    p.add_argument("--count", type=int, default=20_000, help="messages per mode")
    p.add_argument("--size", type=int, default=1_000, help="payload bytes per message")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per mode, at most")
    p.add_argument("--peers", default="",
                   help="peer systems to run in the same lab: 'norm' (NORM-CC, libnorm)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    why = lab_unavailable()
    if why:
        print(f"lab: cannot run: {why}", file=sys.stderr)
        return 2
    hosts = ["tx", *(f"rx{i + 1}" for i in range(args.receivers))]
    results = []
    with Lab(hosts, bottleneck={hosts[-1]: args.bottleneck}, queue_ms=args.queue_ms) as lab:
        for mode in (m.strip() for m in args.modes.split(",") if m.strip()):
            print(f"[lab] mode {mode}: {args.count:,} messages of {args.size} bytes, "
                  f"{args.receivers} receivers, {hosts[-1]} behind {args.bottleneck} ...",
                  file=sys.stderr, flush=True)
            results.append(run_mode(lab, mode, count=args.count, size=args.size,
                                    timeout_s=args.timeout, transport=args.transport))
        if "norm" in args.peers.split(","):
            from benchmarks.norm_peer import norm_unavailable

            why_norm = norm_unavailable()
            if why_norm:
                print(f"[lab] NORM skipped: {why_norm}", file=sys.stderr, flush=True)
            else:
                print(f"[lab] NORM-CC: {args.count:,} messages of {args.size} bytes ...",
                      file=sys.stderr, flush=True)
                results.append(run_norm(lab, count=args.count, size=args.size,
                                        timeout_s=args.timeout))
        rows = table_rows(results, lab, args.count)
    lacking = losses(rows)
    if args.json:
        print(json.dumps({"rows": rows, "runs": results, "losses": lacking}, default=str))
    else:
        print(format_table(rows, notes=LAB_NOTES))
    for line in lacking:
        print(f"[lab] LOSS: {line}", file=sys.stderr, flush=True)
    return 1 if lacking else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
