"""The live middleware with real processes on loopback: the issue's scenarios 1, 2 and 4."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from nakflow import AckConfig
from nakflow.live.receiver import Receiver
from nakflow.live.sender import Sender
from nakflow.policy.progress import REPORT_S
from nakflow.testing import LocalReceivers, ReceiverSpec, feedback_phases, run_mode, run_sender
from tests.flood import send_under_flood
from tests.why import why_dropped

pytestmark = [pytest.mark.slow, pytest.mark.quiet]
SLOW_RATE = 10_000.0
COUNT = 40_000


@pytest.fixture(scope="module")
def slow_receiver_runs() -> dict[str, dict]:
    """Scenario 1: one sender, three receivers, one consuming at a fixed slow rate."""
    specs = [ReceiverSpec("slow", consume_rate_msgs=SLOW_RATE, capacity_msgs=2_000),
             ReceiverSpec("fast-1", capacity_msgs=2_000),
             ReceiverSpec("fast-2", capacity_msgs=2_000)]
    return {mode: run_mode(mode, specs, count=COUNT) for mode in ("nak", "ack", "none")}


def by_id(run: dict) -> dict[str, dict]:
    return {r["receiver_id"]: r for r in run["receivers"]}


def test_nak_slow_receiver_zero_loss_zero_drops_goodput_near_its_rate(slow_receiver_runs):
    """NAK mode: the sender settles at the slow receiver's rate. Nothing is lost or dropped
    anywhere, with a queue of only 200 ms at the slow receiver (2,000 msgs at 10k msgs/s).
    Measured: 0 drops in 3 of 3 runs, sender at 9.83-9.85k msgs/s (slow start included)."""
    run = slow_receiver_runs["nak"]
    for r in run["receivers"]:
        assert (r["dropped"], r["lost"], r["delivered"]) == (0, 0, COUNT), why_dropped(run, r)
    slow = by_id(run)["slow"]
    assert run["sender"]["rate_msgs"] >= 0.75 * SLOW_RATE  # generous: 2 noisy cores
    assert slow["queue_peak"] < 2_000
    assert run["sender"]["cuts"] > 0 and sum(slow["naks_sent"].values()) > 0


def test_feedback_is_split_into_the_start_and_after_and_adds_up(slow_receiver_runs):
    """Each receiver's feedback frames, split at its first second of data: every frame
    counted once; the flow frames are its NAKs and PROGRESS (nak) or CREDITs (ack); the
    slow receiver of the 4 s nak run kept NAKing after its start (its rate is the
    limit), every receiver's PROGRESS came within the sender's start, and none sends no
    flow frames."""
    for mode, run in slow_receiver_runs.items():
        for r in run["receivers"]:
            phases = feedback_phases(r)
            assert phases["fb_start"] + phases["fb_after"] == r["feedback_frames"]
            flow = {"nak": sum(r["naks_sent"].values()) + r["progress_sent"],
                    "ack": r["credits_sent"], "none": 0}[mode]
            assert phases["flow_start"] + phases["flow_after"] == r["flow_frames"] == flow
            assert 0 <= phases["flow_start"] <= phases["fb_start"]
    nak = by_id(slow_receiver_runs["nak"])
    assert feedback_phases(nak["slow"])["flow_after"] > 0
    start = slow_receiver_runs["nak"]["sender"]["policy"]["start"]
    for r in nak.values():  # PROGRESS during the sender's start only: one a ms at most
        assert 0 < r["progress_sent"] <= start["ended_s"] / REPORT_S + 10, (r, start)


def test_ack_slow_receiver_no_loss(slow_receiver_runs):
    run = slow_receiver_runs["ack"]
    for r in run["receivers"]:
        assert (r["dropped"], r["lost"], r["delivered"]) == (0, 0, COUNT), r["receiver_id"]
        assert r["credits_sent"] > 0


def test_none_slow_receiver_drops_and_counts_them(slow_receiver_runs):
    slow = by_id(slow_receiver_runs["none"])["slow"]
    assert slow["dropped"] > 0
    assert slow["delivered"] + slow["dropped"] + slow["lost"] == COUNT  # nothing silent


def _send_during_stall(mode: str, ack: AckConfig | None = None) -> dict[str, float]:
    """Scenario 2: four receiver processes, one SIGSTOPped for 3 s mid-stream."""
    specs = [ReceiverSpec(f"r{i}", capacity_msgs=5_000) for i in range(4)]
    with LocalReceivers(specs, mode=mode, duration_s=60) as rx:
        rx.wait_ready()
        victim = rx.procs[0]
        sent_at: list[tuple[float, int]] = []
        with Sender(rx.data, rx.feedback, mode=mode, ack=ack, max_rate_msgs=20_000) as tx:
            tx.wait_for_receivers(4, timeout=15)
            t0 = time.monotonic()
            phases = {"stop": t0 + 1.0, "cont": t0 + 4.0, "end": t0 + 6.0}
            stopped = resumed = False
            while (now := time.monotonic()) < phases["end"]:
                if not stopped and now >= phases["stop"]:
                    os.kill(victim.pid, signal.SIGSTOP)
                    stopped = True
                if not resumed and now >= phases["cont"]:
                    os.kill(victim.pid, signal.SIGCONT)
                    resumed = True
                if tx.try_send(b"x" * 100):
                    sent_at.append((now, tx.seq))
                else:
                    time.sleep(0.0002)
            tx.flush()
            snap = tx.snapshot()
        reports = rx.results(timeout_s=60)

    def rate(a: float, b: float) -> float:
        n = sum(1 for t, _ in sent_at if t0 + a <= t < t0 + b)
        return n / (b - a)

    return {"before": rate(0.2, 1.0), "stall_early": rate(1.2, 2.2),
            "stall_late": rate(3.0, 4.0), "after": rate(4.5, 6.0),
            # who slowed the sender, if anyone (a failure message says)
            "naks": snap["naks_received"], "cut_events": [
                {**e, "t": round(e["t"] - t0 + tx.core._t0, 3)}
                for e in snap["policy"].get("cut_events", [])],
            "rate_limit": [
                (round(t - t0 + tx.core._t0, 2), r if r is None else round(r)) for t, r in zip(
                    snap["timeline"]["t"], snap["timeline"]["rate_limit"], strict=True)][::10],
            "receivers": {r["receiver_id"]: (r["naks_sent"], r["delay_windows"],
                                             r["loss_windows"], r["queue_peak"])
                          for r in reports}}


def test_stalled_receiver_nak_keeps_sending_to_the_others():
    r = _send_during_stall("nak")
    why = json.dumps(r)  # a str: pytest prints it whole (a dict's repr it cuts short)
    assert r["before"] > 2_000, why
    assert r["stall_early"] > 0.5 * r["before"] and r["stall_late"] > 0.5 * r["before"], why


def test_stalled_receiver_ack_stalls_until_timeout_then_recovers():
    r = _send_during_stall("ack", AckConfig(receiver_timeout_s=1.5))
    assert r["before"] > 2_000
    assert r["stall_early"] < 0.2 * r["before"]  # the stopped receiver's credit governs
    assert r["stall_late"] > 0.5 * r["before"]  # evicted after 1.5 s: the others flow again


def test_garbage_on_both_channels_is_counted_and_real_traffic_flows():
    """Scenario 4: random bytes on both channels while real data flows."""
    rng = random.Random(7)
    run = send_under_flood(lambda: rng.randbytes(rng.randrange(0, 64)),
                           lambda: rng.randbytes(rng.randrange(0, 64)), max_junk=200_000)
    snap, tx_snap = run.rx_snap, run.tx_snap
    assert snap["error"] is None
    assert snap["malformed"] > 100 and tx_snap["feedback_malformed"] > 100
    assert snap["delivered"] + snap["dropped"] == 10_000 and snap["lost"] == 0
    assert sum(1 for m in run.delivered if m.payload.startswith(b"real-")) == snap["delivered"]


def test_demo_runs_from_the_console_script():
    proc = subprocess.run([sys.executable, "-m", "nakflow", "demo", "--count", "5000",
                           "--modes", "nak", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json
    table = json.loads(proc.stdout)["table"]
    assert {row["receiver"] for row in table} == {"slow", "fast-1", "fast-2"}
    assert all(row["delivered"] == 5000 and row["dropped"] == 0 for row in table)
    assert all(row["p50_ms"] is not None and row["p50_ms"] <= row["p99_ms"] for row in table)


def test_a_sender_remembering_its_path_starts_where_the_last_one_ended():
    """Senders one after another on the same path (as a Spark job's tasks in one Python
    worker): with remember_rate the second starts from the first's validated rate; without
    it, or on another stream, from slow start's initial rate."""
    from nakflow.policy.rate_memory import RATE_MEMORY

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="nak",
                  capacity_msgs=50_000, stream="mem") as rx:
        def run(remember: bool, stream: str = "mem") -> Sender:
            tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode="nak", stream=stream,
                        remember_rate=remember)
            tx.wait_for_receivers(1)
            for _ in range(30_000):
                tx.send(b"m" * 50)
            tx.close()
            while rx.get_many(100_000, timeout=0.5):  # empty the queue for the next run
                pass
            return tx

        first = run(True)
        key = ("mem", tuple(sorted(rx.data_endpoints)))
        left = RATE_MEMORY.recall(key, now=time.monotonic())
        peak = first.core.policy.controller._meter.peak  # what it really sent at, at most
        assert first.start_rate_msgs is None and left is not None and peak is not None
        assert left <= peak  # a validated rate, not a limit it never used
        second = run(True)
        assert second.start_rate_msgs == left
        assert second.core.policy.controller.config.initial_rate_msgs == left
        assert run(False).start_rate_msgs is None




