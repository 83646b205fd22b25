"""The exact close, on the real cores over the simulator's in-memory network (``SimLink``,
virtual time): a sender's ``close()`` is over when every receiver heard before END has
sent its receipt (holding the whole stream, or saying what it lacks) or is gone, and the
sender says per receiver which.

Each scenario is one a sender of the older close got wrong: it closed 0.1-0.2 s after
END, whoever was still behind (``tests/test_close.py`` on main 50a04f5: the stopped
receiver ends short, the sender says nothing of it).
"""

from __future__ import annotations

import random
from collections.abc import Collection

from nakflow import ReceiverConfig, ReceiverCore, RepairConfig, SenderConfig, SenderCore
from nakflow.core.close import DISCONNECT_PROBE_S
from nakflow.events import Confirmed
from nakflow.report import sender_verdict
from nakflow.wire import Hello, Receipt, encode
from simulations.cores import SimLink

STEP = 0.001


class Run:
    """One sender, ``n`` receivers (each consuming ``consume`` msgs/ms), ``messages`` sent
    as fast as the policy admits, then ``close()``; the test stops receivers at will."""

    def __init__(self, n: int = 3, *, mode: str = "nak", messages: int = 5_000,
                 consume: int = 50, capacity: int = 2_000, hwm_frames: int = 10_000,
                 repair: RepairConfig | None = None, gone_s: float = 5.0) -> None:
        repair = repair or RepairConfig()
        self.tx = SenderCore(SenderConfig(mode=mode, stream="c", sender_id="s", epoch=1,
                                          repair=repair, frame_msgs=16, linger_s=STEP,
                                          receiver_gone_s=gone_s), now=0.0)
        self.rxs = [ReceiverCore(ReceiverConfig(mode=mode, stream="c", receiver_id=f"r{i}",
                                                capacity_msgs=capacity, repair=repair),
                                 now=0.0, rng=random.Random(i)) for i in range(n)]
        self.link = SimLink([self.tx], self.rxs, rng=random.Random(7), hwm_frames=hwm_frames)
        self.messages, self.consume = messages, consume
        self.delivered = [0] * n
        self.closed_at: float | None = None
        self.events: list[object] = []

    def step(self, stopped: Collection[int] = (), stalled: Collection[int] = ()) -> None:
        """One ms; ``stopped`` receivers neither read nor consume (a stopped process),
        ``stalled`` ones read but do not consume (their consumer is away)."""
        link, tx, t = self.link, self.tx, self.link.now
        if tx.sent < self.messages:
            for _ in range(200):
                if tx.sent >= self.messages or tx.offer(b"%d" % tx.sent, t):
                    break
            tx.flush(t)
            if tx.sent >= self.messages:
                tx.close(t)
        for i, q in enumerate(link.queues):
            if link.gone[i]:
                continue
            link.stopped[i] = i in stopped
            if not link.stopped[i] and i not in stalled:
                self.delivered[i] += len(q.take(self.consume, 0))
        link.step()
        while (ev := tx.next_event()) is not None:
            self.events.append(ev)
        if tx.closed and self.closed_at is None:
            self.closed_at = t

    def until_closed(self, max_s: float = 30.0, stopped: Collection[int] = ()) -> None:
        while not self.tx.closed and self.link.now < max_s:
            self.step(stopped)

    def settle(self, seconds: float = 1.0) -> None:
        for _ in range(round(seconds / STEP)):
            self.step()

    def at_close(self) -> dict[str, dict[str, object]]:
        return {c["receiver"]: c for c in self.tx.snapshot(self.link.now)["at_close"]}

    def stream(self, i: int) -> dict[str, object]:
        (row,) = self.rxs[i].tracker.per_sender()
        return row


def test_healthy_receivers_confirm_and_the_close_is_over_within_a_few_round_trips():
    run = Run(3)
    run.until_closed()
    assert run.closed_at is not None
    at = run.at_close()
    assert {r: c["status"] for r, c in at.items()} == dict.fromkeys(("r0", "r1", "r2"),
                                                                      "complete")
    snap = run.tx.snapshot(run.link.now)
    assert snap["receipts"] == 3 and snap["at_close_counts"]["complete"] == 3
    assert [e.status for e in run.events if isinstance(e, Confirmed)] == ["complete"] * 3
    # one receipt per receiver and stream: the feedback a healthy receiver sends is its
    # HELLOs and that one frame
    assert all(rx.endings.receipts_sent == 1 for rx in run.rxs)


