"""A 1 -> N fan-out with a receiver killed, stopped or hung mid-run: how long the others
stall, and what every receiver ended with, for a real JGroups group and for nakflow's modes,
in one run.

    sudo .venv/bin/python -m benchmarks.fanout_faults [--systems jgroups,nak,ack]
        [--faults kill,stop,hang] [--receivers 3] [--seconds 7] [--fault-at 2]
        [--size 1000] [--json]

Every system moves SIZE-byte messages from one sending process to RECEIVERS receiving
processes as fast as it can (no rate cap) for SECONDS. At FAULT_AT seconds the last
receiver is killed (SIGKILL), stopped (SIGSTOP, SIGCONT --stop-for later) or hung (SIGSTOP
until the sender has finished, then SIGKILL). The others sample their delivered count every
50 ms; from that:

* ``before``: their mean rate in the second before the fault (msgs/s);
* ``stalled_s``: 100 ms windows after the fault in which they took < 10 % of ``before``;
* ``below_0.9_s`` and ``worst_window``: windows below 0.9x ``before``, and the lowest window
  as a fraction of it, from 50 ms after the fault to 2 s after it ended (the target for
  nak: every window >= 0.9x);
* per receiver (a second table; nakflow only): what it delivered and what it lacks, by
  reason (``lost``, ``dropped_unrepaired``, ``beyond_history``, ``missed_before_join``),
  and what the sender learnt of it at close (``at_close``).

The exit status is 1 if a surviving receiver, or the one that was stopped and resumed,
lacks any message (a killed or hung receiver is expected to); 0 otherwise.

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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from nakflow.tables import format_table  # noqa: E402
from nakflow.testing import (  # noqa: E402
    LocalReceivers,
    ReceiverSpec,
    feedback_phases,
    nakflow_cmd,
)

FAULT_AT_S, STOP_S = 2.0, 3.0
FAULTS = ("kill", "stop", "hang")
WINDOW_S = 0.1
JGROUPS_JARS = ("/usr/share/java/jgroups.jar",)
NETNS_SETUP = "ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo"
NOTES = {"system": "what moved the messages: a JGroups 2.12 group (its udp.xml), or "
                  "nakflow's CLI in a mode",
         "fault": "what befell the last receiver: kill (SIGKILL), stop (SIGSTOP, SIGCONT "
                  "after --stop-for) or hang (SIGSTOP until the sender finished)",
         "before": "the others' mean rate in the second before the fault, msgs/s",
         "cut_by": "the sender's rate cuts by what caused them (the NAK's signal)",
         "faulty_told": "of those, how many the stopped receiver was told are beyond the "
                       "sender's history (GONE: counted and reported, not silent)",
         "stalled_s": "seconds (100 ms windows) the others took < 10 % of their rate "
                      "before the fault",
         "receiver": "r0 to rN-1 (--receivers N); the last one is the faulty one",
         "below_0.9_s": "seconds their rate was below 0.9x, from 50 ms after the fault to "
                        "2 s after it ended",
         "worst_window": "their slowest 100 ms window in that span, as a fraction of before",
         "faulty_missing": "messages the stopped receiver lacked at the end",
         "role": "survivor: never faulted; the faulty one: killed, stopped (and resumed) or "
                 "hung (stopped until the sender finished)",
         "lacks": "messages sent that this receiver did not deliver (a killed or hung one "
                  "is expected to lack some)",
         "at_close": "what the sender's close learnt of this receiver: complete, incomplete "
                     "(with why), gone (silent, disconnected, bye) or unconfirmed"}
#: Per-receiver accounting columns, from each receiver's report.
LOSS_KEYS = ("lost", "dropped_unrepaired", "beyond_history", "missed_before_join")


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
            t_over: float, t_end: float | None = None) -> dict[str, Any]:
    """The others' mean rate per window around a fault at ``t_fault`` that ended at
    ``t_over`` (wall clock), up to 2 s after it, but not past ``t_end``, when the sender
    stopped sending (the windows after the stream ended are no stall)."""
    ahead = [r for w, d in others for r in window_rates(w, d, t_fault - 1.0, t_fault)]
    before = sum(ahead) / len(ahead) if ahead else 0.0
    until = t_over + 2.0 if t_end is None else min(t_over + 2.0, t_end)
    spans = [window_rates(w, d, t_fault + 0.05, until) for w, d in others]
    n = min((len(s) for s in spans), default=0)
    mean = [sum(s[i] for s in spans) / len(spans) for i in range(n)]
    stalled = [window_rates(w, d, t_fault, until) for w, d in others]
    m2 = min((len(s) for s in stalled), default=0)
    mean2 = [sum(s[i] for s in stalled) / len(stalled) for i in range(m2)]
    return {"before": round(before),
            "stalled_s": round(sum(WINDOW_S for r in mean2 if r < 0.1 * before), 1),
            "below_0.9_s": round(sum(WINDOW_S for r in mean if r < 0.9 * before), 1),
            "worst_window": round(min(mean) / before, 2) if mean and before else None}


def apply_fault(proc: subprocess.Popen[Any], fault: str, t_start: float, *,
                fault_at_s: float = FAULT_AT_S, stop_s: float = STOP_S) -> tuple[float, float]:
    """Wait until ``fault_at_s`` after ``t_start`` (wall), then kill, stop (for ``stop_s``)
    or hang (stop, left to the caller to end) ``proc``; returns (wall time of the fault,
    wall time it ended: the fault itself for a kill or a hang)."""
    time.sleep(max(0.0, t_start + fault_at_s - time.time()))
    t_fault = time.time()
    if fault == "kill":
        proc.send_signal(signal.SIGKILL)
        return t_fault, t_fault
    proc.send_signal(signal.SIGSTOP)
    if fault == "hang":
        return t_fault, t_fault
    time.sleep(stop_s)
    proc.send_signal(signal.SIGCONT)
    return t_fault, time.time()


def end_hang(proc: subprocess.Popen[Any]) -> None:
    """A hung receiver is killed once the run is over (it never resumes)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()


