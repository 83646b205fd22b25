"""A 1 -> 3 fan-out with a receiver killed or stopped mid-run: how long the other two stall,
for a real JGroups group and for nakflow's modes, in one run.

    sudo .venv/bin/python -m benchmarks.fanout_faults [--systems jgroups,nak,ack]
        [--faults kill,stop] [--seconds 7] [--size 1000] [--json]

Every system moves SIZE-byte messages from one sending process to three receiving processes
as fast as it can (no rate cap) for SECONDS. At FAULT_AT_S the third receiver is killed
(SIGKILL) or stopped (SIGSTOP, SIGCONT STOP_S later). The two others sample their delivered
count every 50 ms; from that:

* ``before``: their mean rate in the second before the fault (msgs/s);
* ``stalled_s``: 100 ms windows after the fault in which they took < 10 % of ``before``;
* ``below_0.9_s`` and ``worst_window``: windows below 0.9x ``before``, and the lowest window
  as a fraction of it, from 50 ms after the fault to 2 s after it ended (the target for
  nak: every window >= 0.9x);
* for a stopped receiver, what it was missing at the end.

JGroups 2.12 (Debian ``libjgroups-java``; ``benchmarks/jgroups/Member.java`` is compiled at run
time) uses its shipped ``udp.xml`` (IP multicast, UFC/MFC credit, FD_SOCK, VERIFY_SUSPECT
1.5 s). IP multicast stays inside a private network namespace (``unshare -n``, loopback
only), so the whole run re-executes itself there; that needs root. nakflow runs as its CLI
processes over tcp on 127.0.0.1 in the same namespace. A system that cannot start here is
skipped, and the table says why.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from nakflow.tables import format_table  # noqa: E402
from nakflow.testing import LocalReceivers, ReceiverSpec, nakflow_cmd  # noqa: E402

FAULT_AT_S, STOP_S = 2.0, 3.0
WINDOW_S = 0.1
JGROUPS_JARS = ("/usr/share/java/jgroups.jar",)
NETNS_SETUP = "ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo"
NOTES = {"faulty_told": "of those, how many the stopped receiver was told are beyond the "
                       "sender's history (GONE: counted and reported, not silent)",
         "stalled_s": "seconds (100 ms windows) the two others took < 10 % of their rate "
                      "before the fault",
         "below_0.9_s": "seconds their rate was below 0.9x, from 50 ms after the fault to "
                        "2 s after it ended",
         "worst_window": "their slowest 100 ms window in that span, as a fraction of before",
         "faulty_missing": "messages the stopped receiver lacked at the end"}


def log(msg: str) -> None:
    print(f"[fanout] {msg}", file=sys.stderr, flush=True)


def jgroups_unavailable() -> str | None:
    if not all(os.path.exists(j) for j in JGROUPS_JARS):
        return "JGroups is not installed (Debian: apt-get install libjgroups-java)"
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "no Java compiler (javac) on PATH"
    return None


def in_private_netns() -> bool:
    return os.environ.get("NAKFLOW_PRIVATE_NETNS") == "1"


# -- measuring -----------------------------------------------------------------------
def window_rates(wall: list[float], delivered: list[float], a: float, b: float) -> list[float]:
    """Rates over consecutive WINDOW_S windows in [a, b), from cumulative samples."""
    import numpy as np

    if len(wall) < 2:
        return []
    edges = np.arange(a, b + 1e-9, WINDOW_S)
    counts = np.interp(edges, wall, delivered)
    return list(np.diff(counts) / WINDOW_S)


def measure(others: list[tuple[list[float], list[float]]], t_fault: float,
            t_over: float) -> dict[str, Any]:
    """The others' mean rate per window around a fault at ``t_fault`` that ended at
    ``t_over`` (wall clock)."""
    ahead = [r for w, d in others for r in window_rates(w, d, t_fault - 1.0, t_fault)]
    before = sum(ahead) / len(ahead) if ahead else 0.0
    spans = [window_rates(w, d, t_fault + 0.05, t_over + 2.0) for w, d in others]
    n = min((len(s) for s in spans), default=0)
    mean = [sum(s[i] for s in spans) / len(spans) for i in range(n)]
    stalled = [window_rates(w, d, t_fault, t_over + 2.0) for w, d in others]
    m2 = min((len(s) for s in stalled), default=0)
    mean2 = [sum(s[i] for s in stalled) / len(stalled) for i in range(m2)]
    return {"before": round(before),
            "stalled_s": round(sum(WINDOW_S for r in mean2 if r < 0.1 * before), 1),
            "below_0.9_s": round(sum(WINDOW_S for r in mean if r < 0.9 * before), 1),
            "worst_window": round(min(mean) / before, 2) if mean and before else None}


def apply_fault(proc: subprocess.Popen[Any], fault: str, t_start: float) -> tuple[float, float]:
    """Wait until FAULT_AT_S after ``t_start`` (wall), then kill or stop ``proc``; returns
    (wall time of the fault, wall time it ended)."""
    time.sleep(max(0.0, t_start + FAULT_AT_S - time.time()))
    t_fault = time.time()
    if fault == "kill":
        proc.send_signal(signal.SIGKILL)
        return t_fault, t_fault
    proc.send_signal(signal.SIGSTOP)
    time.sleep(STOP_S)
    proc.send_signal(signal.SIGCONT)
    return t_fault, time.time()


# -- JGroups -------------------------------------------------------------------------
def compile_member(workdir: str) -> str:
    cp = ":".join(JGROUPS_JARS)
    subprocess.run(["javac", "-nowarn", "-d", workdir, "-cp", cp,
                    os.path.join(HERE, "jgroups", "Member.java")], check=True,
                   capture_output=True, text=True)
    return f"{cp}:{workdir}"


def run_jgroups(fault: str, seconds: float, size: int, classpath: str) -> dict[str, Any]:
    java = ["java", "-Djava.net.preferIPv4Stack=true", "-Djgroups.bind_addr=127.0.0.1",
            "-Xmx256m", "-cp", classpath, "Member"]
    cluster = f"nakflow-peer-{os.getpid()}-{fault}"
    rxs = [subprocess.Popen([*java, "recv", "udp.xml", cluster, str(seconds + 40)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(3)]
    try:
        for p in rxs:
            _await_line(p, "READY", 60)
        tx = subprocess.Popen([*java, "send", "udp.xml", cluster, "4", str(seconds), str(size)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _await_line(tx, "READY", 90)
        t_fault, t_over = apply_fault(rxs[2], fault, time.time())
        out, err = tx.communicate(timeout=seconds + 120)
        if tx.returncode != 0:
            raise RuntimeError(f"JGroups sender failed: {err[-800:]}")
        sender = json.loads(out.strip().splitlines()[-1])
        reports = []
        for p in rxs[: 2 if fault == "kill" else 3]:
            out, err = p.communicate(timeout=seconds + 60)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in rxs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    if os.environ.get("FANOUT_DEBUG"):
        print(json.dumps({"sender": sender, "receivers": reports})[:3000], file=sys.stderr)
    row = measure([(r["timeline"]["wall"], r["timeline"]["delivered"]) for r in reports[:2]],
                  t_fault, t_over)
    row["faulty_missing"] = (sender["sent"] - reports[2]["delivered"]) if fault == "stop" else None
    row["sent"] = sender["sent"]
    return row


def _await_line(proc: subprocess.Popen[str], word: str, timeout_s: float) -> None:
    """Read ``proc``'s stderr until a line is ``word`` (JGroups logs much else there)."""
    end = time.monotonic() + timeout_s
    assert proc.stderr is not None
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"{proc.args[-6:]} exited before {word}")
        if line.strip() == word:
            return
    raise TimeoutError(f"no {word} within {timeout_s} s")