def test_a_receiver_stopped_across_end_is_waited_for_and_catches_up_whole():
    """Receiver 2 stops before END and for 2 s after it; its high-water mark drops what
    came meanwhile, END included. The sender waits (it is silent for less than
    receiver_gone_s), repeats END, and once the receiver is back serves its repairs until
    it confirms: every message there. The older close ended 0.1-0.2 s after END and left
    the stopped receiver short and unreported."""
    run = Run(3, hwm_frames=50)
    while run.tx.sent < run.messages - 1_000:
        run.step()
    stop_until = run.link.now + 3.0
    while run.link.now < stop_until:
        run.step(stopped={2})
        assert not run.tx.closed, "closed while a receiver it heard was stopped"
    run.until_closed()
    run.settle()
    assert run.closed_at is not None
    row = run.stream(2)
    assert row["status"] == "complete" and row["repaired"] > 0
    assert {r: c["status"] for r, c in run.at_close().items()} == dict.fromkeys(
        ("r0", "r1", "r2"), "complete")


def test_an_abort_during_the_close_ends_its_wait_and_says_who_was_still_awaited():
    """END went out and the close waits for a stopped receiver; ``abort`` (a signal at
    ``nakflow send``, an application giving up) ends the wait at once: that receiver is
    ``unconfirmed``, the others keep what they confirmed, and BYE goes out. Before, the
    awaited one had no outcome at all and the report did not name it."""
    run = Run(3)
    while run.tx.sent < run.messages - 1_000:
        run.step()
    while not run.at_close() or len(run.at_close()) < 2:  # END out, r0 and r1 confirmed
        run.step(stopped={2})
    assert not run.tx.closed
    run.tx.abort(run.link.now)
    assert run.tx.closed
    at = run.at_close()
    assert {r: c["status"] for r, c in at.items()} == {
        "r0": "complete", "r1": "complete", "r2": "unconfirmed"}
    assert at["r2"]["why"] == "the close was cut short before its receipt"
    assert run.tx.snapshot(run.link.now)["at_close_counts"]["unconfirmed"] == 1


def test_the_close_gives_up_at_linger_max_s_and_names_who_it_still_awaited():
    """A receiver stopped across END for longer than ``linger_max_s`` (and not long
    enough to count as gone) is waited for until then, not longer: the close is over
    ``linger_max_s`` after END, that receiver ``unconfirmed`` for want of a receipt, the
    others complete."""
    linger = 1.0
    run = Run(3, repair=RepairConfig(linger_max_s=linger), gone_s=30.0)
    while run.tx.life.state == "open":
        run.step()
    began = run.link.now  # END went out (the close's linger began) in the last step
    run.until_closed(max_s=began + 5 * linger, stopped={2})
    assert run.closed_at is not None
    assert began + linger - 2 * STEP <= run.closed_at <= began + linger + 2 * STEP
    at = run.at_close()
    assert {r: c["status"] for r, c in at.items()} == {
        "r0": "complete", "r1": "complete", "r2": "unconfirmed"}
    assert at["r2"]["why"] == "no receipt within linger_max_s"


def test_a_receiver_whose_connection_closed_is_gone_after_the_probe_not_the_timeout():
    run = Run(3)
    while run.tx.sent < run.messages // 2:
        run.step()
    run.link.disconnect(2)  # killed: its connections close
    run.tx.connection_lost(run.link.now, 1)
    killed_at = run.link.now
    run.until_closed()
    assert run.closed_at is not None
    # the close is over DISCONNECT_PROBE_S after the kill at most (not receiver_gone_s)
    assert run.closed_at - killed_at <= DISCONNECT_PROBE_S + 0.1
    at = run.at_close()
    assert at["r2"]["status"] == "gone" and at["r2"]["why"] == "disconnected"
    assert at["r0"]["status"] == at["r1"]["status"] == "complete"


def test_a_stopped_receiver_beside_a_killed_one_is_not_taken_for_dead():
    """One connection closed, two receivers silent: the probe cannot tell which one died,
    so neither is called disconnected; both wait for silence (receiver_gone_s)."""
    run = Run(3, gone_s=2.0)
    while run.tx.sent < run.messages // 2:
        run.step()
    run.link.disconnect(2)
    run.tx.connection_lost(run.link.now, 1)
    t_fault = run.link.now
    run.until_closed(stopped={1})
    at = run.at_close()
    assert at["r1"]["status"] == at["r2"]["status"] == "gone"
    assert at["r1"]["why"] == at["r2"]["why"] == "silent for 2 s"
    assert run.closed_at is not None and run.closed_at - t_fault > DISCONNECT_PROBE_S


