"""NAK that never cuts for nothing and never lets one held-up receiver hold the others back:
on the real cores (simulations.cores, virtual time, deterministic) and one live run.

* A receiver held up for a moment (its process descheduled) and then draining its backlog
  faster than data arrives is not congested: no NAK, no cut; a consumer that really is
  slower than the sender still cuts it, on its queue.
* A consumer that takes nothing (paused) says so once and stops NAKing; the cuts it
  caused are undone.
* What a held-up receiver's own queue dropped is repaired to it alone, within the repair
  share, and what the history no longer holds is said (an event, a log line, a count).
* Cuts follow the rate a NAK reports: no lower than a share of it.
"""

from __future__ import annotations

import logging
import random

import pytest

from nakflow import NakConfig, ReceiverConfig, ReceiverCore, RepairConfig
from nakflow.events import BeyondHistory
from nakflow.policy.registry import NakFlow
from nakflow.wire import SIGNALS, Gone, Nak, encode
from simulations.cores import CoreSimParams, simulate_cores


@pytest.mark.quiet
def test_a_receiver_held_up_for_moments_that_then_catches_up_is_not_congested():
    """Three receivers whose processes stop for 40 ms every 300 ms (a busy host), each
    able to take 100,000 msgs/s, a sender at 20,000: every resume leaves an 80 % queue
    (the old rules NAKed there), but it drains five times faster than data arrives. No
    cut, nothing dropped. A consumer at 15,000 (slower than the sender) is slowness, and
    cuts the sender on its queue."""
    base = CoreSimParams(receivers=3, paused=3, pause_at_s=0.5, pause_every_s=0.3,
                         pause_for_s=0.04, capacity_msgs=1_000, consume_rate_msgs=100_000.0,
                         sender_max_rate_msgs=20_000.0, duration_s=3.0)
    healthy = simulate_cores(base, "nak", seed=4)
    assert healthy["cuts"] == 0, healthy
    for r in healthy["receivers"]:
        assert r["delivered"] == healthy["sent"] and r["queue_drops"] == 0, r
    slow = simulate_cores(CoreSimParams(receivers=3, capacity_msgs=1_000, duration_s=3.0,
                                        consume_rate_msgs=15_000.0,
                                        sender_max_rate_msgs=20_000.0), "nak", seed=4)
    assert slow["cuts"] > 0


def test_a_paused_consumer_says_so_once_then_is_silent():
    core = ReceiverCore(ReceiverConfig(receiver_id="r", capacity_msgs=100), now=0.0,
                        rng=random.Random(1))

    class Queue:
        delivered, depth, full = 0, 0, False

        def put(self, pending, hold=False):  # keeps everything
            n = len(pending)
            pending.clear()
            self.depth += n
            return {("s", 1): n}, []

        def released(self):
            return {}, self.depth

        def set_ends(self, ends, left=0):
            pass

    q, now, seq = Queue(), 0.0, 0
    naks: list[Nak] = []
    from nakflow.wire import encode_data

    while now < 1.0:  # the consumer takes nothing; 1 message every 10 ms arrives
        now += 0.01
        core.receive_data(encode_data("default", "s", 1, seq, now, [b"x"]), now)
        seq += 1
        core.exchange(q, now)
        naks += [f for f in map(__import__("nakflow.wire").wire.decode, core.frames_to_send())
                 if type(f) is Nak]
    assert [SIGNALS[n.signal] for n in naks] == ["paused"]  # once, then nothing
    assert core.snapshot(now)["naks_while_paused"] > 1


