"""Two incarnations of one sender id sending at once: a Spark task and its speculative copy
(``spark.speculation``: sender id ``<run id>/p<partition>``, the epoch its attempt), or
two ``nakflow send --id X``. Each is a stream of its own, (sender, epoch), and a receiver
measures, cuts and repairs each as it would two senders.

Before, the receiver's arrival meter and queueing-delay base were kept per sender id: the
two streams' seqs and stamps mixed into one, the NAKs told each sender it could have the
whole consumer's rate, the queue stayed full for seconds and dropped 12,000-15,000
messages, more separate missing ranges than a stream keeps (MAX_GAPS), and the later
stream ended 1,034-11,685 messages short with nothing in the log saying why.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import pytest

from nakflow import ReceiverConfig, ReceiverCore, SenderConfig, SenderCore
from nakflow.core.gaps import MAX_GAPS
from simulations.cores import SimLink

COUNT = 20_000


def run_two_senders(ids: tuple[str, str]) -> tuple[ReceiverCore, list[SenderCore], float]:
    """Two senders (ids ``ids``, epochs 1 and 2, the second 0.3 s later), each offering 20
    messages a ms, to one receiver whose consumer takes 5 a ms (a quarter of what they
    offer), over SimLink in 1 ms steps, until both closed and the queue is empty."""
    txs = [SenderCore(SenderConfig(mode="nak", stream="s", sender_id=ids[i], epoch=1 + i,
                                   frame_msgs=16), now=0.0) for i in range(2)]
    rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx",
                                     capacity_msgs=1_000), now=0.0, rng=random.Random(1))
    link = SimLink(txs, [rx], rng=random.Random(2))
    queue, sent, closing = link.queues[0], [0, 0], [False, False]
    arrival_senders = 0
    while link.now < 30:
        t = link.now
        for i, tx in enumerate(txs):
            if t < 0.3 * i or closing[i]:
                continue
            for _ in range(20):
                if sent[i] == COUNT or tx.offer(b"m", t):  # not admitted: wait
                    break
                sent[i] += 1
            tx.flush(t)
            if sent[i] == COUNT:
                tx.close(t)
                closing[i] = True
        queue.take(5, 0)
        link.step()
        while rx.next_event() is not None:
            pass
        if t >= 1.0 and not arrival_senders:  # both send
            arrival_senders = rx.signals.arrival.senders(t)
        if all(tx.closed for tx in txs) and not len(queue):
            break
    assert arrival_senders == 2  # two streams, whatever their ids
    return rx, txs, link.now


@pytest.mark.parametrize("ids", [("task-0", "task-0"), ("task-0", "task-1")],
                         ids=["one id, two epochs", "two ids"])
def test_two_incarnations_of_one_id_are_paced_and_repaired_as_two_senders(ids):
    rx, txs, now = run_two_senders(ids)
    streams = rx.tracker.per_sender()
    assert [(s["sender"], s["epoch"], s["status"], s["missing"]) for s in streams] == [
        (ids[0], 1, "complete", 0), (ids[1], 2, "complete", 0)]
    # the NAKs held both below the consumer's rate: the queue never overflowed
    assert rx.snapshot(now)["dropped"] == 0
    for tx in txs:
        assert [o["status"] for o in tx.snapshot(now)["at_close"]] == ["complete"]


def test_two_live_senders_with_one_id_both_complete_at_a_slow_receiver():
    """Real sockets: two threaded ``Sender``s named alike (epochs 0 and 1, as a task's
    first attempt and its speculative copy) flood a receiver whose consumer takes 2,000
    messages a second from a queue of 500."""
    from nakflow import Receiver, Sender

    n = 4_000
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", capacity_msgs=500) as rx:
        eps = rx.data_endpoints, rx.feedback_endpoints
        errors: list[BaseException] = []

        def attempt(epoch: int) -> None:
            try:
                with Sender(*eps, sender_id="run/p0", epoch=epoch) as tx:
                    tx.wait_for_receivers(1)
                    for i in range(n):
                        tx.send(b"%d" % i)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=attempt, args=(e,)) for e in (0, 1)]
        for th in threads:
            th.start()
        got = 0
        deadline = time.monotonic() + 60  # bounded: the test fails rather than hangs
        # both streams ended and delivered (one id: ``done(1)`` counts the task once)
        while not (len(rx.ends()) == 2 and rx.done(1)) and time.monotonic() < deadline:
            got += len(rx.get_many(20, timeout=0.01))
            time.sleep(0.01)  # the consumer's pace (2,000 msgs/s), not a wait for state
        for th in threads:
            th.join(30)
        snap = rx.snapshot()
    assert errors == [] and time.monotonic() < deadline
    assert got == 2 * n
    assert [(s["sender"], s["epoch"], s["status"]) for s in snap["senders"]] == [
        ("run/p0", 0, "complete"), ("run/p0", 1, "complete")]


def test_an_answer_to_another_incarnations_hello_is_not_this_ones():
    """A Spark task and its speculative copy (one id, two epochs, on two hosts: two
    clocks) both wait for receivers. A receiver's answer echoes the id and the stamp of
    the HELLO it answers; each takes only the answers to its own stamps. Before, the id
    alone matched: the copy counted the receiver as answering it before it had heard the
    copy, and measured its RTT against the other host's stamp (here 5 s apart: an RTT
    of 5 s, or none at all)."""
    first = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="run/p0", epoch=0),
                       now=0.0, wall_offset=1_000.0)
    copy = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="run/p0", epoch=1),
                      now=0.0, wall_offset=1_005.0)
    rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx"), now=0.0)
    for tx in (first, copy):
        tx.want_receivers(1, 0.0)
    first.handle_timer(0.0)
    rx.receive_data(first.frames_to_send()[0], 0.01)
    (answer,) = rx.frames_to_send()
    for tx in (first, copy):
        tx.receive_feedback(answer, 0.02)
    assert first.receivers_ready() == 1 and first.roster.rtt_s == pytest.approx(0.02)
    assert copy.receivers_ready() == 0 and copy.roster.rtt_s is None
    assert "rx" not in copy.roster.answered


def test_a_repair_given_up_past_max_gaps_is_counted_and_logged(caplog):
    """A stream keeps at most MAX_GAPS separate missing ranges (bounded memory); past it
    the oldest is given up. That was counted nowhere the user could see."""
    rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx",
                                     capacity_msgs=1_000), now=0.0, rng=random.Random(1))
    rx.tracker.on_data("tx", 1, 0, 2 * (MAX_GAPS + 40))
    for seq in range(0, 2 * (MAX_GAPS + 40), 2):  # every other one dropped: apart
        rx.tracker.on_dropped("tx", 1, seq)
    with caplog.at_level(logging.WARNING, logger="nakflow"):
        rx.handle_timer(0.001)
    repair = rx.snapshot(0.001)["repair"]
    assert repair["given_up_max_gaps"] == 40 and repair["given_up"] == 0
    (line,) = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert "gave up repairing 40 messages of sender tx epoch 1" in line
    assert f"more than {MAX_GAPS} separate ranges" in line


class Ids:
    """Senders by name over SimLink to one receiver whose consumer keeps up; each sender
    offers 20 messages a ms from ``start`` until it has sent ``count``, then closes, or
    aborts (no END) at ``abort_at``."""

    def __init__(self) -> None:
        self.rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx",
                                              capacity_msgs=10_000), now=0.0,
                               rng=random.Random(1))
        self.link = SimLink([], [self.rx], rng=random.Random(2))
        self.queue = self.link.queues[0]
        self.plan: list[tuple[SenderCore, float, int, float | None]] = []
        self.sent: dict[SenderCore, int] = {}
        self.finished: list[tuple[float, int]] = []  # (t, queue.finished()) when it moved
        self.ended_at: dict[tuple[str, int], float] = {}  # when the receiver had its END

    def sender(self, sender_id: str, epoch: int, *, start: float = 0.0, count: int = 2_000,
               abort_at: float | None = None) -> SenderCore:
        tx = SenderCore(SenderConfig(mode="nak", stream="s", sender_id=sender_id,
                                     epoch=epoch, frame_msgs=16), now=start)
        self.plan.append((tx, start, count, abort_at))
        return tx

    def run(self, until: float) -> None:
        while self.link.now < until:
            t = self.link.now
            for tx, start, count, abort_at in self.plan:
                if t < start or tx.closed or tx.life.state != "open":
                    continue
                if tx not in self.link.senders:
                    self.link.senders.append(tx)
                if abort_at is not None and t >= abort_at:
                    tx.abort(t)
                    continue
                sent = self.sent.get(tx, 0)
                while sent < count and not tx.offer(b"m", t):
                    sent += 1
                    if sent % 20 == 0:
                        break
                self.sent[tx] = sent
                tx.flush(t)
                if sent == count:
                    tx.close(t)
            self.queue.take(10_000, 0)
            self.link.step()
            while self.rx.next_event() is not None:
                pass
            n = self.queue.finished()
            if not self.finished or self.finished[-1][1] != n:
                self.finished.append((t, n))
            for key, st in self.rx.tracker.streams.items():
                if st.final_seq is not None:
                    self.ended_at.setdefault(key, t)

    def when(self, n: int) -> float:
        """When ``n`` senders first counted as finished."""
        return next(t for t, k in self.finished if k >= n)


def test_an_aborted_attempt_is_not_a_finished_sender_while_its_retry_may_come():
    """``--senders 2``: task p1's first attempt fails (no END), p0 ends, and p1's retry
    (a newer epoch) starts 0.5 s after the failure. The failed attempt counted as a
    finished sender: with p0's END the receiver's wait was over before the retry began
    (``nakflow receive`` exited and the retry found no receiver)."""
    ids = Ids()
    ids.sender("p0", 1, count=2_000)
    ids.sender("p1", 1, count=50_000, abort_at=0.3)
    retry = ids.sender("p1", 2, start=0.8, count=2_000)
    ids.run(6.0)
    assert retry.closed
    ended = ids.when(2)
    streams = {(s["sender"], s["epoch"]): s["status"] for s in ids.rx.tracker.per_sender()}
    assert streams == {("p0", 1): "complete", ("p1", 1): "incomplete",
                       ("p1", 2): "complete"}
    # the wait ends with the retry's END, and counts p1 once
    assert ended >= ids.ended_at[("p1", 2)]
    assert ids.finished[-1][1] == 2


def test_both_attempts_of_a_speculative_task_count_as_one_sender():
    """A task and its speculative copy both send END: one task, so ``--senders 2`` still
    waits for the other task."""
    ids = Ids()
    ids.sender("p0", 1, count=2_000)
    ids.sender("p0", 2, start=0.05, count=2_000)
    other = ids.sender("p1", 1, start=1.0, count=2_000)
    ids.run(4.0)
    assert other.closed
    assert ids.when(1) < 1.0  # p0 ended (twice) before p1 began
    assert ids.when(2) >= ids.ended_at[("p1", 1)]
    assert ids.finished[-1][1] == 2
    # the verdict: three streams, all ended. It said "1 without END" (ids subtracted from
    # streams), and for three tasks expected gave no hint that ids are counted
    from nakflow.report import receiver_verdict

    snap = ids.rx.snapshot(ids.link.now)
    verdict = receiver_verdict(snap, expect_senders=2)
    assert (verdict.line, verdict.problems) == (
        "delivered 6,000 of 6,000 from 3 senders, 0 missing", [])
    assert receiver_verdict(snap, expect_senders=3).problems == [
        "END from 2 of the 3 senders expected (senders counted by id: the 3 streams came "
        "from 2, as a task's attempts share its id)"]


def test_a_sender_that_left_without_end_and_has_no_retry_counts_after_the_wait():
    """A ``nakflow send`` stopped by a signal: its stream counts as finished once nothing
    else is live and no retry came for RETRY_WAIT_S; then it stays counted while another
    sender comes and goes."""
    from nakflow.core.silence import LOOK_S, RETRY_WAIT_S

    ids = Ids()
    ids.sender("solo", 1, count=50_000, abort_at=0.3)
    ids.run(0.3 + RETRY_WAIT_S + 3 * LOOK_S)
    counted = ids.when(1)
    assert 0.3 + RETRY_WAIT_S <= counted <= 0.3 + RETRY_WAIT_S + 2 * LOOK_S + 0.1
    later = ids.sender("later", 1, start=ids.link.now, count=2_000)
    ids.run(ids.link.now + 3.0)
    assert later.closed
    assert [k for _t, k in ids.finished if _t > counted] == [2]  # never back to 0


def test_a_sender_that_left_before_sending_anything_is_not_a_finished_one():
    """A ``nakflow send`` whose wait for receivers ran out (its feedback endpoint
    mistyped: the receiver hears its HELLOs, it never hears the answers) says BYE. It
    counted as a finished sender RETRY_WAIT_S later, so a ``--senders 1`` receiver was
    gone when the corrected sender started. Now only a sender that sent counts; the
    verdict leaves the other out and names it."""
    from nakflow.core.silence import LOOK_S, RETRY_WAIT_S
    from nakflow.report import receiver_verdict

    ids = Ids()
    typo = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="typo", epoch=1),
                      now=0.0)
    typo.want_receivers(1, 0.0)
    ids.link.senders.append(typo)
    ids.run(1.0)
    assert ("typo", 1) in ids.rx.endings.heard()
    typo.abort(ids.link.now)
    ids.run(1.0 + RETRY_WAIT_S + 4 * LOOK_S)
    assert ("typo", 1) in ids.rx.endings.left  # its BYE was heard
    assert ids.finished[-1][1] == 0
    fixed = ids.sender("fixed", 1, start=ids.link.now, count=2_000)
    ids.run(ids.link.now + 2.0)
    assert fixed.closed and ids.finished[-1][1] == 1
    verdict = receiver_verdict(ids.rx.snapshot(ids.link.now), expect_senders=1)
    assert verdict.problems == [], verdict.problems
    assert verdict.line == ("delivered 2,000 of 2,000 from 1 sender, 0 missing; "
                            "1 sender left before sending anything")


def test_a_receiver_waiting_for_two_tasks_waits_for_a_retried_one_and_says_so():
    """``nakflow receive --senders 2 --drop-duplicates``: task p1's first attempt is
    stopped by SIGTERM once the receiver has its messages (no END), task p0 sends all of
    its, and p1's retry (a new ``nakflow send --id p1``: a newer epoch) starts after p0
    ended. Before, the stopped attempt counted as the second finished sender: the
    receiver exited 1 at p0's END and the retry found no receiver. Now it waits for the
    retry and exits 0, the stopped attempt named as covered by it."""
    import signal
    import subprocess
    import sys

    from nakflow.testing import free_port
    from tests.test_silence import _delivered

    data, fb, metrics = (free_port() for _ in range(3))
    eps = ["--data", f"tcp://127.0.0.1:{data}", "--feedback", f"tcp://127.0.0.1:{fb}"]
    cmd = [sys.executable, "-m", "nakflow"]
    rx = subprocess.Popen([*cmd, "receive", *eps, "--senders", "2", "--drop-duplicates",
                           "--metrics-port", str(metrics)], stderr=subprocess.PIPE, text=True)

    def send(task: str, count: int) -> subprocess.Popen[str]:
        return subprocess.Popen([*cmd, "send", *eps, "--id", task, "--count", str(count),
                                 "--max-rate", "2000"], stderr=subprocess.PIPE, text=True)

    procs: list[subprocess.Popen[str]] = [rx]
    try:
        assert rx.stderr is not None and "ready" in rx.stderr.readline()
        first = send("p1", 1_000_000)
        procs.append(first)
        url, end = f"http://127.0.0.1:{metrics}/metrics", time.monotonic() + 60
        while _delivered(url) < 500:
            assert first.poll() is None and time.monotonic() < end, "nothing delivered"
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)  # no END: the attempt failed
        assert first.wait(30) == 143
        other = send("p0", 2_000)
        procs.append(other)
        assert other.wait(60) == 0  # its END is in: before, the receiver was done here
        retry = send("p1", 3_000)
        procs.append(retry)
        retry_err = retry.communicate(timeout=60)[1]
        err = rx.communicate(timeout=60)[1]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert retry.returncode == 0, retry_err
    assert rx.returncode == 0, err
    assert ("delivered 5,000 of 5,000 from 2 senders, 0 missing; 1 earlier attempt left "
            "for a retry that delivered all of it") in err
