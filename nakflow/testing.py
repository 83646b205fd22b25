"""Run receivers and senders as separate local processes through the CLI.

Used by ``nakflow demo``, by the integration tests and by the evaluation job:
every process is a real ``nakflow receive`` / ``nakflow send`` on loopback.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .tables import format_table

#: free_port's ports lie from here up to the kernel's ephemeral range.
FREE_PORT_LO = 10_000
_picked = itertools.count()  # the ports this process has tried


def _ephemeral_low() -> int:
    """The first port the kernel hands out by itself (``ip_local_port_range``)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a receiver that binds
    later than its sender connects: a late joiner, a restart on the same port).

    Below the kernel's ephemeral range, where no socket gets a port without asking for
    that one: a port the kernel handed out (a bind to port 0) went, before the test's
    receiver process bound it, to another socket of the parallel tests (a CI run of
    2026-11-29: "address already in use" for a receiver's ports). Each process walks the
    range from a point its pid picks, so two processes seldom try the same port."""
    lo = _ephemeral_low()
    span = lo - FREE_PORT_LO
    if span >= 1_000:
        start = (os.getpid() * 7_919) % span
        for _ in range(span):
            port = FREE_PORT_LO + (start + next(_picked)) % span
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    with socket.socket() as s:  # no room below the ephemeral range: any free one
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ReceiverSpec:
    """One local receiver process."""

    #: Receiver id.
    name: str
    #: Consume no faster than this, msgs/s (None: as fast as it can).
    consume_rate_msgs: float | None = None
    #: Stall the consumer this many seconds after start, s.
    stall_at_s: float = 0.0
    #: ... for this long, s (0: no stall).
    stall_for_s: float = 0.0
    #: Queue bound, msgs.
    capacity_msgs: int = 5_000
    #: Deliver each (sender, seq) once across epochs.
    drop_duplicates: bool = False


class DeliveryLog:
    """Which seqs of each (sender, epoch) the application took, kept apart from the
    receiver's own accounting so that a check can compare the two (``nakflow receive
    --deliveries FILE``, used by the chaos run). A bitmap per stream; seqs past
    ``max_seq`` are only counted."""

    def __init__(self, max_seq: int = 1 << 26) -> None:
        self.max_seq = max_seq
        self._bits: dict[tuple[str, int], bytearray] = {}
        self._dups: dict[tuple[str, int], int] = {}
        self.out_of_range = 0

    def add(self, msgs: Sequence[Any]) -> None:
        for m in msgs:
            if not 0 <= m.seq < self.max_seq:
                self.out_of_range += 1
                continue
            key = (m.sender, m.epoch)
            bits = self._bits.get(key)
            if bits is None:
                bits = self._bits[key] = bytearray()
            byte, bit = divmod(m.seq, 8)
            if byte >= len(bits):
                bits.extend(bytes(byte + 1 - len(bits) + 4096))
            if bits[byte] >> bit & 1:
                self._dups[key] = self._dups.get(key, 0) + 1
            else:
                bits[byte] |= 1 << bit

    def report(self) -> dict[str, Any]:
        streams = [{"sender": s, "epoch": e, "distinct": sum(b.bit_count() for b in bits),
                    "duplicates": self._dups.get((s, e), 0), "holes": holes(bits)}
                   for (s, e), bits in sorted(self._bits.items())]
        return {"streams": streams, "out_of_range": self.out_of_range}


def holes(bits: bytearray, most: int = 8) -> list[list[int]]:
    """The first ``most`` runs of seqs ``[lo, hi)`` not taken below the highest taken (a
    check's violation says where the messages went missing)."""
    out: list[list[int]] = []
    top = len(bits.rstrip(b"\0"))
    lo = None
    for i in range(top):
        byte = bits[i]
        if byte == (0 if lo is not None else 0xFF):  # a whole byte of the same: skip it
            continue
        for bit in range(8):
            taken = byte >> bit & 1
            if not taken and lo is None:
                lo = 8 * i + bit
            elif taken and lo is not None:
                out.append([lo, 8 * i + bit])
                lo = None
                if len(out) == most:
                    return out
    return out


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGSTOP a child process and return once it is stopped. A signal to a process is
    taken by one of its threads when the scheduler next runs that thread, and until then
    its other threads go on: on two loaded cores a receiver whose SIGSTOP had been sent
    still read END and answered it 0.4-1.4 s later. ``waitid`` returns when the stop is
    complete (WNOWAIT: ``proc.wait`` is not robbed of anything); a process that exits
    meanwhile returns too."""
    proc.send_signal(signal.SIGSTOP)
    os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)


def nakflow_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nakflow", *args]


class LocalReceivers:
    """Start receiver processes on ``tcp://127.0.0.1:*`` and collect their JSON reports."""

    def __init__(self, specs: Sequence[ReceiverSpec], *, mode: str, senders: int = 1,
                 stream: str = "default", duration_s: float = 120.0,
                 host: str = "127.0.0.1", data_uri: str | None = None,
                 feedback_uri: str | None = None, extra: Sequence[str] = ()) -> None:
        self.specs = list(specs)
        self.mode = mode
        self._tmp = tempfile.TemporaryDirectory(prefix="nakflow-rx-")
        self.procs: list[subprocess.Popen[str]] = []
        self._ready_files: list[str] = []
        for spec in self.specs:
            ready = os.path.join(self._tmp.name, f"{spec.name}.json")
            args = ["receive", "--data", data_uri or f"tcp://{host}:*",
                    "--feedback", feedback_uri or f"tcp://{host}:*",
                    "--mode", mode, "--stream", stream, "--id", spec.name,
                    "--capacity", str(spec.capacity_msgs), "--senders", str(senders),
                    "--duration", str(duration_s), "--json", "--ready-file", ready,
                    "--allow-loss"]  # a measurement: the report says what was missing
            if spec.consume_rate_msgs:
                args += ["--consume-rate", str(spec.consume_rate_msgs)]
            if spec.stall_for_s:
                args += ["--stall-at", str(spec.stall_at_s), "--stall-for", str(spec.stall_for_s)]
            if spec.drop_duplicates:
                args.append("--drop-duplicates")
            args += extra
            self.procs.append(subprocess.Popen(nakflow_cmd(*args), stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True))
            self._ready_files.append(ready)
        self.data: list[str] = []
        self.feedback: list[str] = []
        #: each receiver's metrics URL (with ``--metrics-port`` in ``extra``; else None)
        self.metrics: list[str | None] = []

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until every receiver has bound its endpoints."""
        end = time.monotonic() + timeout_s
        for proc, path in zip(self.procs, self._ready_files, strict=True):
            while not os.path.exists(path):
                if proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise RuntimeError(f"receiver exited early: {err}")
                if time.monotonic() > end:
                    raise TimeoutError("receivers did not bind in time")
                time.sleep(0.02)
            with open(path) as f:
                info = json.load(f)
            self.metrics.append(info.get("metrics"))
            for mine, theirs in ((self.data, info["data"]), (self.feedback, info["feedback"])):
                mine.extend(u for u in theirs if u not in mine)

    def delivered(self, i: int) -> int:
        """Messages receiver ``i`` delivered so far, read from its metrics (it must have
        been started with ``--metrics-port``)."""
        import urllib.request

        url = self.metrics[i]
        if url is None:
            raise RuntimeError("the receivers were started without --metrics-port")
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith("nakflow_messages_delivered_total"))

    def results(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """Wait for every receiver to finish; return their JSON reports (with its
        ``exit_status``: 1 is a problem the report states, such as a peer of another mode
        or key, which ``--allow-loss`` does not excuse)."""
        out = []
        for proc in self.procs:
            stdout, stderr = proc.communicate(timeout=timeout_s)
            if proc.returncode not in (0, 1) or not stdout.strip():
                raise RuntimeError(f"receiver failed ({proc.returncode}): {stderr[-2000:]}")
            report = json.loads(stdout.strip().splitlines()[-1])
            report["exit_status"] = proc.returncode
            out.append(report)
        return out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self._tmp.cleanup()

    def __enter__(self) -> LocalReceivers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_sender(data: Sequence[str], feedback: Sequence[str], *, mode: str, count: int,
               size: int = 100, wait_receivers: int = 0, extra: Sequence[str] = (),
               timeout_s: float = 300.0) -> dict[str, Any]:
    """Run ``nakflow send`` as a process; return its JSON report."""
    args = ["send", "--data", ",".join(data), "--feedback", ",".join(feedback), "--mode", mode,
            "--count", str(count), "--size", str(size), "--json", "--allow-loss",
            "--wait-receivers", str(wait_receivers), *extra]
    proc = subprocess.run(nakflow_cmd(*args), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: the report says why
        raise RuntimeError(f"sender failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["exit_status"] = proc.returncode
    return report


def run_mode(mode: str, specs: Sequence[ReceiverSpec], *, count: int, size: int = 100,
             extra_send: Sequence[str] = (), extra_receive: Sequence[str] = (),
             data_uri: str | None = None, feedback_uri: str | None = None) -> dict[str, Any]:
    """One sender process to ``specs`` receiver processes under ``mode``.

    Default endpoints: each receiver binds ``tcp://127.0.0.1:*``. Give ``data_uri`` and
    ``feedback_uri`` (e.g. two epgm groups) to put every process on the same ones.
    """
    slowest = min((s.consume_rate_msgs for s in specs if s.consume_rate_msgs), default=None)
    budget = 60.0 + (3.0 * count / slowest if slowest else 0.0)
    with LocalReceivers(specs, mode=mode, duration_s=budget, data_uri=data_uri,
                        feedback_uri=feedback_uri, extra=extra_receive) as rx:
        rx.wait_ready()
        data = [data_uri] if data_uri else rx.data  # a group is joined, not bound
        feedback = [feedback_uri] if feedback_uri else rx.feedback
        sender = run_sender(data, feedback, mode=mode, count=count, size=size,
                            wait_receivers=len(specs), extra=extra_send, timeout_s=budget)
        receivers = rx.results(timeout_s=budget + 30)
    return {"mode": mode, "sender": sender, "receivers": receivers}


#: How long a receiver's start is, for :func:`feedback_phases`: from its first message,
#: s. Today's slow start needs about 1.2 s to full speed on loopback (issue 35).
STARTUP_S = 1.0


def feedback_phases(report: dict[str, Any], startup_s: float = STARTUP_S) -> dict[str, int]:
    """The feedback frames a receiver sent during its start (its first ``startup_s``
    seconds of data) and after, from its report (``Receiver.snapshot()`` or ``nakflow
    receive --json``): ``fb_start`` / ``fb_after`` every frame (HELLO, NAK or CREDIT,
    repair requests, RECEIPT, BYE), ``flow_start`` / ``flow_after`` the NAKs (nak) or
    CREDITs (ack) alone. A healthy receiver of a NAK stream is silent after its start:
    ``flow_after`` 0. The split is at the timeline's sample at or before the boundary
    (one every ``timeline_interval_s``); before the first message counts as start."""
    tl = report["timeline"]
    t, received = tl["t"], tl["received"]
    first = next((x for x, n in zip(t, received, strict=True) if n), None)
    at = 0
    if first is not None:
        at = max((i for i, x in enumerate(t) if x <= first + startup_s), default=0)
    fb, flow = report["feedback_frames"], report["flow_frames"]
    fb_start = tl["feedback"][at] if t and first is not None else fb
    flow_start = tl["flow_frames"][at] if t and first is not None else flow
    return {"fb_start": fb_start, "fb_after": fb - fb_start,
            "flow_start": flow_start, "flow_after": flow - flow_start}


#: How a start ends on a signal of the path (``policy.startup``).
START_SIGNALS = frozenset(("delay", "full", "nak", "stall"))


def first_signal(sender: dict[str, Any]) -> dict[str, float | int | None]:
    """How long a NAK sender ran before its first signal, and what it sent by then, from
    its report (``Sender.snapshot()`` or ``nakflow send --json``): ``signal_s`` from its
    first DATA frame to the end of its start on a signal of the path (a delay rise, a full
    pipe, a NAK, a stall: ``policy.startup``) or else its first cut, ``sent_before`` the
    messages sent by then (the start's own count, or interpolated between timeline
    samples). None where neither came (or it sent nothing): a start's overshoot is what
    went out before the first signal came back. ``rise_s`` and ``sent_at_rise``: the same
    at the start's first delay rise (its growth slows from then; the start ends on it
    only if the rise lasts), None without one; ``in_flight_at_rise``: of those, what the
    slowest receiver had not confirmed by then (on the path or in its queue)."""
    policy = sender.get("policy") or {}
    cuts = policy.get("cut_events") or []
    start = policy.get("start") or {}
    tl = sender.get("timeline") or {}
    t, sent = tl.get("t") or [], tl.get("sent") or []
    first = sender.get("first_data_s")
    if first is None:
        return {"signal_s": None, "sent_before": None, "rise_s": None, "sent_at_rise": None,
                "in_flight_at_rise": None}
    rise: dict[str, float | int | None] = {"rise_s": None, "sent_at_rise": None,
                                           "in_flight_at_rise": None}
    if start.get("rise_s") is not None:
        rise = {"rise_s": round(start["rise_s"] - first, 3),
                "sent_at_rise": start.get("sent_at_rise"),
                "in_flight_at_rise": start.get("in_flight_at_rise")}
    if start.get("ended") in START_SIGNALS and start.get("sent") is not None and (
            not cuts or start["ended_s"] <= cuts[0]["t"]):
        return {"signal_s": round(start["ended_s"] - first, 3), "sent_before": start["sent"],
                **rise}
    if not cuts:
        return {"signal_s": None, "sent_before": None, **rise}
    at = cuts[0]["t"]
    before = sent[-1] if sent else 0
    for i in range(1, len(t)):
        if t[i] >= at:  # between samples i-1 and i
            span = t[i] - t[i - 1]
            frac = (at - t[i - 1]) / span if span > 0 else 1.0
            before = sent[i - 1] + frac * (sent[i] - sent[i - 1])
            break
    return {"signal_s": round(at - first, 3), "sent_before": round(before), **rise}


def summarize(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows (one per receiver) from a run_mode result."""
    s = run["sender"]
    fb_per_s = s["feedback_frames"] / s["elapsed_s"] if s["elapsed_s"] else 0.0
    rows = []
    for r in run["receivers"]:
        rows.append({
            "mode": run["mode"], "receiver": r["receiver_id"],
            "send_rate": round(s["rate_msgs"]), "blocked_s": round(s["blocked_s"], 2),
            "goodput": round(r["goodput_msgs"]),  # delivered / (first DATA .. last delivery)
            "delivered": r["delivered"], "dropped": r["dropped"], "lost": r["lost"],
            "dups": r["duplicates"], "queue_peak": r["queue_peak"],
            "naks": sum(r["naks_sent"].values()), "credits": r["credits_sent"],
            "fb_per_s_at_sender": round(fb_per_s, 1),
            "p50_ms": r["latency_ms"]["p50"], "p99_ms": r["latency_ms"]["p99"],
        })
    return rows


#: What the demo's columns mean in its setting.
DEMO_NOTES = {"receiver": "slow consumes at --slow-rate; fast-1 and fast-2 as fast as they "
                          "can; all share one sender"}


def run_local_comparison(modes: Sequence[str], *, count: int = 100_000,
                         slow_rate: float = 20_000.0, capacity: int = 5_000,
                         progress: bool = True) -> dict[str, Any]:
    """Three receivers (one slow), one sender, once per mode; prints a table."""
    specs = [ReceiverSpec("slow", consume_rate_msgs=slow_rate, capacity_msgs=capacity),
             ReceiverSpec("fast-1", capacity_msgs=capacity),
             ReceiverSpec("fast-2", capacity_msgs=capacity)]
    runs, rows = [], []
    for mode in modes:
        t0 = time.monotonic()
        run = run_mode(mode, specs, count=count)
        runs.append(run)
        rows += summarize(run)
        if progress:
            print(f"[demo] mode {mode}: done in {time.monotonic() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    if progress:
        print(format_table(rows, notes=DEMO_NOTES))
    return {"runs": runs, "table": rows}