# -- JGroups -------------------------------------------------------------------------
def compile_member(workdir: str) -> str:
    cp = ":".join(JGROUPS_JARS)
    subprocess.run(["javac", "-nowarn", "-d", workdir, "-cp", cp,
                    os.path.join(HERE, "jgroups", "Member.java")], check=True,
                   capture_output=True, text=True)
    return f"{cp}:{workdir}"


def run_jgroups(args: argparse.Namespace, fault: str, classpath: str) -> dict[str, Any]:
    seconds, n = args.seconds, args.receivers
    java = ["java", "-Djava.net.preferIPv4Stack=true", "-Djgroups.bind_addr=127.0.0.1",
            "-Xmx256m", "-cp", classpath, "Member"]
    cluster = f"nakflow-peer-{os.getpid()}-{fault}"
    rxs = [subprocess.Popen([*java, "recv", "udp.xml", cluster, str(seconds + 40)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(n)]
    try:
        for p in rxs:
            _await_line(p, "READY", 60)
        tx = subprocess.Popen([*java, "send", "udp.xml", cluster, str(n + 1), str(seconds),
                               str(args.size)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _await_line(tx, "READY", 90)
        t_fault, t_over = apply_fault(rxs[-1], fault, time.time(), fault_at_s=args.fault_at,
                                      stop_s=args.stop_for)
        out, err = tx.communicate(timeout=seconds + 120)
        if tx.returncode != 0:
            raise RuntimeError(f"JGroups sender failed: {err[-800:]}")
        sender = json.loads(out.strip().splitlines()[-1])
        if fault == "hang":
            end_hang(rxs[-1])
        reports = []
        for p in rxs[:n if fault == "stop" else n - 1]:
            out, err = p.communicate(timeout=seconds + 60)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in rxs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    if os.environ.get("FANOUT_DEBUG"):
        print(json.dumps({"sender": sender, "receivers": reports})[:3000], file=sys.stderr)
    row = measure([(r["timeline"]["wall"], r["timeline"]["delivered"])
                   for r in reports[:n - 1]], t_fault, t_over, sender["started_at"] + seconds)
    row["faulty_missing"] = (sender["sent"] - reports[-1]["delivered"]) if fault == "stop" else None
    row["sent"] = sender["sent"]
    row["receivers"] = [
        {"receiver": f"r{i}", "role": "survivor" if i < n - 1 else _faulty_role(fault),
         "delivered": r["delivered"], "lacks": sender["sent"] - r["delivered"]}
        for i, r in enumerate(reports)]
    return row


def _faulty_role(fault: str) -> str:
    return {"kill": "killed", "stop": "stopped", "hang": "hung"}[fault]


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


def run_nakflow(args: argparse.Namespace, system: str, fault: str) -> dict[str, Any]:
    mode, extra = NAKFLOW_SYSTEMS[system]
    seconds, n = args.seconds, args.receivers
    specs = [ReceiverSpec(f"r{i}", capacity_msgs=5_000) for i in range(n)]
    with LocalReceivers(specs, mode=mode, duration_s=seconds + 40, extra=extra) as rx:
        rx.wait_ready()
        argv = ["send", "--data", ",".join(rx.data), "--feedback", ",".join(rx.feedback),
                "--mode", mode, "--duration", str(seconds), "--size", str(args.size),
                "--wait-receivers", str(n), "--json", "--allow-loss", *extra,
                *shlex.split(args.sender_args)]
        tx = subprocess.Popen(nakflow_cmd(*argv), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        t_start = _sending_began(tx)
        t_fault, t_over = apply_fault(rx.procs[-1], fault, t_start, fault_at_s=args.fault_at,
                                      stop_s=args.stop_for)
        out, err = tx.communicate(timeout=seconds + 120)
        if tx.returncode not in (0, 1):
            raise RuntimeError(f"nakflow sender failed ({tx.returncode}): {err[-800:]}")
        sender = json.loads(out.strip().splitlines()[-1])
        if fault == "hang":
            end_hang(rx.procs[-1])
        reports = []
        for i, p in enumerate(rx.procs):
            if fault != "stop" and i == n - 1:
                continue
            o, _err = p.communicate(timeout=seconds + 60)
            reports.append(json.loads(o.strip().splitlines()[-1]))

    def series(r: dict[str, Any]) -> tuple[list[float], list[float]]:
        return [r["started_at"] + t for t in r["timeline"]["t"]], r["timeline"]["delivered"]

    if os.environ.get("FANOUT_DUMP"):  # every report, for tracing a run
        with open(os.environ["FANOUT_DUMP"], "w") as f:
            json.dump({"t_start": t_start, "t_fault": t_fault, "t_over": t_over,
                       "sender": sender, "receivers": reports}, f)
    row = measure([series(r) for r in reports[:n - 1]], t_fault, t_over,
                  t_start + seconds - 0.1)
    row["faulty_missing"] = (sender["sent"] - reports[-1]["delivered"]) if fault == "stop" else None
    row["faulty_told"] = (  # of those, told beyond the history (not silent)
        reports[-1]["beyond_history"] if fault == "stop" else None)
    row["sent"] = sender["sent"]
    row["cuts"] = sender.get("cuts")
    row["cut_by"] = ",".join(f"{k} {v}" for k, v in sorted(
        (sender.get("cuts_by_signal") or {}).items())) or "-"
    row["cut_events"] = [
        {**e, "t": round(e["t"] - (t_fault - t_start), 3)}  # from the fault
        for e in (sender.get("policy") or {}).get("cut_events", [])]
    at_close = {c["receiver"]: c for c in sender.get("at_close") or []}
    row["receivers"] = [_receiver_row(r, sender, at_close,
                                      "survivor" if i < n - 1 else _faulty_role(fault))
                        for i, r in enumerate(reports)]
    if fault != "stop":  # the killed or hung one has no report: what the sender knew
        faulty = next((c for rid, c in at_close.items()
                       if rid not in {r["receiver_id"] for r in reports}), None)
        row["receivers"].append({"receiver": f"r{n - 1}", "role": _faulty_role(fault),
                                 "at_close": _close_word(faulty)})
    return row


def _close_word(c: dict[str, Any] | None) -> str:
    """The sender's word on one receiver at close, short."""
    if c is None:
        return "-"
    why = c.get("why")
    return f"{c['status']} ({why})" if why else c["status"]


def _receiver_row(r: dict[str, Any], sender: dict[str, Any], at_close: dict[str, Any],
                  role: str) -> dict[str, Any]:
    return {"receiver": r["receiver_id"], "role": role, "delivered": r["delivered"],
            "lacks": sender["sent"] - r["delivered"],
            **{k: r[k] for k in LOSS_KEYS}, "repaired": r["repaired"],
            **feedback_phases(r),
            "at_close": _close_word(at_close.get(r["receiver_id"]))}


def losses(rows: list[dict[str, Any]]) -> list[str]:
    """What a receiver that should have everything (a survivor, the stopped one once
    resumed) lacks, one line each."""
    out = []
    for row in rows:
        for r in row.get("receivers") or []:
            if r["role"] in ("survivor", "stopped") and r.get("lacks"):
                why = ", ".join(f"{k} {r[k]:,}" for k in LOSS_KEYS if r.get(k))
                out.append(f"{row['system']} {row['fault']}: {r['receiver']} ({r['role']}) "
                           f"lacks {r['lacks']:,}{f' ({why})' if why else ''}")
    return out


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
            what = {"kill": "killed", "stop": f"stopped for {args.stop_for:g} s",
                    "hang": "hung"}[fault]
            log(f"{base['system']}: receiver {args.receivers} of {args.receivers} {what} at "
                f"{args.fault_at:g} s of {args.seconds:g} s ...")
            if system == "jgroups":
                assert classpath is not None
                res = run_jgroups(args, fault, classpath)
            else:
                res = run_nakflow(args, system, fault)
            rows.append({**base, **res})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fanout_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default="jgroups,nak,ack")
    p.add_argument("--faults", default="kill,stop", help=f"any of {','.join(FAULTS)}")
    p.add_argument("--receivers", type=int, default=3, help="receiving processes")
    p.add_argument("--seconds", type=float, default=7.0, help="sending time per run")
    p.add_argument("--fault-at", type=float, default=FAULT_AT_S,
                   help="seconds after sending began that the last receiver faults")
    p.add_argument("--stop-for", type=float, default=STOP_S, help="the stop's length, s")
    p.add_argument("--size", type=int, default=1000, help="payload bytes")
    p.add_argument("--sender-args", default="",
                   help="more options for the nakflow sender, e.g. '--history-msgs 20000' "
                        "(a history as short in time as a faster machine's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    bad = set(args.faults.split(",")) - set(FAULTS)
    if bad or args.receivers < 2 or args.fault_at >= args.seconds:
        p.error(f"faults are {','.join(FAULTS)}; at least 2 receivers; --fault-at before "
                "--seconds")
    if "stop" in args.faults and args.fault_at + args.stop_for + 2.0 > args.seconds:
        log(f"note: sending ends {args.seconds - args.fault_at - args.stop_for:g} s after "
            "the stop (the others' windows are measured up to 2 s after it, not past the "
            "end of the stream)")
    if (not in_private_netns() and os.geteuid() == 0 and shutil.which("unshare")
            and "jgroups" in args.systems):
        env = dict(os.environ, NAKFLOW_PRIVATE_NETNS="1")
        cmd = [sys.executable, "-m", "benchmarks.fanout_faults", *(argv or sys.argv[1:])]
        return subprocess.run(["unshare", "-n", "sh", "-c",
                               f"{NETNS_SETUP} && exec \"$@\"", "sh", *cmd],
                              env=env, cwd=os.path.dirname(HERE)).returncode
    rows = run_all(args)
    lacking = losses(rows)
    if args.json:
        print(json.dumps({"rows": rows, "losses": lacking}))
    else:  # the cut events (who cut, on which signal, when) only in --json
        print(format_table([{k: v for k, v in r.items()
                             if k not in ("cut_events", "receivers")} for r in rows],
                           notes=NOTES))
        per_rx = [{"system": r["system"], "fault": r["fault"], **x}
                  for r in rows for x in r.get("receivers") or []]
        if per_rx:
            print()
            keys = ("system", "fault", "receiver", "role", "lacks", "at_close")
            print(format_table(per_rx, notes={k: NOTES[k] for k in keys}))
    for line in lacking:
        log(f"LOSS: {line}")
    return 1 if lacking else 0


if __name__ == "__main__":
    sys.exit(main())