def test_a_sender_to_receivers_on_loopback_starts_with_what_their_queues_said_they_take():
    """A real sender to a real receiver on loopback: its path stays on this host, so its
    start's first window is half the room the receiver's HELLO answer said (2,000 of a
    10,000-message queue), where 16 KB would be 16 messages of 1 KB; said to lead
    elsewhere (``host_local=False``, a tunnel on loopback), 16. Nothing is lost either
    way."""
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="nak",
                  capacity_msgs=10_000, stream="here") as rx:
        def start(**kw: object) -> dict:
            tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode="nak", stream="here",
                        **kw)
            tx.wait_for_receivers(1)
            for _ in range(3_000):
                tx.send(b"m" * 1_000)
            tx.close()
            got = 0
            while batch := rx.get_many(100_000, timeout=0.5):
                got += len(batch)
            assert got == 3_000 and tx.snapshot()["at_close_counts"]["complete"] == 1
            return tx.snapshot()["policy"]["start"]

        here, elsewhere = start(), start(host_local=False)
        # the command line says it too (a sender process, its report)
        told = run_sender(rx.data_endpoints, rx.feedback_endpoints, mode="nak", count=3_000,
                          size=1_000, wait_receivers=1,
                          extra=["--stream", "here", "--host-local", "no"])
    assert (here["first_window"], here["host_local"]) == (10_000 * 4 // 10 // 2, True), here
    assert (elsewhere["first_window"], elsewhere["host_local"]) == (16, False), elsewhere
    assert told["policy"]["start"]["first_window"] == 16 and told["exit_status"] == 0, told


def test_nak_never_cuts_for_receivers_faster_than_the_sender():
    """Issue 24's healthy group, live: three receiver processes on this machine's two
    cores, each able to take far more than the sender's 30,000 msgs/s cap. No receiver
    sends a NAK and the sender never cuts: a moment a receiver's process is descheduled
    (its backlog read late, its frames' delay) is not congestion. The limit reaches its
    cap and nothing is lost. (Measured: queue peaks 83-160 of 2,000 alone, 261-378 beside
    two CPU hogs.)"""
    cap, count = 30_000, 90_000
    specs = [ReceiverSpec(f"fast-{i}", capacity_msgs=2_000) for i in range(3)]
    run = run_mode("nak", specs, count=count, extra_send=["--max-rate", str(cap)])
    s = run["sender"]
    print({"cuts": s["cuts"], "cut_events": s["policy"]["cut_events"],
           "rate_limit": s["rate_limit"], "rate_msgs": s["rate_msgs"],
           "rx": {r["receiver_id"]: (r["naks_sent"], r["queue_peak"]) for r in run["receivers"]}})
    for r in run["receivers"]:
        assert (r["delivered"], r["dropped"], r["lost"]) == (count, 0, 0), r["receiver_id"]
        assert r["naks_sent"] == {}, (r["receiver_id"], r["naks_by_signal"])
    assert s["cuts"] == 0 and s["naks_received"] == {}, s["policy"]["cut_events"]
    assert s["rate_limit"] == pytest.approx(cap)


def test_nak_never_cuts_for_receivers_faster_than_the_sender_even_when_held_up():
    """Issue 24's healthy group, live: three receiver processes on this machine's two
    cores, each able to take far more than the sender's 30,000 msgs/s cap. One of them is
    held up (SIGSTOP) for 150 ms every half second, as a busy host deschedules a process:
    each time it comes back to a socket backlog of ~4,500 messages against a queue of
    2,000, which it then drains faster than data arrives. That is not congestion: no cut,
    and the sender's limit reaches its cap. Nothing is lost. Measured: its queue peaked
    at 1,206-1,511 alone; beside two CPU hogs it overflowed (644-3,778 dropped, all
    repaired), the judge kept 0-4 NAKs back, and no run of 8 cut. (Before a consumer that
    emptied its queue counted as away, not slow, it cut in 1 run of 4 there.) Later, beside
    ``make stress BURN=1``'s burner, 3 runs of 8 cut once: one NAK(50), twice from the held
    receiver (its queue, its delay), once from a fast one's queue (not stopped, but short
    of CPU, it was slower than what arrived); the limit was back at its cap, nothing lost.
    Without a burner it has not cut in CI; the test stands for a host with CPU to spare."""
    cap, count, stop_s, every_s = 30_000, 90_000, 0.15, 0.5
    specs = [ReceiverSpec("held", capacity_msgs=2_000),
             *(ReceiverSpec(f"fast-{i}", capacity_msgs=2_000) for i in range(2))]
    with LocalReceivers(specs, mode="nak", duration_s=120.0) as rx:
        rx.wait_ready()
        held, done, stops = rx.procs[0], threading.Event(), [0]

        def hold_up() -> None:
            while not done.wait(every_s - stop_s) and stops[0] < 40:  # bounded: 20 s
                held.send_signal(signal.SIGSTOP)
                time.sleep(stop_s)
                held.send_signal(signal.SIGCONT)
                stops[0] += 1

        stopper = threading.Thread(target=hold_up, daemon=True)
        try:
            stopper.start()
            sender = run_sender(rx.data, rx.feedback, mode="nak", count=count,
                                wait_receivers=len(specs), timeout_s=120,
                                extra=["--max-rate", str(cap)])
        finally:
            done.set()
            stopper.join()
            held.send_signal(signal.SIGCONT)
        receivers = rx.results(timeout_s=120)
    print({"stops": stops[0], "cuts": sender["cuts"], "cut_events":
           sender["policy"]["cut_events"], "rate_limit": sender["rate_limit"],
           "rate_msgs": sender["rate_msgs"],
           "rx": {r["receiver_id"]: (r["naks_sent"], r["naks_not_news"], r["queue_peak"],
                                     r["dropped"], r["repaired"]) for r in receivers}})
    assert stops[0] >= 3  # it was held up while the stream flowed
    for r in receivers:
        assert (r["delivered"], r["lost"]) == (count, 0), r["receiver_id"]
    assert sender["cuts"] == 0, sender["policy"]["cut_events"]
    assert sender["rate_limit"] == pytest.approx(cap)


UNCLOSED = """
import sys
from nakflow import Sender
tx = Sender(sys.argv[1], sys.argv[2], linger_s=10.0)  # the last frame waits for company
tx.wait_for_receivers(timeout=30)
for i in range(500):
    tx.send(b"m%d" % i)
"""


def test_a_sender_the_program_did_not_close_leaves_at_exit_with_what_it_admitted():
    """A script that sends and exits without ``close()``: at exit the sender sends what
    it admitted, then BYE (no END: nothing says the stream is whole), and warns. Before,
    the frame it still held was lost in silence (500 sent, 373 arrived) and the receiver
    took 10 s of silence to learn that the sender was gone."""
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as rx:
        run = subprocess.run([sys.executable, "-c", UNCLOSED, rx.data_endpoints[0],
                              rx.feedback_endpoints[0]], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        assert "was not closed when the program exited: it left without END" in run.stderr
        got = [m.payload for m in rx.messages(senders=1, timeout=30)]
        (stream,) = rx.snapshot()["senders"]
    assert got == [b"m%d" % i for i in range(500)]
    assert stream["left"] and stream["final_seq"] is None and stream["missing"] == 0


STUCK = """
import threading, time
from nakflow import Sender
tx = Sender("tcp://127.0.0.1:9", "tcp://127.0.0.1:11", mode="ack")  # nobody grants credit
threading.Thread(target=lambda: tx.send(b"never"), daemon=True).start()
while tx.core.admission.blocked_since is None:  # the send waits for credit, in the lock
    time.sleep(0.01)
"""


def test_an_unclosed_sender_whose_send_waits_in_a_thread_does_not_hold_the_exit():
    """The exit's abort needs the sender's lock, which a send waiting for credit in a
    daemon thread holds: it waits 1 s for it, then leaves the sender as it is, says so,
    and the program exits."""
    run = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "and a send still waits in it: left as it is" in run.stderr


FORKED = """
import os, signal, sys
from nakflow import Receiver, Sender
tx = Sender(sys.argv[1], sys.argv[2])
tx.wait_for_receivers(timeout=30)
tx.send(b"parent-0")
rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
pid = os.fork()
if pid == 0:  # the child: every use but close is refused, at once
    signal.alarm(20)  # a child that hangs (the old code) ends itself: no orphan spins on
    for use in (lambda: tx.send(b"child"), lambda: rx.get(timeout=30)):
        try:
            use()
        except Exception as exc:
            print(type(exc).__name__, exc, flush=True)
    tx.close()
    rx.close()
    os._exit(0)
os.waitpid(pid, 0)
tx.send(b"parent-1")
tx.close()
rx.close()
"""


def test_a_sender_used_in_a_forked_child_says_so_and_the_parents_stream_is_whole():
    """``fork`` after a Sender was made (multiprocessing's default start method, a sender
    made at module level): in the child its sockets and threads are gone. Before, the
    child's send waited for ever, and a receiver's get too; now each raises
    LocalProtocolError saying why, the child's close does nothing, and the parent's
    stream is whole."""
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as rx:
        run = subprocess.run([sys.executable, "-c", FORKED, rx.data_endpoints[0],
                              rx.feedback_endpoints[0]], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert [ln.split(" ", 2)[:2] for ln in lines] == [
            ["LocalProtocolError", "Sender"], ["LocalProtocolError", "Receiver"]], lines
        assert all("and this process is a fork of it" in ln for ln in lines)
        got = [m.payload for m in rx.messages(senders=1, timeout=30)]
        (stream,) = rx.snapshot()["senders"]
    assert got == [b"parent-0", b"parent-1"] and stream["status"] == "complete"


def test_a_receiver_with_a_handler_refuses_other_takers_and_the_handler_gets_all():
    """``Receiver(handler=f)`` and ``messages()`` on one receiver: each took some of the
    messages, and ``messages()`` returned 0 of 100 in silence (the handler had them)."""
    from nakflow import LocalProtocolError

    got: list[int] = []
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", handler=lambda m: got.append(
            m.seq)) as rx:
        with Sender(rx.data_endpoints, rx.feedback_endpoints) as tx:
            tx.wait_for_receivers(timeout=10)
            tx.send_batch([b"x"] * 100)
        for take in (lambda: list(rx.messages(senders=1, timeout=10)),
                     lambda: rx.get(timeout=1), lambda: next(iter(rx))):
            with pytest.raises(LocalProtocolError, match="hands every message to its handler"):
                take()
        assert rx.wait_for_ends(1, 30) and rx.wait_drained(30)
    assert got == list(range(100))


def test_messages_waits_for_more_senders_still_sending_than_it_was_told():
    """``messages(senders=1)`` while two senders send (a Spark job with more partitions
    than the receiver was told): the first ends while the second pauses mid-stream.
    Before, the loop ended there, and the second's rest never reached the application
    (``nakflow receive --senders N`` already waited for it)."""
    a_closed = threading.Event()
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as rx:
        eps = rx.data_endpoints, rx.feedback_endpoints

        def b() -> None:
            with Sender(*eps, sender_id="b") as tx:
                tx.wait_for_receivers(timeout=10)
                tx.send_batch([b"b%d" % i for i in range(100)])
                tx.poll()
                assert a_closed.wait(30)
                time.sleep(0.5)  # a pause mid-stream, ten times the loop's look
                tx.send_batch([b"b%d" % i for i in range(100, 200)])

        sender_b = threading.Thread(target=b)
        sender_b.start()
        deadline = time.monotonic() + 30
        while not any(s["sender"] == "b" and s["received"] for s in rx.snapshot()["senders"]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with Sender(*eps, sender_id="a") as tx:
            tx.wait_for_receivers(timeout=10)
            tx.send_batch([b"a%d" % i for i in range(10)])
        a_closed.set()
        got = [m.payload for m in rx.messages(senders=1, timeout=30)]
        sender_b.join(30)
    assert sorted(got) == sorted([b"a%d" % i for i in range(10)]
                                 + [b"b%d" % i for i in range(200)])


def test_a_frame_bound_above_16_mib_holds_on_both_sides():
    """``max_frame_bytes`` raised on both sides: the receiver's ZeroMQ socket kept its own
    fixed 16 MiB bound, dropped the connection at the 20 MB message, and the stream ended
    ``incomplete`` with the message counted beyond the history."""
    big = 24 * 1024 * 1024
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", max_frame_bytes=big) as rx:
        with Sender(rx.data_endpoints, rx.feedback_endpoints, max_frame_bytes=big) as tx:
            tx.wait_for_receivers(timeout=10)
            tx.send(b"small")
            tx.send(b"x" * (20 * 1024 * 1024))
            tx.send(b"after")
        got = [len(m.payload) for m in rx.messages(senders=1, timeout=30)]
        (stream,) = rx.snapshot()["senders"]
    assert got == [5, 20 * 1024 * 1024, 5] and stream["status"] == "complete"
    assert tx.snapshot()["at_close"][0]["status"] == "complete"


def test_an_id_frames_cannot_carry_is_refused_and_the_longest_they_can_works():
    """A sender id of 300 characters made every frame malformed at its receivers (the
    sender sent on; a wait for receivers timed out blaming the stream or a key); a
    receiver id of 1,000 left its HELLO answers unread; a NUL ends the topic of the
    repairs meant for one receiver alone. Refused where they are given; 256 characters
    (the wire's bound) carry a stream end to end, with a repair to that receiver alone."""
    from nakflow import ConfigError

    for bad in ("s" * 257, "a\0b"):
        with pytest.raises(ConfigError, match=r"sender_id must be a name of 1\.\.256 char"):
            Sender("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", sender_id=bad)
        with pytest.raises(ConfigError, match=r"receiver_id must be a name of 1\.\.256 char"):
            Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", receiver_id=bad)
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", receiver_id="r" * 256,
                  test_data_loss=0.2) as rx:
        # a frame per message: 500 frames, a fifth of them dropped at the receiver (a few
        # frames of many messages each, natural batching's, were all kept in one CI run)
        with Sender(rx.data_endpoints, rx.feedback_endpoints, sender_id="é" * 256,
                    frame_msgs=1) as tx:
            assert tx.wait_for_receivers(timeout=10) == 1
            for i in range(500):
                tx.send(b"%d" % i)
        got = [int(m.payload) for m in rx.messages(senders=1, timeout=30)]
        (stream,) = rx.snapshot()["senders"]
    assert sorted(got) == list(range(500)) and stream["status"] == "complete"
    assert stream["repaired"] > 0 and rx.snapshot()["malformed"] == 0
    assert [a["receiver"] for a in tx.snapshot()["at_close"]] == ["r" * 256]