def test_a_pause_notice_undoes_the_cuts_its_receiver_caused_alone():
    flow = NakFlow("s", NakConfig(initial_rate_msgs=10_000))
    flow.on_feedback(Nak("s", "x", 75, 80.0, 0.0, 1, 0.0), now=0.0)
    flow.on_feedback(Nak("s", "x", 100, 100.0, 0.0, 1, 0.0), now=0.01)
    assert flow.controller.rate(now=0.02) == pytest.approx(2_500)
    flow.on_feedback(Nak("s", "x", 50, 60.0, 0.0, 7, 0.0), now=0.1)  # x: paused
    assert flow.controller.rate(now=0.1) == pytest.approx(10_000)
    assert flow.snapshot()["cuts_undone"] == 1
    other = NakFlow("s", NakConfig(initial_rate_msgs=10_000))
    other.on_feedback(Nak("s", "x", 75, 80.0, 0.0, 1, 0.0), now=0.0)
    other.on_feedback(Nak("s", "y", 87, 90.0, 0.0, 1, 0.0), now=0.01)  # y is slow too
    other.on_feedback(Nak("s", "x", 50, 60.0, 0.0, 7, 0.0), now=0.1)
    assert other.controller.rate(now=0.1) == pytest.approx(5_000)  # y's cut stands


def test_a_nak_with_a_rate_cuts_to_just_under_it():
    from nakflow.policy.registry import NakRateController

    ctl = NakRateController(NakConfig(initial_rate_msgs=100_000))
    ctl.on_nak(100, now=0.0, rate=60_000.0)  # full, and it takes 60,000: 0.75 of that
    assert ctl.rate(now=0.0) == pytest.approx(45_000)
    plain = NakRateController(NakConfig(initial_rate_msgs=100_000))
    plain.on_nak(100, now=0.0)  # no rate said: the level's factor of the base
    assert plain.rate(now=0.0) == pytest.approx(25_000)
    low = NakRateController(NakConfig(initial_rate_msgs=100_000))
    low.on_nak(50, now=0.0, rate=500_000.0)  # a rate above the base never raises it
    assert low.rate(now=0.0) == pytest.approx(100_000)
    assert 45_000 < ctl.rate(now=1.0) <= 60_000 + 1  # the plateau: the reported rate


@pytest.mark.quiet
def test_a_held_up_receivers_own_drops_are_repaired_to_it_alone_within_the_share():
    """One of three receivers' consumer is away for 1 s while its I/O reads on: its queue
    overflows (its own trouble); the repairs go to it alone (the others get no RDATA at
    all) and within the repair share, and the others' goodput is not touched. (A
    stopped process drops nothing: it holds its backlog back, tests/test_close.py.) The
    queue holds 0.2 s of the sender's rate, so the consumer is judged away (PAUSE_S,
    0.1 s) before it overflows: drops before that judgement are not known to be its own
    and are repaired to everyone (with 2,000, 0.1 s exactly, the first 20 of 18,028)."""
    p = CoreSimParams(receivers=3, paused=1, pause_at_s=1.0, pause_every_s=10.0,
                      pause_for_s=1.0, capacity_msgs=4_000, consume_rate_msgs=40_000.0,
                      sender_max_rate_msgs=20_000.0, hwm_frames=100_000, duration_s=4.0,
                      consumer_away=True)
    r = simulate_cores(p, "nak", seed=2)
    paused, *others = r["receivers"]
    assert paused["queue_drops"] > 0 and paused["repaired"] >= paused["queue_drops"]
    assert paused["delivered"] == r["sent"], paused
    assert r["repair"]["targeted"] >= paused["queue_drops"]
    for o in others:
        assert o["delivered"] == r["sent"] and o["repaired"] == 0, o
    assert r["cuts"] == 0, r


def test_what_the_history_no_longer_holds_is_said_at_the_receiver(caplog):
    core = ReceiverCore(ReceiverConfig(receiver_id="r", capacity_msgs=100), now=0.0)
    from nakflow.wire import encode_data

    for seq in (0, 10, 20):  # 1..9 and 11..19 lost in flight
        core.receive_data(encode_data("default", "s", 1, seq, 0.0, [b"x"]), 0.0)
    with caplog.at_level(logging.WARNING, logger="nakflow.live.receiver"):
        core.receive_data(encode(Gone("default", "s", 1, 0, 15, 0.0)), 0.1)
    events = []
    while (e := core.next_event()) is not None:
        events.append(e)
    assert BeyondHistory(0, 15, "s", 1, 13) in events
    assert core.snapshot(0.1)["beyond_history"] == 13
    assert "no longer in its history" in caplog.text