def test_a_hung_receiver_is_gone_after_receiver_gone_s_and_the_others_complete():
    run = Run(3, gone_s=1.5)
    while run.tx.sent < run.messages // 2:
        run.step()
    hung_at = run.link.now
    run.until_closed(stopped={2})
    assert run.closed_at is not None
    # gone 1.5 s after it was last heard: its last HELLO (every 0.5 s) before the hang
    assert 1.5 - 0.5 <= run.closed_at - hung_at <= 1.5 + 0.01
    at = run.at_close()
    assert at["r2"] == {"receiver": "r2", "status": "gone", "why": "silent for 1.5 s",
                        "missing": 0, "missing_by_reason": {}}
    assert at["r0"]["status"] == "complete"


def test_a_receipt_says_what_a_receiver_lacks_and_why():
    """A history too short for a stopped receiver: what it asks for after the history
    moved on is GONE; its receipt says so (beyond_history), and so does the sender."""
    repair = RepairConfig(history_msgs=200)
    run = Run(2, messages=4_000, hwm_frames=20, repair=repair)
    while run.tx.sent < 1_000:
        run.step()
    for _ in range(1_000):
        run.step(stopped={1})
    run.until_closed()
    run.settle()
    row = run.stream(1)
    lacks = row["missing_by_reason"]
    assert row["status"] == "incomplete" and lacks.get("beyond_history", 0) > 0
    at = run.at_close()["r1"]
    assert at["status"] == "incomplete" and at["missing_by_reason"] == lacks
    assert at["missing"] == row["missing"]


def test_a_lost_receipt_is_asked_for_again_by_the_repeated_end():
    """The first receipt of every receiver is lost on the way back; the sender repeats
    END while it waits, each END is answered again, and the close completes."""
    run = Run(2)
    original = run.link._feedback_out
    dropped: list[int] = []

    def lose_first_receipt(i: int, frames: list[bytes]) -> None:
        keep = []
        for buf in frames:
            if buf[2] == 10 and i not in dropped:  # T_RECEIPT, the first from receiver i
                dropped.append(i)
                continue
            keep.append(buf)
        original(i, keep)

    run.link._feedback_out = lose_first_receipt  # type: ignore[method-assign]
    run.until_closed()
    assert sorted(dropped) == [0, 1]
    assert {c["status"] for c in run.at_close().values()} == {"complete"}
    assert all(rx.endings.receipts_sent >= 2 for rx in run.rxs)


def test_every_mode_closes_exactly():
    for mode in ("ack", "none"):
        run = Run(2, mode=mode, messages=2_000)
        run.until_closed()
        assert {c["status"] for c in run.at_close().values()} == {"complete"}, mode


def test_a_receiver_that_sends_no_receipts_gets_the_older_close_and_is_unconfirmed():
    """An older receiver (its HELLO does not say ``receipts``): nobody waits for a
    receipt from it; the close keeps the older rule for it (END repeated, repairs answered
    while asked for) and reports it unconfirmed, never complete."""
    run = Run(1, messages=1_000)
    old = encode(Hello("c", "old-rx", "receiver", "nak", 0, 0, "", 0.0))
    run.tx.receive_feedback(old, 0.0)
    run.until_closed()
    at = run.at_close()
    assert at["r0"]["status"] == "complete"
    assert at["old-rx"]["status"] == "unconfirmed" and "older" in at["old-rx"]["why"]
    assert run.closed_at is not None and run.closed_at < 2.0


def test_a_receiver_first_heard_after_end_is_not_waited_for():
    run = Run(1, messages=1_000)
    while run.tx.life.state != "closing":
        run.step()
    late = encode(Hello("c", "late-rx", "receiver", "nak", 0, 0, "", 0.0, receipts=True))
    run.tx.receive_feedback(late, run.link.now)
    run.until_closed()
    assert "late-rx" not in run.at_close()
    assert run.closed_at is not None and run.closed_at < 2.0