# -- nakflow -------------------------------------------------------------------------
#: nakflow rows: system name -> (mode, options for every process). "nak-norepair" shows
#: what the stopped receiver's catch-up costs the others (nothing repaired).
NAKFLOW_SYSTEMS = {"nak": ("nak", []), "ack": ("ack", []),
                   "nak-norepair": ("nak", ["--no-repair"])}


def run_nakflow(system: str, fault: str, seconds: float, size: int) -> dict[str, Any]:
    mode, extra = NAKFLOW_SYSTEMS[system]
    specs = [ReceiverSpec(f"r{i}", capacity_msgs=5_000) for i in range(3)]
    with LocalReceivers(specs, mode=mode, duration_s=seconds + 40, extra=extra) as rx:
        rx.wait_ready()
        args = ["send", "--data", ",".join(rx.data), "--feedback", ",".join(rx.feedback),
                "--mode", mode, "--duration", str(seconds), "--size", str(size),
                "--wait-receivers", "3", "--json", "--allow-loss", *extra]
        tx = subprocess.Popen(nakflow_cmd(*args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        t_start = _sending_began(tx)
        t_fault, t_over = apply_fault(rx.procs[2], fault, t_start)
        out, err = tx.communicate(timeout=seconds + 120)
        if tx.returncode not in (0, 1):
            raise RuntimeError(f"nakflow sender failed ({tx.returncode}): {err[-800:]}")
        sender = json.loads(out.strip().splitlines()[-1])
        reports = []
        for i, p in enumerate(rx.procs):
            if fault == "kill" and i == 2:
                continue
            o, _err = p.communicate(timeout=seconds + 60)
            reports.append(json.loads(o.strip().splitlines()[-1]))

    def series(r: dict[str, Any]) -> tuple[list[float], list[float]]:
        return [r["started_at"] + t for t in r["timeline"]["t"]], r["timeline"]["delivered"]

    row = measure([series(r) for r in reports[:2]], t_fault, t_over)
    row["faulty_missing"] = (sender["sent"] - reports[2]["delivered"]) if fault == "stop" else None
    row["faulty_told"] = (  # of those, told beyond the history (not silent)
        reports[2]["beyond_history"] if fault == "stop" else None)
    row["faulty_report"] = None if fault != "stop" else {
        k: reports[2].get(k) for k in ("delivered", "lost", "dropped", "repaired",
                                       "dropped_unrepaired", "beyond_history", "repair",
                                       "senders")}
    row["sent"] = sender["sent"]
    row["cuts"] = sender.get("cuts")
    row["cut_by"] = ",".join(f"{k} {v}" for k, v in sorted(
        (sender.get("cuts_by_signal") or {}).items())) or "-"
    row["cut_events"] = [
        {**e, "t": round(e["t"] - (t_fault - t_start), 3)}  # from the fault
        for e in (sender.get("policy") or {}).get("cut_events", [])]
    return row


def _sending_began(tx: subprocess.Popen[str]) -> float:
    """``nakflow send`` says on stderr when its receivers are ready and sending begins."""
    assert tx.stderr is not None
    end = time.monotonic() + 60
    while time.monotonic() < end:
        line = tx.stderr.readline()
        if not line:
            raise RuntimeError("nakflow sender exited before it began sending")
        if "receivers ready" in line:
            return time.time()
    raise TimeoutError("the nakflow sender did not begin within 60 s")


# -- the run -------------------------------------------------------------------------
def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    classpath = None
    why_not: dict[str, str] = {}
    if "jgroups" in systems:
        why = jgroups_unavailable()
        if why is None and not in_private_netns():
            why = "IP multicast needs a private network namespace (run as root)"
        if why is None:
            work = tempfile.mkdtemp(prefix="nakflow-jg-")
            try:
                classpath = compile_member(work)
            except subprocess.CalledProcessError as exc:
                why = f"javac failed: {exc.stderr[-300:]}"
        if why:
            why_not["jgroups"] = why
    for fault in faults:
        for system in systems:
            base = {"fault": fault, "system": "JGroups udp" if system == "jgroups"
                    else f"nakflow {system}"}
            if system in why_not:
                rows.append({**base, "skipped": why_not[system]})
                continue
            log(f"{base['system']}: receiver 3 {'killed' if fault == 'kill' else 'stopped'} "
                f"at {FAULT_AT_S:.0f} s of {args.seconds:.0f} s ...")
            if system == "jgroups":
                assert classpath is not None
                res = run_jgroups(fault, args.seconds, args.size, classpath)
            else:
                res = run_nakflow(system, fault, args.seconds, args.size)
            rows.append({**base, **res})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fanout_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default="jgroups,nak,ack")
    p.add_argument("--faults", default="kill,stop")
    p.add_argument("--seconds", type=float, default=7.0, help="sending time per run")
    p.add_argument("--size", type=int, default=1000, help="payload bytes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if (not in_private_netns() and os.geteuid() == 0 and shutil.which("unshare")
            and "jgroups" in args.systems):
        env = dict(os.environ, NAKFLOW_PRIVATE_NETNS="1")
        cmd = [sys.executable, "-m", "benchmarks.fanout_faults", *(argv or sys.argv[1:])]
        return subprocess.run(["unshare", "-n", "sh", "-c",
                               f"{NETNS_SETUP} && exec \"$@\"", "sh", *cmd],
                              env=env, cwd=os.path.dirname(HERE)).returncode
    rows = run_all(args)
    if args.json:
        print(json.dumps({"rows": rows}))
    else:  # the cut events (who cut, on which signal, when) only in --json
        print(format_table([{k: v for k, v in r.items()
                             if k not in ("cut_events", "faulty_report")} for r in rows],
                           notes=NOTES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