def test_the_repair_share_is_configurable_and_checked():
    from nakflow import ConfigError

    assert (RepairConfig().share, RepairConfig().share_alone) == (0.25, 1.0)
    for bad in ({"share": 0.0}, {"share_alone": 1.5}):
        with pytest.raises(ConfigError):
            RepairConfig(**bad)


def test_a_stop_inside_the_poll_counts_as_lateness():
    """A process stopped (SIGSTOP) while its I/O thread waits in a poll is not runnable, so
    the scheduler's run_delay misses the stop; the poll's overrun of its timeout does not."""
    from nakflow.live.lateness import Lateness

    lateness = Lateness()
    try:
        lateness.wait_started(100.0, 0.01)
        assert lateness.woke(103.0) >= 2.98  # a 10 ms poll that returned 3 s later
        lateness.wait_started(103.0, 0.05)
        assert lateness.woke(103.02) < 0.01  # returned within its timeout: punctual
    finally:
        lateness.close()


def test_hold_ups_are_discounted_from_frames_sent_before_them():
    """A frame sent before a hold-up waited through it in the socket: that part of its
    delay is the process's. Frames sent after the hold-up ended get no discount."""
    from nakflow.policy.signals import HoldUps

    ups = HoldUps()
    ups.add(0.005, 1.0)  # too short to remember
    ups.add(3.0, 10.0)  # stopped from 7.0 to 10.0
    assert ups.since(6.0) == pytest.approx(3.0)  # sent before: all of it
    assert ups.since(8.5) == pytest.approx(1.5)  # sent during: the rest of it
    assert ups.since(10.5) == 0.0  # sent after
    ups.add(0.5, 20.0)
    assert ups.since(6.0) == pytest.approx(3.5)



def test_a_full_queue_whose_consumer_is_away_for_a_moment_holds_back_what_does_not_fit():
    """A consumer that emptied its queue the last time it ran, then waited for a core while
    data kept coming: the frames that do not fit stay in the socket (the driver reads no
    more), not dropped and fetched again by repair; they come in as it takes. In 1 -> 4
    fan-outs of 1 KB on two cores the survivors' queues of 5,000 overflowed so, 200-4,400
    repaired each in most runs. A consumer away longer than a pause (``PAUSE_S``) is
    paused: its queue drops what does not fit, and repair brings it back later."""
    from nakflow.live.delivery_queue import DeliveryQueue
    from nakflow.policy.signals import PAUSE_S
    from nakflow.wire import encode_data

    core = ReceiverCore(ReceiverConfig(receiver_id="r", capacity_msgs=10), now=0.0)
    q = DeliveryQueue(10, "drop-newest", wake=lambda: None, wake_every=1)
    seq, now = 0, 0.0

    def read(until: int) -> None:
        nonlocal seq, now
        while core.wants_data(q.full) and seq < until:  # the driver reads while it may
            now += 0.001
            core.receive_data(encode_data("default", "s", 1, seq, now, [b"x", b"y"]), now)
            seq += 2
            core.exchange(q, now)

    read(4)
    assert len(q.take(10, 0)) == 4  # it takes all there is: it keeps up when it runs
    now += 0.001
    core.exchange(q, now)
    read(100)  # then it is away, for a few ms
    assert len(q) == 10 and core.dropped == 0 and seq < 30
    assert not core.wants_data(q.full)  # the rest waits in the socket
    got = len(q.take(10, 0))  # back: it takes all, and what waited comes in
    now += 0.001
    core.exchange(q, now)
    read(100)
    assert core.dropped == 0 and got + len(q) + len(core.deliveries()) == seq - 4
    core.exchange(q, now + PAUSE_S)  # away for a pause: paused, not briefly away
    assert core.wants_data(q.full)
    read(140)
    assert core.dropped > 0  # what does not fit is dropped now (repair brings it back)