def test_a_receipt_from_a_receiver_first_heard_after_end_is_counted_not_a_failed_close():
    """While the close waits for a stopped receiver and repeats END, a receiver that joins
    then hears END and answers it: it lacks everything sent before it joined. It took no
    part in this stream, so its receipt neither fails the close nor stands in the report
    as ``incomplete`` (it did, and ``nakflow send`` exited 1 for a run whose every
    receiver held the whole stream); the sender counts it (``receipts_after_end``)."""
    run = Run(2, messages=2_000, hwm_frames=50)
    while run.tx.sent < run.messages - 500:
        run.step()
    while run.tx.life.state != "closing":
        run.step(stopped={1})
    late = Receipt("c", "late-rx", "s", 1, run.messages, (0, 0, 0, run.messages), 0.0)
    run.tx.receive_feedback(encode(late), run.link.now)
    assert not run.tx.closed
    stop_until = run.link.now + 1.0
    while run.link.now < stop_until:
        run.step(stopped={1})
    run.until_closed()
    assert {r: c["status"] for r, c in run.at_close().items()} == dict.fromkeys(
        ("r0", "r1"), "complete")
    snap = run.tx.snapshot(run.link.now)
    assert snap["at_close_counts"] == {"complete": 2, "incomplete": 0, "gone": 0,
                                       "unconfirmed": 0}
    assert snap["receipts_after_end"] == 1  # ("receipts" counts frames: r0 answers each END)
    assert sender_verdict(snap).problems == []
    assert [e.receiver for e in run.events if isinstance(e, Confirmed)] == ["r0", "r1"]


# -- repair that outruns the history --------------------------------------------------
def test_what_a_full_queue_drops_is_held_for_it_and_repaired_however_short_the_history():
    """Receiver 1's consumer stalls for 0.4 s while its I/O goes on reading: its queue
    overflows and drops thousands of fresh messages. The sender's history holds 2,000
    messages (a fraction of a second here, as 64 MB is at 170,000 msgs/s of 1 KB).
    Asked for once room was back, as before, they were long gone (beyond_history). Now
    the receiver asks at once to have them held, and every one is repaired."""
    run = Run(2, messages=40_000, capacity=1_000, consume=30,
              repair=RepairConfig(history_msgs=2_000))
    while not run.tx.closed and run.link.now < 30:
        run.step(stalled={1} if 0.3 <= run.link.now < 0.7 else ())
    run.settle()
    assert run.rxs[1].dropped > 2_000
    row = run.stream(1)
    assert row["status"] == "complete" and row["repaired"] == run.rxs[1].dropped, row
    held = run.tx.snapshot(run.link.now)["repair"]
    assert held["held"] >= run.rxs[1].dropped and held["kept_served"] > 0
    assert run.rxs[1].requester is not None and run.rxs[1].requester.holds_sent > 0
    assert run.at_close()["r1"]["status"] == "complete"


def test_a_receiver_back_from_a_stop_takes_its_backlog_at_its_pace_and_drops_none_of_it():
    """Receiver 1 is stopped for 1 s; what was sent meanwhile waits for it (its socket,
    the sender's pipe). Back, it reads that backlog only as fast as its queue empties: it
    drops none of it (before: it read the backlog at full speed into a full queue, dropped
    most of it in pieces, and asked the sender's history for each piece again)."""
    run = Run(2, messages=60_000, capacity=1_000, consume=20)
    while run.tx.sent < 10_000:
        run.step()
    stop_until = run.link.now + 1.0
    while run.link.now < stop_until:
        run.step(stopped={1})
    resumed, sent_then = run.link.now, run.tx.sent
    dropped_at_resume = run.rxs[1].dropped
    while run.rxs[1].tracker.streams[("s", 1)].next_seq < sent_then:  # through the backlog
        run.step()
        assert run.link.now < resumed + 30
    assert run.rxs[1].dropped == dropped_at_resume  # nothing of its own backlog dropped
    run.until_closed()
    run.settle()
    assert run.stream(1)["status"] == "complete"


def test_what_was_sent_after_a_stop_waits_behind_its_backlog_and_is_not_dropped_either():
    """Receiver 1 is stopped for 1 s; back, it holds back its backlog (above), and what
    was sent after it resumed waits in the socket behind that backlog. Read into a full
    queue, that was dropped (the hold-back followed each frame's send time), and by the
    time it was asked for, a short history (5,000 messages here; 0.8 s of a 1 KB fan-out
    with the default 64 MiB) no longer held it: a fan-out stopped 3 s lost 80-1,853 so
    in 4 of 16 runs. Now the receiver holds back until it has emptied its socket."""
    run = Run(2, messages=60_000, capacity=1_000, consume=20,
              repair=RepairConfig(history_msgs=5_000))
    while run.tx.sent < 10_000:
        run.step()
    stop_until = run.link.now + 1.0
    while run.link.now < stop_until:
        run.step(stopped={1})
    dropped_at_resume = run.rxs[1].dropped
    run.until_closed()
    run.settle()
    assert run.rxs[1].dropped == dropped_at_resume, run.stream(1)
    assert run.stream(1)["status"] == "complete"

