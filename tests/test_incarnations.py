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
        while not rx.done(2) and time.monotonic() < deadline:
            got += len(rx.get_many(20, timeout=0.01))
            time.sleep(0.01)  # the consumer's pace (2,000 msgs/s), not a wait for state
        for th in threads:
            th.join(30)
        snap = rx.snapshot()
    assert errors == []
    assert got == 2 * n
    assert [(s["sender"], s["epoch"], s["status"]) for s in snap["senders"]] == [
        ("run/p0", 0, "complete"), ("run/p0", 1, "complete")]


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
