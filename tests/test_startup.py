"""NAK's start (``nakflow.policy.startup``): the window of the first round trips, on the
real cores (the simulator's driver, ``simulations.cores``) and on the wire."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from nakflow import NakConfig, ReceiverConfig, ReceiverCore, SenderConfig, SenderCore
from nakflow.policy import delay_rise, first_window, start_rounds, startup
from nakflow.policy.progress import (
    FORGET_S,
    PROGRESS_RATE,
    REPORT_MAX_S,
    REPORT_S,
    ProgressReporter,
    report_interval_us,
)
from nakflow.policy.registry import NakFlow
from nakflow.policy.start_reports import StartReports
from nakflow.policy.startup import RESTART_WINDOW_MSGS, SILENT_S, STALL_S, SlowStart
from nakflow.wire import Data, Hello, Nak, Progress, Receipt, decode, decode_data, encode
from simulations.cores import CoreSimParams, SimLink, simulate_cores


def test_progress_and_a_starting_data_frame_round_trip_and_plain_data_is_unchanged():
    p = Progress("s", "rx", "tx", 3, 120, 900, 4_000.5, 0.0125, 1.5)
    assert decode(encode(p)) == p
    starting = Data("s", "tx", 3, 0, 1.0, (b"a", b"b"), 250, True)
    got = decode_data(encode(starting))  # the hot path leaves it to the full decoder
    assert got == starting and got.startup
    plain = Data("s", "tx", 3, 0, 1.0, (b"a",), 250)
    assert decode_data(encode(plain)) == ("s", "tx", 3, 0, 1.0, [b"a"], 250)
    assert decode(encode(plain)).startup is False


def test_a_starting_sender_with_many_receivers_asks_for_progress_less_often_on_the_wire():
    """``Data.report_us`` (wire revision 7) is a trailing field: DATA that asks for the
    default is byte for byte what revision 6 sent (a receiver of revision 5 or 6 reads
    either and ignores the field), and the sender's framer writes what ``encode`` does."""
    from nakflow.core.framer import Framer
    from nakflow.wire.codec import T_DATA, VERSION, _packb, encode_data

    asks = Data("s", "tx", 3, 0, 1.0, (b"a",), 250, True, 2_000)
    assert decode(encode(asks)) == asks and decode_data(encode(asks)) == asks
    default = Data("s", "tx", 3, 0, 1.0, (b"a",), 250, True)
    assert encode(default) == _packb([VERSION, T_DATA, "s", "tx", 3, 0, 1.0, [b"a"], 250, True])
    assert encode_data("s", "tx", 3, 0, 1.0, [b"a"], 250, True, 2_000) == encode(asks)
    framer = Framer(stream="s", sender_id="tx", epoch=3, mode="nak", mac=None,
                    wall_offset=0.0, max_frame_bytes=1 << 20, history=None)
    framer.grtt_us = 250
    assert framer.data([b"a"], 1.0, 1.0, True, 2_000) == encode(asks)
    assert framer.data([b"a"], 1.0, 1.0, True) == encode(Data("s", "tx", 3, 1, 1.0, (b"a",),
                                                               250, True))
    # how often: REPORT_S up to PROGRESS_RATE x REPORT_S receivers, longer with more
    # (at most REPORT_MAX_S); the start asks for it once they reported
    assert report_interval_us(0) == report_interval_us(50) == 0
    assert report_interval_us(100) == round(100 / PROGRESS_RATE * 1e6) == 2_000
    assert report_interval_us(4_096) == round(REPORT_MAX_S * 1e6)
    st = SlowStart(16, max_rate_msgs=1e6)
    st.allowance(0.0)
    assert st.report_us == 0 and st.stall_s == SILENT_S
    for i in range(1_000):
        st.on_progress(f"r{i}", 1, 500, 0.001, 0.001)
    assert st.report_us == 20_000
    assert st.stall_s == pytest.approx(startup.STALL_REPORTS * 2 * 0.02)  # two intervals


def test_the_window_doubles_a_round_trip_and_stops_at_a_receivers_room():
    st = SlowStart(16, max_rate_msgs=1e6)
    assert st.allowance(0.0) == 16
    st.on_sent(16)
    assert st.allowance(0.0) == 0  # nothing confirmed: nothing more in flight
    st.on_progress("a", 16, 10_000, 0.001, 0.002)
    assert st.allowance(0.002) == 32  # 16 confirmed: the window is 32, none in flight
    st.on_sent(32)
    st.on_progress("b", 8, 10_000, 0.001, 0.003)  # a second receiver, behind
    assert st.allowance(0.003) == 0
    st.on_progress("a", 48, 10_000, 0.001, 0.004)
    assert st.allowance(0.004) == 0  # b holds the window back
    st.on_progress("b", 48, 4, 0.001, 0.005)  # caught up, with room for 4 more only
    assert st.acked == 48 and st.cwnd == 64 and st.allowance(0.005) == 4


def _first_window(size: int, capacities: tuple[int, ...], *, older: int = 0,
                  local: bool = False, host_local: bool | None = None,
                  **nak: object) -> tuple[int, dict[str, object]]:
    """A sender waits for receivers of these queue bounds (and ``older`` more answer its
    HELLO as a receiver of revision 5 does, without their room), then offers messages of
    ``size`` bytes: how many it admits before it waits (its first window), and its start's
    report once that ended. ``local``: its driver says the data endpoints lead to this
    host; ``host_local``: its config says so, or not."""
    tx = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1,
                                 nak=NakConfig(**nak), host_local=host_local),  # type: ignore[arg-type]
                    now=0.0, local=local)
    rxs = [ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id=f"r{i}",
                                       capacity_msgs=cap), now=0.0, rng=random.Random(i))
           for i, cap in enumerate(capacities)]
    link = SimLink([tx], rxs, rng=random.Random(1))
    tx.want_receivers(len(rxs), 0.0)
    while tx.receivers_ready() < len(rxs):
        assert link.now < 0.1, "the receivers did not answer HELLO"
        link.step()
    for i in range(older):  # a receiver of revision 5 answers without its room
        tx.receive_feedback(encode(Hello("s", f"old{i}", "receiver", "nak", 0, 0, "tx",
                                         tx.framer.hello_stamps[-1], receipts=True)), link.now)
        assert f"old{i}" in tx.roster.answered
    tx.want_receivers(0, link.now)
    window, payload = 0, bytes(size)
    while tx.offer(payload, link.now) == 0.0:
        window += 1
    for _ in range(500):  # the start runs to its end; nothing is lost meanwhile
        tx.flush(link.now)
        link.step()
        for q in link.queues:
            q.take(1 << 20, 0)
        while not tx.policy.starting and tx.offer(payload, link.now) == 0.0 and tx.sent < 5e4:
            pass
        if not tx.policy.starting:
            break
    return window, tx.snapshot(link.now)["policy"]["start"]


def test_the_first_window_is_16_kb_within_half_the_room_the_receivers_hello_said():
    """A receiver's HELLO answer says its room (wire revision 6): a sender that heard
    every receiver's sends its first window as 16 KB of its first message's size (16
    messages of 1 KB, as before; 141 of 100 B), within half the least room (two senders
    starting together fill no queue past the share a start may), and never less than
    ``start_window_msgs``. Where a receiver did not say (an older one), or the option is
    off, the window in messages."""
    room = int(10_000 * 0.4)
    per = 100 + first_window.MSG_OVERHEAD_BYTES
    assert _first_window(100, (10_000, 10_000))[0] == 16_384 // per
    assert _first_window(1_000, (10_000,))[0] == 16
    assert _first_window(100, (10_000, 500))[0] == 500 * 4 // 10 // 2  # half the least room
    assert _first_window(100, (10_000, 50))[0] == 16  # never below start_window_msgs
    assert _first_window(100, (10_000, 10_000), older=1)[0] == 16
    assert _first_window(100, (10_000,), start_window_bytes=None)[0] == 16
    assert _first_window(10, (10_000,), start_window_bytes=1 << 20)[0] == room // 2
    window, report = _first_window(100, (10_000, 10_000, 10_000))
    assert report["first_window"] == window == 141 and report["ended"] is not None
    hello = Hello("s", "r1", "receiver", "nak", 0, 0, "tx", 1.0, receipts=True, room=4_000)
    assert decode(encode(hello)) == hello
    assert decode(encode(Hello("s", "r1", "receiver", "nak", 0, 0, "tx", 1.0))).room == 0


def test_a_start_on_one_host_sends_half_the_least_room_at_once():
    """A path that stays on this host (loopback, ipc, inproc) has no link to overshoot,
    only the receivers' sockets and queues, whose room bounds the window as ACK's credit
    does: the first window is half the least room said (two senders starting together
    fill no queue past the 40 % a start may), not 16 KB, and never below
    ``start_window_msgs``. The config's ``host_local`` overrides the driver's judgement
    (a tunnel on loopback to another host), both ways; a receiver that did not say its
    room, or the option off, leaves the window in messages."""
    room = int(10_000 * 0.4)
    assert _first_window(1_000, (10_000, 10_000), local=True)[0] == room // 2
    assert _first_window(100, (10_000, 500), local=True)[0] == 500 * 4 // 10 // 2
    assert _first_window(100, (10_000, 50), local=True)[0] == 16
    assert _first_window(1_000, (10_000,), local=True, host_local=False)[0] == 16
    assert _first_window(1_000, (10_000,), host_local=True)[0] == room // 2
    assert _first_window(1_000, (10_000,), local=True, older=1)[0] == 16
    assert _first_window(1_000, (10_000,), local=True, start_window_bytes=None)[0] == 16
    window, report = _first_window(1_000, (10_000, 10_000, 10_000), local=True)
    assert report["first_window"] == window == room // 2 and report["ended"] is not None


def _slow_queue(st: SlowStart, *, depth: float = 0.0,
                backlog: bool = False) -> tuple[float, int, int]:
    """Drive ``st`` for 0.5 s at most against one receiver 1 ms away: a queue of 39 (room
    to its 40 % mark: 15), ``depth`` deep at first, whose consumer takes 156 msgs/s;
    ``backlog``: once a quarter full, its PROGRESS says that rate, as a receiver's does.
    Returns (the queue's peak, messages it dropped, messages that arrived)."""
    t, seq, flight, peak, dropped = 0.0, 0, [], depth, 0
    while not st.done and t < 0.5:
        t = round(t + 0.001, 6)
        while flight and flight[0][0] <= t:  # arrivals, 1 ms after they went
            n = flight.pop(0)[1]
            took = min(n, int(39 - depth))
            seq, depth, dropped = seq + n, depth + took, dropped + n - took
        depth = max(0.0, depth - 0.156)  # the consumer
        peak = max(peak, depth)
        st.on_progress("slow", seq, max(0, 15 - int(depth)), 0.0005, t,
                       156.0 if backlog and 4 * depth >= 39 else 0.0)
        n = st.allowance(t)
        st.on_sent(n)
        if n:
            flight.append((t + 0.001, n))
    return peak, dropped, seq


def test_a_queue_at_its_mark_holds_the_start_below_the_ramps_round_trip():
    """The window is never less than a round trip of the ramp it replaces (a long path
    over short queues), but a queue that says it has no room left holds it: a consumer of
    156 msgs/s behind a queue of 39 (room to its 40 % mark: 15), 1 ms away. Before, the
    ramp's round trip (5-13 messages) went out past the room each time one arrived:
    sending at the arrival rate, the start put 102-177 messages into that queue in
    0.05-0.15 s and it dropped 142-151 of a 198-message run (all repaired)."""
    st = SlowStart(16, max_rate_msgs=1e6, ramp=(5_000.0, 1.25, 0.05))
    st.set_rtt(0.001)
    peak, dropped, seq = _slow_queue(st)
    assert peak <= 16 and dropped == 0  # the first window, never more than the room after
    assert st.sent <= seq + 16


def test_a_queue_another_sender_filled_first_holds_the_start_below_the_ramps_round_trip():
    """The same queue, 20 deep with another sender's first window before this one's first
    PROGRESS: that says no room, and later room for 1 at most. Before, "below half the
    most it reported" never held for a most of 0 or 1: the ramp's round trip went out
    each time the receiver's position moved, and it moves as the queue drops what arrives
    (two fresh senders to that queue and two more after them: 183 and 247 dropped in two
    traced runs, all repaired). A queue a quarter full reports its consumer's rate (a
    backlog): that holds the floor too."""
    st = SlowStart(16, max_rate_msgs=1e6, ramp=(5_000.0, 1.25, 0.05))
    st.set_rtt(0.002)
    _peak, dropped, seq = _slow_queue(st, depth=20.0, backlog=True)
    assert st.reports.most_room["slow"] <= 1  # it never had room for more than 1
    assert dropped == 0 and st.sent <= seq + 16


def test_what_arrives_in_a_queue_with_room_is_not_the_rate_the_limit_starts_at():
    """A receiver behind a link of 30 msgs a ms whose consumer takes 5 a ms, its queue
    with room for 800: the rounds deliver at the link's rate, flat (a full pipe), while
    the queue fills. What arrived is no rate to go on at: the limit starts at what the
    queue took (its room's edge moved). CI saw a start end at 17,000 msgs/s for a 5,000
    msgs/s consumer, and the queue run full after it."""
    st = SlowStart(16, max_rate_msgs=1e6)
    t, seq, depth = 0.0, 0, 0
    while not st.done and t < 1.0:
        t += 0.001
        st.on_sent(st.allowance(t))
        assert st.allowance(t) == 0  # the sender would send more
        arrived = min(30, st.sent - seq)
        taken = min(5, depth + arrived)
        seq, depth = seq + arrived, depth + arrived - taken
        st.on_progress("a", seq, max(0, 800 - depth), 0.0005, t)
    assert st.why == "full" and st.rounds.bws[-2] == pytest.approx(30_000)  # the link's rate
    assert st.delivery_rate == pytest.approx(5_000)
    assert st.outcome(1_000.0) == (pytest.approx(startup.DRAIN * 5_000), pytest.approx(5_000),
                                   False)  # the queue drains below its consumer's rate


def test_a_long_path_over_short_queues_that_keep_up_ramps_on_after_the_start():
    """50 ms round trips, consumers that take all that comes, queues with room for 800:
    the room holds the window at 800 a round trip (16,000 msgs/s), flat. No pipe is full
    and no queue fills: the rate limit ramps on from there (it stayed at 0.9 of it and
    crept up the CUBIC curve: the latency sweep's 50 ms RTT fell from 46,610 msgs/s to
    35,466)."""
    st = SlowStart(16, max_rate_msgs=1e6)
    st.set_rtt(0.05)
    t, flight = 0.0, []  # (arrives at, seq)
    seq = 0
    while not st.done and t < 2.0:
        t = round(t + 0.001, 6)
        n = st.allowance(t)
        st.on_sent(n)
        st.allowance(t)  # the sender would send more
        if n:
            flight.append((t + 0.05, st.sent))  # the round trip (the answer: at once)
        while flight and flight[0][0] <= t:
            seq = flight.pop(0)[1]
        st.on_progress("a", seq, 800, 0.05, t)  # its queue is empty: room for 800
    assert st.why == "full" and st.room_held
    rate, plateau, ramp = st.outcome(1_000.0)
    assert ramp and rate == plateau == pytest.approx(16_000, rel=0.1)


def test_a_rate_from_a_message_or_two_a_round_is_a_guess_and_the_limit_ramps_on():
    """A full pipe or a delay rise whose last rounds confirmed fewer than FULL_MIN_MSGS
    (two tasks starting on ``nakflow eval``'s slow receiver: a message or two a 10 ms
    round) gives no rate to settle under: the limit ramps on from it, as before the
    start, and the receivers' NAKs find the share. Settled there, one task sat at 58 of
    its 78 msgs/s share for 2 s, another at 40 and took 4.3 s for its 198 messages.
    Over enough messages the rate stands, and the limit starts below it (the slow
    queue filling: room for 5 where it said 15)."""
    for why in ("full", "delay"):
        st = SlowStart(16, max_rate_msgs=1e5)
        st.done, st.why = True, why
        st.reports.report("slow", 0, 15, 0.0, 0)
        st.reports.report("slow", 0, 5, 0.0, 0)
        assert st.filling
        report = st.snapshot(0.0)  # the report says what chose the hand-over
        assert (report["filling"], report["take"]) == (True, None), report
        st.rounds.bws, st.rounds.msgs = [60.0, 55.0, 59.0], [1, 1, 1]
        assert not st.rounds.measured
        rate, plateau, ramp = st.outcome(5_000.0)
        assert ramp and rate == plateau == pytest.approx(60.0 if why == "delay" else 58.0)
        st.rounds.msgs = [1, 1, start_rounds.FULL_MIN_MSGS]
        assert st.rounds.measured
        rate, plateau, ramp = st.outcome(5_000.0)
        assert not ramp and rate == pytest.approx(startup.DRAIN * plateau)


def test_a_full_pipe_with_nothing_queued_ramps_on_and_one_with_a_queue_settles():
    """A full pipe where no delay rise stands, no queue is filling and none reports a
    backlog is what the sender and its receivers get of the CPU: the limit ramps on from
    the delivery rate. A delay rise standing (a slow link's queue), a filling queue (room
    for 900 where it said 4,000) or a backlog (its consumer's rate): DRAIN below it."""
    def ended(rise: bool = False, room: int = 4_000, take: float = 0.0) -> tuple:
        st = SlowStart(16, max_rate_msgs=1e6)
        st.done, st.why = True, "full"
        st.rounds.bws, st.rounds.msgs = [200_000.0, 210_000.0, 205_000.0], [2_000] * 3
        st.reports.report("rx", 0, 4_000, 0.0, 0)
        st.reports.report("rx", 0, room, take, 0)
        if rise:
            st.rise.css_rounds = 1
        return st.outcome(5_000.0)

    bw = (200_000 + 210_000 + 205_000) / 3
    assert ended() == pytest.approx((bw, bw, True))
    for settled in (ended(rise=True), ended(room=900), ended(take=50_000.0)):
        rate, plateau, ramp = settled
        assert not ramp and rate == pytest.approx(startup.DRAIN * plateau)
    assert ended(take=50_000.0)[1] == 50_000.0  # no higher than its consumer takes


def test_a_start_the_sender_limited_ramps_on_from_twice_what_it_sent():
    """Rounds the sender did not fill (it sent 20 msgs a ms, a window allowed more) and no
    queue filling: the start measured the sender, not the path, and the limit ramps on
    from twice that rate (a sender warming up on loopback measured 47,646 msgs/s, and
    the limit held it below the 100,000-120,000 it sent later for 0.3 s). A receiver
    that reports a backlog (its consumer's rate) is a limit of the path: from that rate."""
    for backlog in (False, True):
        st = SlowStart(16, max_rate_msgs=1e7)
        st.set_rtt(0.001)
        t, flight, seq = 0.0, [], 0
        while not st.done and t < 1.0:
            t = round(t + 0.001, 6)
            n = min(20, st.allowance(t))  # the application has 20 a ms to send
            st.on_sent(n)
            flight.append((t + 0.001, st.sent))
            while flight and flight[0][0] <= t:
                seq = flight.pop(0)[1]
            st.on_progress("a", seq, 10**6, 0.001, t, 15_000.0 if backlog else 0.0)
        assert st.why == "unfilled"
        assert st.delivery_rate == pytest.approx(15_000.0 if backlog else 20_000.0, rel=0.1)
        rate, plateau, ramp = st.outcome(5_000.0)
        gain = 1.0 if backlog else startup.UNFILLED_GAIN
        assert ramp and rate == plateau == pytest.approx(gain * st.delivery_rate)


def _delayed(delay_at, until: float = 1.0, *, local: bool = False) -> SlowStart:
    """A start over a path of 10 msgs a ms (reported each ms) whose one-way delay at
    ``t`` is ``delay_at(t)``, the sender always wanting more; till it ends or ``until``.
    The full-pipe rule is off (the path's rate is flat): the delay rules alone.
    ``local``: the path stays on this host."""
    st = SlowStart(16, max_rate_msgs=1e6, local=local)
    st.rtt_s = 0.002
    t, seq = 0.0, 0
    while not st.done and t < until:
        t += 0.001
        st.on_sent(st.allowance(t))
        assert st.allowance(t) == 0  # the sender would send more: the window holds it
        seq = min(st.sent, seq + 10)
        st.on_progress("a", seq, 10**9, delay_at(t), t)
    return st


def test_a_delay_rise_that_lasts_ends_the_start_below_the_rate_it_delivered(monkeypatch):
    monkeypatch.setattr(start_rounds, "FULL_ROUNDS", 10**6)
    st = _delayed(lambda t: 0.001 if t < 0.015 else 0.030)
    # the rise is seen within the round after it (>= 8 reports), then slower growth for
    # CSS_ROUNDS rounds or CSS_MAX_S before it ends the start
    assert st.why == "delay" and st.rise.spurious == 0
    assert st.ended_at is not None and st.ended_at < 0.015 + 0.025 + delay_rise.CSS_MAX_S + 0.02
    # the first sign came at the rise, before the end: the report says when, and what
    # had gone out by then
    assert st.rise_at is not None and 0.015 < st.rise_at < st.ended_at
    assert st.rise_sent is not None and 0 < st.rise_sent < st.ended_sent
    report = st.snapshot(0.0)
    assert (report["rise_s"], report["sent_at_rise"]) == (round(st.rise_at, 6), st.rise_sent)
    assert report["in_flight_at_rise"] == st.rise_sent - st.rise_acked  # not yet confirmed
    assert st.rise_acked is not None and 0 < st.rise_acked < st.rise_sent
    rate, plateau, ramp = st.outcome(5_000.0)
    assert not ramp and rate == pytest.approx(startup.DRAIN * plateau)
    assert plateau == pytest.approx(st.delivery_rate) and 5_000 < plateau < 15_000


def test_a_delay_rise_on_one_host_ramps_on_from_twice_the_rate_unless_a_queue_fills(
        monkeypatch):
    """On a path that stays on this host no link queues: a delay rise that lasts is the
    receivers' processes behind on the CPU they share with the sender, and the rounds
    measured that share, no capacity. The start still ends on it, and the limit ramps on
    from UNFILLED_GAIN times the delivery rate, as where the sender limited the start (W8
    on loopback: starts ending on a delay rise ran at 0.955-0.97 of ACK's rate, at
    1.005 so). A queue that fills, or a consumer that reports a backlog, is a limit of
    the path even there: DRAIN below its rate, as on any path."""
    monkeypatch.setattr(start_rounds, "FULL_ROUNDS", 10**6)
    st = _delayed(lambda t: 0.001 if t < 0.015 else 0.030, local=True)
    assert st.why == "delay"
    rate, plateau, ramp = st.outcome(5_000.0)
    assert ramp and rate == plateau == pytest.approx(startup.UNFILLED_GAIN * st.delivery_rate)
    st = _delayed(lambda t: 0.001 if t < 0.015 else 0.030, local=True)
    st.reports.said_rate("a", 4_000.0)  # its consumer, backlogged, takes 4,000 msgs/s
    rate, plateau, ramp = st.outcome(5_000.0)
    assert not ramp and rate == pytest.approx(startup.DRAIN * plateau) and plateau <= 4_000


def test_a_delay_rise_that_falls_back_is_spurious_and_the_start_goes_on(monkeypatch):
    """A receiver descheduled for 25 ms: its delay rises, then falls below what it rose
    to; the start goes on growing at full speed (HyStart++'s CSS)."""
    monkeypatch.setattr(start_rounds, "FULL_ROUNDS", 10**6)
    st = _delayed(lambda t: 0.030 if 0.015 <= t < 0.040 else 0.0005, until=0.2)
    assert not st.done and st.rise.spurious == 1 and st.rise.css_rounds is None
    assert st.rise_at is not None and 0.015 < st.rise_at < 0.045  # it was a sign all the same


def test_a_delay_rise_ends_the_start_on_time_however_few_reports_follow_it():
    """A slow link's reports come in bursts (50 ms apart in the lab): a rise seen, the
    start ends CSS_MAX_S later on its timer, not at the next report."""
    st = SlowStart(16, max_rate_msgs=1e6)
    t = 0.0
    for i in range(2 * delay_rise.DELAY_SAMPLES):
        t = (i + 1) / 1000
        st.on_sent(st.allowance(t))
        st.on_progress("a", i + 1, 10**6, 0.001 if i < delay_rise.DELAY_SAMPLES else 0.030, t)
    assert st.rise.css_rounds == 0 and not st.done  # the rise: growth slows, no more
    end = st.deadline()
    assert end == pytest.approx(t + delay_rise.CSS_MAX_S)
    assert not st.check(end - 0.001) and st.check(end) and st.why == "delay"


def test_a_rise_in_few_reports_is_seen_a_round_after_it_not_eight_reports_after():
    """The lab's tcp run (8 Mbit/s link, RTT 1 ms): the receiver behind the link reported
    this (ms after the first DATA, least delay in ms). Its queue shows from the 4th
    report; 8-report blocks saw it at the 16th, 100 ms in. A block that also closes a
    round (ROUND_MIN_S) after its first report, with DELAY_MIN_SAMPLES, sees it at the
    9th, 29 ms in."""
    at = [3, 4, 7, 19, 22, 23, 25, 27, 29, 46]
    delay = [2.0, 1.5, 0.1, 13.5, 13.8, 15.1, 15.8, 16.5, 9.0, 25.6]
    rise = delay_rise.DelayRise()
    rise.rtt_s = 0.001
    seen = None
    for t, d in zip(at, delay, strict=True):
        assert not rise.sample("rx3", d / 1000, t / 1000)
        if seen is None and rise.css_rounds is not None:
            seen = t
    assert seen == 29 and rise.deadline() == pytest.approx(0.029 + delay_rise.CSS_MAX_S)
    assert rise.max_rise == pytest.approx(0.0134)  # the block 19-27 ms over 0.1 ms


def test_a_confirmation_whose_delay_is_up_grows_the_window_a_quarter_as_fast():
    st = SlowStart(16, max_rate_msgs=1e6)
    st.on_sent(st.allowance(0.0))
    st.on_progress("a", 8, 10**6, 0.001, 0.001)
    assert st.cwnd == 24  # by what it confirmed
    st.on_sent(st.allowance(0.001))
    st.on_progress("a", 12, 10**6, 0.030, 0.002)  # 29 ms above its least: suspect
    assert st.cwnd == 24 + 4 / delay_rise.CSS_DIVISOR
    # a report of fewer than DELAY_SAMPLES messages is no rise: the start goes on
    assert st.rise.css_rounds is None
    st.on_progress("a", 16, 10**6, 0.0012, 0.003)  # back down: full speed again
    assert st.cwnd == 25 + 4
    assert st.rise.css_rounds is None


def test_a_report_is_as_many_samples_as_messages_it_confirms():
    """The lab's tcp run (8 Mbit/s link, 1 KB, RTT 1 ms): the receiver behind the link
    reported this (ms after the start, the seq it got to, its least delay in ms). A frame
    of 40 messages takes 40 ms to cross the link and comes as one report; counted as one
    sample, the rise was seen at the 8th report, 94 ms in, after 179 messages were sent.
    Counted as the 40 it confirms (each message's delay is at least that), it is seen at
    35.7 ms, when 64 had been sent. The two reports before it (2 messages) are judged a
    round on, not added to its block: their least is low, and a low least is no noise."""
    reports = [(3.0, 1, 1.231), (5.0, 20, 3.173), (6.2, 21, 3.164), (7.3, 22, 3.215),
               (35.7, 62, 27.294), (39.9, 64, 29.161), (91.5, 114, 53.690),
               (94.3, 116, 52.260)]
    rise = delay_rise.DelayRise()
    rise.rtt_s = 0.001
    seen, seq, ended = None, 0, None
    for t, upto, d in reports:
        if rise.sample("rx3", d / 1000, t / 1000, upto - seq):
            ended = t
            break
        seq = upto
        if seen is None and rise.css_rounds is not None:
            seen = t
    assert seen == 35.7 and rise.deadline() == pytest.approx(0.0357 + delay_rise.CSS_MAX_S)
    assert ended == 91.5  # still up: the first report past CSS_MAX_S ends the start
    # few messages a rise is not: 2 reports of 1 message each 30 ms over, then low
    rise = delay_rise.DelayRise()
    for i, d in enumerate([1.0] * 8 + [31.0, 31.0] + [1.1] * 8):
        rise.sample("rx", d / 1000, i / 1000)
    assert rise.css_rounds is None and rise.max_rise < 0.004


def test_after_a_delay_rise_the_rate_is_the_bottlenecks_not_a_token_buckets_burst():
    """A link of 1 msg a ms behind a token bucket of 30 (the lab's tbf passes 32 KB at
    once): the round before the rise carried the burst (3,727 msgs/s here). The limit
    starts from the rounds since the rise, the link's rate; from the last rounds it
    started at 2,000 msgs/s over the lab's 950."""
    st = SlowStart(16, max_rate_msgs=1e6)
    st.set_rtt(0.001)
    t, tokens, queue, seq = 0.0, 30.0, [], 0
    while not st.done and t < 1.0:
        t = round(t + 0.001, 6)
        n = st.allowance(t)
        st.on_sent(n)
        queue += [t] * n  # when each message waiting at the link was sent
        tokens = min(30.0, tokens + 1.0)
        k = min(int(tokens), len(queue))
        if k:
            tokens -= k
            last = queue[k - 1]
            del queue[:k]
            seq += k
            st.on_progress("rx", seq, 2_000, 0.0005 + t - last, t)
    assert st.why == "delay" and max(st.rounds.bws) > 3_000  # a round measured the burst
    assert st.delivery_rate == pytest.approx(1_000, rel=0.1)
    assert st.outcome(5_000.0)[0] == pytest.approx(startup.DRAIN * st.delivery_rate)


def test_a_frame_read_and_not_yet_taken_is_no_consumers_rate():
    """What the slowest queue took bounds the rate only once a queue is a quarter full:
    a receiver that had read one frame of 44 its consumer had not yet taken when the
    round ended (room 1,956 of 2,000) reported a take of 132 msgs/s, and the lab's run
    went at 722 msgs/s over a link of 950."""
    st = SlowStart(16, max_rate_msgs=1e6)
    t, seq, room = 0.0, 0, 2_000
    for i in range(5):  # a round each, the window doubling to 256
        t = (i + 1) * 0.011
        st.on_sent(st.allowance(t))
        assert st.allowance(t) == 0  # the sender would send more
        grown, seq = st.sent - seq, st.sent
        if i == 4:  # the last round's frame is read, all but 4 of it not yet taken
            room = 2_000 - (grown - 4)
        st.on_progress("rx", seq, room, 0.001, t)
    assert st.rounds.took[-1] == pytest.approx(4 / 0.011) and st.rounds.bws[-1] > 20_000
    assert not st.filling and st.delivery_rate == st.rounds.bws[-1]
    st.on_progress("rx", seq, 1_400, 0.001, t + 0.001)  # now a quarter full: it holds
    assert st.filling


def test_a_window_goes_out_as_frames_an_eighth_of_it_and_the_limit_frames_as_set():
    """In the start a DATA frame holds an eighth of the window at most, so a receiver
    behind a slow link reports DELAY_SAMPLES times a round; after it, ``frame_msgs``."""
    core = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1,
                                   linger_s=0.01), now=0.0)
    sent = 0
    while core.offer(b"x", 0.0) == 0.0:
        sent += 1
    core.flush(0.0)
    data = [f for f in map(decode, core.outbox) if type(f) is Data]
    window = NakConfig().start_window_msgs
    assert sent == window and sum(len(f.payloads) for f in data) == window
    # the first at once (the sender was idle), the rest an eighth of the window a frame
    assert max(len(f.payloads) for f in data) == window // delay_rise.DELAY_SAMPLES
    assert len(data) > window // delay_rise.DELAY_SAMPLES
    core.handle_timer(SILENT_S)  # nobody answered: the start is over
    assert not core.policy.starting and core.policy.frame_msgs(256) == 256


def test_the_start_keeps_to_the_senders_ceiling():
    """``max_rate`` (NakConfig.max_rate_msgs) holds during the start too: its window, up to
    a second of that rate, went out at once on loopback (176,624 msgs/s under
    --max-rate 20000, a CI run over epgm)."""
    flow = NakFlow("s", NakConfig(max_rate_msgs=20_000))
    flow.use_startup()
    flow.set_rtt(0.0002)
    sent, t, waits = 0, 0.0, []
    while t < 0.1:
        t = round(t + 0.0005, 6)
        k, wait = flow.admit(50, now=t)  # a batch within the burst
        sent += k
        if k < 50:
            waits.append(wait)
        flow.on_progress(Progress("s", "rx", "tx", 1, sent, 10**6, 0.0, 0.0001, t), now=t)
    # the ceiling, not the window, held it: its rounds were not filled, and it ended so
    assert flow.start_report is not None and flow.start_report["ended"] == "unfilled"
    # at most each bucket's burst above the ceiling (the start's, then the limit's)
    assert 0.9 * 20_000 * 0.1 <= sent <= 20_000 * 0.1 + flow.cap.capacity + flow.bucket.capacity
    # held back by the ceiling for a moment at a time (inf: the first window, waiting
    # for the receiver's first word)
    finite = [w for w in waits if w != float("inf")]
    assert finite and all(0 < w <= 0.0025 for w in finite)


def test_the_start_tells_the_probe_the_smallest_queue_its_receivers_reported():
    """What the receivers' PROGRESS said of their queues' room (the most each reported)
    bounds how fast the limit probes after the start: the smallest of them. A start no
    receiver answered knows no queue, and the limit does not probe."""
    flow = NakFlow("s", NakConfig(max_rate_msgs=20_000))
    flow.use_startup()
    flow.set_rtt(0.0002)
    sent, t = 0, 0.0
    while flow.starting and t < 0.5:
        t = round(t + 0.0005, 6)
        sent += flow.admit(50, now=t)[0]
        for rx, room in (("big", 10**6), ("small", 3_000)):
            flow.on_progress(Progress("s", rx, "tx", 1, sent, room, 0.0, 0.0001, t), now=t)
    assert flow.start_report is not None and flow.start_report["receivers"] == 2
    assert flow.controller.probe_room == 3_000
    silent = NakFlow("s", NakConfig())
    silent.use_startup()
    silent.set_rtt(0.0002)
    t = 0.0
    while silent.starting and t < 1.0:
        t = round(t + 0.001, 6)
        silent.admit(50, now=t)
    assert silent.start_report is not None and silent.start_report["ended"] == "silent"
    assert silent.controller.probe_room is None


def test_a_stream_that_ends_in_its_start_hands_on_what_the_start_measured():
    """The rate a sender leaves the next one on its path (``remember_rate``: a Spark
    task's successor in its worker) when its stream ended inside its start: the window
    paced it there, and the limit still stood where slow start would begin (5,000
    msgs/s and a step or two). Handing that on left a task 39 msgs/s (5,000 rows/s in
    Arrow messages of 128) where the path carried 2,000, and that task, which skips its
    start for a remembered rate, ramped for 0.76 s. What the start measured is handed
    on, no more than was really sent at; a start that measured nothing hands on
    nothing (the next sender starts for itself)."""
    flow = NakFlow("s", NakConfig())
    flow.use_startup()
    flow.set_rtt(0.01)
    sent, t, flight = 0, 0.0, []
    while t < 0.08:  # 100,000 msgs/s offered, confirmed 10 ms later
        t = round(t + 0.0005, 6)
        sent += flow.admit(50, now=t)[0]
        flight.append((t + 0.01, sent))
        acked = max((n for at, n in flight if at <= t), default=0)
        flow.on_progress(Progress("s", "rx", "tx", 1, acked, 10**6, 0.0, 0.005, t), now=t)
    assert flow.starting  # the stream ends here, inside its start
    handed, peak = flow.validated_rate(now=t), flow.controller.sent_peak
    assert handed is not None and peak is not None
    assert handed <= peak  # no faster than it really sent
    assert handed > 2 * flow.controller.rate(now=t)  # not the limit it never used
    assert handed == pytest.approx(min(flow.start.delivery_rate, peak))
    quiet = NakFlow("s", NakConfig())  # its receivers never answered
    quiet.use_startup()
    quiet.admit(50, now=0.001)
    quiet.admit(50, now=0.06)
    assert quiet.starting and quiet.controller.sent_peak is not None
    assert quiet.validated_rate(now=0.06) is None


def test_a_stream_over_inside_its_first_rounds_on_one_host_hands_on_what_was_confirmed():
    """On one host the first window is half the receivers' room, and a short stream can
    be over before its start closes a round: 20,000 messages of 50 B from an asyncio
    sender to a receiver in its process went in 22 ms and handed the next sender
    nothing. What its receivers confirmed over it is handed on there (no faster than it
    was really sent); over a network, where a first burst may be a token bucket's, still
    nothing (the next sender starts for itself)."""
    for local in (True, False):
        flow = NakFlow("s", NakConfig())
        flow.host_local = local
        flow.use_startup()
        flow.start.first.on_hello(4_000)
        flow.size_hint(50)
        flow.set_rtt(0.001)
        sent = flow.admit_up_to(10**6, now=0.0)
        assert sent == (2_000 if local else 16_384 // (50 + first_window.MSG_OVERHEAD_BYTES))
        t, acked = 0.0, 0
        for _ in range(8):  # reports each ms, the window refilled: no round is over
            t = round(t + 0.001, 6)
            acked = sent
            flow.on_progress(Progress("s", "rx", "tx", 1, acked, 4_000, 0.0, 0.001, t), now=t)
            sent += flow.admit_up_to(10**6, now=t)
        assert flow.starting and flow.start.rounds.count == 0
        handed = flow.validated_rate(now=t)
        if local:
            assert handed == pytest.approx(acked / t)
        else:
            assert handed is None


def test_a_stream_over_before_the_meter_s_first_period_hands_on_its_start_s_rate():
    """A start that ended (here unfilled, 41 ms in) and a stream over within the send
    meter's first period (50 ms): the limit has no rate really sent at to validate, but
    the start measured the path, and that is handed on. Before, nothing was (an asyncio
    sender of 20,000 messages on loopback, in CI), and the next began at 5,000 msgs/s."""
    flow = NakFlow("s", NakConfig())
    flow.use_startup()
    flow.set_rtt(0.0005)
    sent, t, acked = 0, 0.0, 0.0
    while flow.starting and t < 0.045:
        t = round(t + 0.0002, 6)
        sent += max(0, flow.admit(50, now=t)[0])
        acked = min(sent, acked + 10.0)  # confirmed at 50,000 msgs/s
        flow.on_progress(Progress("s", "rx", "tx", 1, int(acked), 10**6, 0.0, 0.0003, t),
                         now=t)
    assert not flow.starting and flow.start_report is not None
    measured = flow.start_report["delivery_rate"]
    sent += max(0, flow.admit(50, now=t + 0.001)[0])  # its last messages
    assert flow.controller.sent_peak is None  # no meter period is over
    assert flow.validated_rate(now=t + 0.002) == pytest.approx(measured, rel=0.01)
    assert measured == pytest.approx(50_000, rel=0.05)  # what the receiver confirmed


def test_a_nak_in_the_start_cuts_from_what_was_sent_no_higher_than_consumers_take():
    """A 200 ms path whose window doubles past what the consumers take (50,000 msgs/s,
    reported once their queues backed up): the NAK that ends the start cuts from the
    rate really sent, bounded by that take, not from the delivery rate, which lags a
    round (12,075 msgs/s here; the latency sweep's 200 ms point sat at 29,657 under its
    NAKs, which could not cut below it, and lost 7 % of its rate to the start)."""
    flow = NakFlow("s", NakConfig(max_rate_msgs=200_000))
    flow.use_startup()
    flow.set_rtt(0.2)
    sent, hist, t = 0, [], 0.0
    while flow.starting and sent <= 20_000 and t < 2.0:
        t = round(t + 0.001, 6)
        sent += flow.admit_up_to(100_000, now=t)
        hist.append((t, sent))
        seen = max((s for u, s in hist if u <= t - 0.2), default=0)  # a round trip ago
        take = 50_000.0 if seen > 5_000 else 0.0
        flow.on_progress(Progress("s", "rx", "tx", 1, seen, 10**6, take, 0.1, t), now=t)
    assert flow.start is not None
    lagging, really_sent = flow.start.delivery_rate, flow.controller.send_rate(now=t)
    assert really_sent is not None and lagging < 50_000 < really_sent
    flow.on_feedback(Nak("s", "rx", 87, 87.0, t, 1, 50_000.0), now=t)
    assert flow.start_report is not None and flow.start_report["ended"] == "nak"
    share = NakConfig().rate_shares[87]
    assert flow.controller.cuts == 1
    assert flow.controller.rate(now=t) == pytest.approx(share * 50_000)


def test_a_nak_before_anything_was_sent_starts_the_limit_at_the_rate_it_reports():
    """A second task starts while the first's traffic holds the slow receiver's queue at
    its first NAK level: a NAK (its consumer takes 78 msgs/s from each of the two senders)
    ends this start before it sent a message. Nothing measured, the limit went on at
    start_rate_msgs, 5,000 msgs/s into a queue of 39, and the receiver dropped 172 in
    0.1 s (all repaired). The rate the NAK reports bounds where the limit starts."""
    flow = NakFlow("s", NakConfig())
    flow.use_startup()
    flow.set_rtt(0.001)
    assert flow.starting
    # in its start the window paces the sender: no rate limit to report (one that ended
    # there reported the 5,000 msgs/s the limit would have begun at)
    assert (flow.snapshot()["rate_limit"], flow.snapshot()["starting"]) == (None, True)
    flow.on_feedback(Nak("s", "slow", 50, 52.0, 0.0, 1, 78.0), now=0.0)
    assert flow.snapshot()["rate_limit"] == pytest.approx(78.0)
    assert not flow.snapshot()["starting"]
    assert flow.start_report is not None and flow.start_report["ended"] == "nak"
    assert flow.start_report["limit_from"] == pytest.approx(78.0)
    assert flow.start_report["take"] == pytest.approx(78.0)  # what it went by
    assert not flow.start_report["ramps_on"]
    assert flow.controller.rate(now=0.0) <= 78.0
    assert flow.controller.rate(now=0.3) < 100.0  # no ramp from 5,000 either


def test_a_delay_rise_with_nothing_confirmed_after_it_starts_at_what_the_start_confirmed():
    """A delay rise whose CSS ran out with nothing confirmed after it (the queue another
    sender holds at its mark has no room, so nothing more was sent): the rate since the
    rise is 0, and the limit went on at start_rate_msgs, 5,000 msgs/s into a queue of
    39 (68 dropped in 13 ms). What the whole start confirmed stands instead."""
    st = SlowStart(16, max_rate_msgs=1e6)
    st.t0, st.acked, st.sent, st.rounds.count = 0.0, 16, 16, 2
    st.rounds.bws, st.rounds.msgs = [800.0, 400.0], [8, 8]
    st._css_from = (1, 0.02, 16)  # the rise: after round 1, 16 confirmed by then
    st.end("delay", 0.07)
    assert st.delivery_rate == pytest.approx(16 / 0.07)
    rate, plateau, ramp = st.outcome(5_000.0)
    assert not ramp and plateau == pytest.approx(16 / 0.07)
    assert rate == pytest.approx(startup.DRAIN * 16 / 0.07)


def test_a_queue_nak_from_the_receiver_whose_room_holds_the_start_does_not_end_it():
    """Two fresh senders to a queue of 39 (room to its mark: 15) whose consumer is not
    measured yet: their first windows take it past 50 %, and the NAK, with no rate to
    say, ended both starts at the rate their first 16-19 messages arrived at (866-1,871
    msgs/s for a consumer of 156): 55-137 dropped. The receiver's room holds the window
    already; its NAK(50) is counted and held, and the start goes on. A NAK from a queue
    that is full (100), from a receiver whose room does not hold the window, or one that
    says its consumer's rate (the limit can start at that), ends it."""
    def starting_flow() -> NakFlow:
        flow = NakFlow("s", NakConfig())
        flow.use_startup()
        flow.set_rtt(0.001)
        assert flow.admit_up_to(100, now=0.0) == 16  # the first window
        for rx, room in (("slow", 0), ("fast", 1_000)):  # slow: no room past seq 16
            flow.on_progress(Progress("s", rx, "tx", 1, 16, room, 0.0, 0.0005, 0.001),
                             now=0.001)
        return flow

    flow = starting_flow()
    flow.on_feedback(Nak("s", "slow", 50, 55.0, 0.002, 1), now=0.002)
    assert flow.starting and flow.controller.naks_received == {50: 1}
    assert flow.attribution.snapshot(t0=0.0)["holds_by_signal"] == {"queue": 1}
    assert flow.admit_up_to(100, now=0.003) == 0  # its room still holds it
    flow.on_feedback(Nak("s", "slow", 100, 100.0, 0.004, 1), now=0.004)
    assert not flow.starting and flow.start_report["ended"] == "nak"
    flow = starting_flow()
    flow.on_feedback(Nak("s", "fast", 50, 55.0, 0.002, 1), now=0.002)
    assert not flow.starting and flow.start_report["ended"] == "nak"
    flow = starting_flow()  # a rate to go on at: the limit takes over (no higher)
    flow.on_feedback(Nak("s", "slow", 50, 55.0, 0.002, 1, 78.0), now=0.002)
    assert not flow.starting and flow.start_report["limit_from"] == pytest.approx(78.0)


def test_nobody_answering_ends_the_start_after_a_stall_and_the_old_ramp_goes_on():
    """An older receiver never answers PROGRESS: the sender sends its first window, waits
    SILENT_S, and goes on with the ramp from initial_rate_msgs, as without a start."""
    core = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1), now=0.0)
    sent = 0
    while core.offer(b"x", 0.0) == 0.0:
        sent += 1
    assert sent == NakConfig().start_window_msgs
    assert core.policy.starting and core.get_timer() is not None
    core.offer(b"x", 0.0)  # refused: the sender waits (saying HELLO), timers run
    now = 0.0
    for _ in range(100):
        now = core.get_timer()
        core.handle_timer(now)
        if not core.policy.starting:
            break
    assert now == SILENT_S and not core.policy.starting
    assert core.snapshot(SILENT_S)["policy"]["start"]["ended"] == "silent"
    assert core.offer(b"x", SILENT_S + 0.01) == 0.0
    assert core.policy.limits(now=SILENT_S + 0.01)[0] == NakConfig().start_rate_msgs


def _hellos(core: SenderCore) -> int:
    """The HELLOs (not announcements) ``core`` hands out now."""
    return sum(1 for f in core.frames_to_send()
               if isinstance(h := decode(f), Hello) and not h.announce)


def test_a_sender_waiting_for_receivers_says_hello_again_within_milliseconds():
    """Its first HELLO may leave before ZeroMQ has connected (lost): the next ones follow
    2, 4, 8 ... ms later, then one every hello_interval_s; the wait over, it stops."""
    core = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1), now=0.0)
    core.want_receivers(3, 0.0)
    times: list[float] = []
    while (t := core.get_timer()) is not None and t < 0.5:
        core.handle_timer(t)
        times += [t] * _hellos(core)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[0] == 0.0
    assert gaps[:6] == pytest.approx([0.002, 0.004, 0.008, 0.016, 0.032, 0.064])
    assert len(gaps) > 7 and gaps[6:] == pytest.approx([0.1] * (len(gaps) - 6))
    core.want_receivers(0, times[-1])
    core.handle_timer(times[-1] + 1.0)
    assert _hellos(core) == 0


@pytest.mark.quiet
def test_fast_receivers_end_the_start_quickly_lose_nothing_and_go_quiet():
    """Four receivers that take 200,000 msgs/s each, 2 ms away: the start ends within a
    few hundred ms on its own (a full pipe, or nothing left to fill), nothing is lost or
    dropped, and no receiver reports after it (at most one PROGRESS a REPORT_S while it
    lasted, plus the frames in flight)."""
    out = simulate_cores(CoreSimParams(receivers=4, duration_s=1.5, consume_rate_msgs=200_000,
                                       sender_max_rate_msgs=150_000, capacity_msgs=5_000),
                         "nak")
    start = out["start"]
    assert start["ended"] in ("full", "unfilled", "delay") and start["ended_s"] < 0.5, start
    for r in out["receivers"]:
        assert r["queue_drops"] == r["lost"] == r["in_flight_drops"] == 0
        assert 0 < r["progress_sent"] <= start["ended_s"] / REPORT_S + 10


@pytest.mark.quiet
def test_a_slow_consumer_is_filled_no_further_than_half_and_the_limit_starts_near_it():
    """A consumer of 5,000 msgs/s behind a sender of 100,000: the start never fills its
    queue past its first NAK level (the room a receiver reports ends at half), so it drops
    nothing, and the rate limit takes over near what it takes."""
    out = simulate_cores(CoreSimParams(receivers=2, duration_s=2.0, consume_rate_msgs=5_000,
                                       capacity_msgs=2_000), "nak")
    start = out["start"]
    assert start["ended"] in ("full", "stall", "nak"), start
    assert start["delivery_rate"] <= 1.5 * 5_000, start
    assert not start["ramps_on"] and start["limit_from"] <= 1.5 * 5_000, start  # settles
    for r in out["receivers"]:
        assert r["queue_drops"] == r["dropped_unrepaired"] == r["lost"] == 0


def test_a_receiver_dead_in_the_start_holds_it_no_longer_than_the_stall():
    out = simulate_cores(CoreSimParams(receivers=3, dead=1, dead_at_s=0.02, duration_s=1.5,
                                       consume_rate_msgs=100_000), "nak")
    start = out["start"]
    assert start["ended"] == "stall" and start["ended_s"] <= 0.02 + STALL_S + 0.05, start
    for r in out["receivers"][1:]:
        assert r["lost"] == r["queue_drops"] == 0 and r["delivered"] == out["sent"]


def test_a_receiver_reports_at_most_once_a_millisecond_and_stops_with_plain_data():
    rep = ProgressReporter("s", "rx", max_streams=4)
    key = ("tx", 1)
    first = rep.on_data(key, 10, 0.002, (500, 0.0), 0.0)
    assert first is not None and (first.next_seq, first.room, first.delay) == (10, 500, 0.002)
    assert rep.on_data(key, 20, 0.001, (490, 0.0), 0.0004) is None  # within REPORT_S
    assert rep.next_deadline() == REPORT_S
    (held,) = rep.poll((480, 0.0), REPORT_S)
    assert (held.next_seq, held.delay, held.room) == (20, 0.001, 480)
    assert rep.poll((480, 0.0), 2 * REPORT_S) == []  # nothing new
    rep.on_released()  # the queue made room: the sender hears of it
    (room,) = rep.poll((600, 0.0), 3 * REPORT_S)
    assert room.room == 600
    rep.forget(key)  # its DATA no longer says startup
    assert not rep.reporting and rep.next_deadline() is None


def test_a_receiver_reports_as_often_as_the_data_asks_spread_by_its_id():
    """DATA that asks for a longer interval (``report_us``) gets a PROGRESS at most every
    interval x ``spread`` (in [1, 2), from the receiver's id: receivers that read the same
    frame at once do not all answer it); below REPORT_S it is REPORT_S, above FORGET_S,
    FORGET_S (whatever a frame says)."""
    spreads = [ProgressReporter("s", f"r{i}", max_streams=4).spread for i in range(200)]
    assert all(1.0 <= x < 2.0 for x in spreads) and max(spreads) - min(spreads) > 0.8
    rep = ProgressReporter("s", "rx", max_streams=4)
    key, every = ("tx", 1), 0.01 * rep.spread
    assert rep.on_data(key, 10, 0.002, (500, 0.0), 0.0, report_us=10_000) is not None
    assert rep.on_data(key, 20, 0.002, (500, 0.0), every - 1e-6, report_us=10_000) is None
    assert rep.next_deadline() == pytest.approx(every)
    assert rep.on_data(key, 30, 0.002, (500, 0.0), every, report_us=10_000) is not None
    last = every + 2 * REPORT_S
    assert rep.on_data(key, 40, 0.002, (500, 0.0), last, report_us=10) is not None
    assert rep.on_data(key, 50, 0.002, (500, 0.0), last + 0.5, report_us=10**9) is None
    assert rep.next_deadline() == pytest.approx(last + FORGET_S * rep.spread)


@pytest.mark.quiet
def test_a_hundred_receivers_report_less_often_in_the_start_and_lose_nothing():
    """A start to 100 receivers asks each for PROGRESS every ``report_interval_us(100)``
    (2 ms, x its spread) once they answered: each sends fewer reports than one a REPORT_S
    over the start (26 each in 34 ms before), and the start ends as at REPORT_S."""
    out = simulate_cores(CoreSimParams(receivers=100, duration_s=0.3, consume_rate_msgs=20_000,
                                       sender_max_rate_msgs=20_000), "nak")
    start = out["start"]
    assert start["ended"] == "unfilled" and start["receivers"] == 100, start
    most = start["ended_s"] / (report_interval_us(100) * 1e-6) + 3  # first, held, in flight
    assert most < start["ended_s"] / REPORT_S
    for r in out["receivers"]:
        assert r["lost"] == r["queue_drops"] == 0 and r["delivered"] == out["sent"]
        assert 0 < r["progress_sent"] <= most, r


def test_a_receiver_late_to_read_reports_the_paths_delay_not_its_own():
    """What a frame waited while the receiver's process was late (descheduled on shared
    cores) is no queue on the path: PROGRESS says the delay less the lateness, as the
    fill's delay signal judges it, but never below the least delay the receiver saw of
    the stream (a frame that came late in the lateness waited less than all of it)."""
    rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx"), now=0.0)

    def progress(seq: int, sent_at: float, now: float, late: float) -> float:
        rx.late(late, now)
        rx.receive_data(encode(Data("s", "tx", 1, seq, sent_at, (b"m",), 250, True)), now)
        reports = [f for f in map(decode, rx.frames_to_send()) if isinstance(f, Progress)]
        assert len(reports) == 1
        return reports[0].delay

    assert progress(0, 0.0, 0.002, 0.0) == pytest.approx(0.002)  # the path's own
    assert progress(1, 0.010, 0.022, 0.008) == pytest.approx(0.004)  # 12 ms, 8 of them late
    assert progress(2, 0.030, 0.042, 0.030) == pytest.approx(0.002)  # no lower than the least
    assert progress(3, 0.050, 0.062, 0.0) == pytest.approx(0.012)  # on time: all the path's
    rep = ProgressReporter("s", "rx", max_streams=4)
    assert rep.on_data(("tx", 1), 1, 0.005, (9, 0.0), 0.0, 0.004).delay == 0.005  # the first


def _share(flow: NakFlow, t: float, until: float, take_per_ms: float = 0.16, *,
           queue: float = 0.0, peak: list[float] | None = None) -> float:
    """Drive ``flow`` against one receiver whose consumer takes ``take_per_ms`` (160
    msgs/s), queue room 15 (``queue`` in it at first), 1 ms away: what it admits arrives
    a ms later; a PROGRESS a ms while ``flow`` is starting (the first after what it
    admits at ``t``, as a receiver reports what says ``startup``). Returns the time it
    stopped (``peak`` gets the queue's highest)."""
    seq = flow.start.base if flow.start is not None else 0
    first = flow.admit_up_to(1_000, now=t)
    flight, sent = [(t + 0.001, first)], seq + first
    while t < until and flow.starting:
        t = round(t + 0.001, 6)
        while flight and flight[0][0] <= t:
            n = flight.pop(0)[1]
            seq, queue = seq + n, queue + n
        if peak is not None:
            peak.append(queue)
        queue = max(0.0, queue - take_per_ms)
        flow.on_progress(Progress("s", "rx", "tx", 1, seq, max(0, 15 - int(queue)), 0.0,
                                  0.0005, t), now=t)
        k = flow.admit_up_to(1_000, now=t)
        sent += k
        if k:
            flight.append((t + 0.001, k))
    return t


def test_a_sender_cut_by_naks_starts_again_when_another_sender_of_the_stream_ends():
    """Two senders shared a consumer of 160 msgs/s: NAKs cut this one to its half share.
    The other ends (its RECEIPTs are heard): this one starts again from where it is, as
    it started, and finds the freed capacity in a few round trips; CUBIC's plateau at the
    half share took a second to leave (``nakflow eval``'s last task alone at it for
    0.4 s)."""
    flow = NakFlow("s", NakConfig(initial_rate_msgs=90.0))  # where its share put it
    flow.t0 = 0.0
    flow.set_rtt(0.002)
    flow.on_feedback(Nak("s", "rx", 50, 50.0, 0.0, 1, 80.0), now=0.0)  # queue, takes 80
    assert flow.controller.cuts == 1 and not flow.starting
    half = flow.controller.rate(now=0.2)
    assert half < 90
    flow.on_peer_ended(("other", 0), 5_000, now=0.2)
    assert flow.starting and flow.restarts == 1 and flow.start.sent == 5_000
    flow.on_peer_ended(("other", 0), 5_000, now=0.2)  # its RECEIPT from another receiver
    assert flow.restarts == 1
    end = _share(flow, 0.2, 2.0)
    assert not flow.starting and end < 0.7  # over within half a second
    report = flow.snapshot()
    # the queue's room held the window and the consumer took what came: a full pipe
    assert report["restarts"] == 1 and report["restart"]["ended"] == "full"
    assert report["restart"]["delivery_rate"] == pytest.approx(160, rel=0.1)
    assert report["start"] is None  # the first start's report is kept apart (none here)
    assert flow.controller.rate(now=end) > 1.4 * half  # the freed share found


def test_a_start_again_into_a_backlog_waits_for_room_and_still_finds_the_freed_share():
    """The other sender ended with the queue at 25 (its mark for a start is 15): the
    start again sends RESTART_WINDOW_MSGS until a PROGRESS tells of room, then fills the
    room as it opens, and ends on a full pipe above the share it had. A first window of
    start_window_msgs (16) took the queue to 41, past its capacity of 39, as in
    ``nakflow eval``'s last task (16 into a queue of 17)."""
    flow = NakFlow("s", NakConfig(initial_rate_msgs=90.0))
    flow.t0 = 0.0
    flow.set_rtt(0.002)
    flow.on_feedback(Nak("s", "rx", 50, 50.0, 0.0, 1, 80.0), now=0.0)
    flow.on_peer_ended(("other", 0), 5_000, now=0.2)
    half = flow.controller.rate(now=0.2)
    peak: list[float] = []
    end = _share(flow, 0.2, 2.0, queue=25.0, peak=peak)
    assert max(peak) <= 25 + RESTART_WINDOW_MSGS
    assert flow.snapshot()["restart"]["ended"] == "full" and end < 0.7
    # at 160 msgs/s a 10 ms round carries a message or two: its rate is coarse, but
    # above the half share the other sender left
    assert flow.controller.rate(now=end) > 1.25 * half


def test_a_sender_no_nak_cut_or_still_starting_does_not_start_again():
    flow = NakFlow("s", NakConfig())
    flow.t0 = 0.0
    flow.on_peer_ended(("other", 0), 10, now=0.5)  # nothing cut it: its limit is not the
    assert not flow.starting and flow.restarts == 0  # share of anything
    flow.use_startup()
    flow.on_feedback(Nak("s", "rx", 50, 50.0, 0.0, 1, 80.0), now=0.6)  # ends the start
    flow.use_startup()  # starting again, by its own first start
    flow.on_peer_ended(("third", 0), 10, now=0.7)
    assert flow.restarts == 0


def test_a_receipt_for_another_sender_of_the_stream_starts_the_sender_again():
    """Through the core: the RECEIPT comes off the wire, and the start begins at the seq
    the sender got to (what it framed and what waits in the frame being built)."""
    core = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1),
                      now=0.0)
    core.handle_timer(SILENT_S)  # no receiver answered: the first start is over
    while core.offer(b"x", SILENT_S) == 0.0:
        pass
    nak = Nak("s", "rx", 75, 75.0, SILENT_S, 1, 100.0)
    core.receive_feedback(encode(nak), SILENT_S + 0.01)
    assert core.policy.controller.cuts == 1
    other = Receipt("s", "rx", "tx-2", 0, 500, (0, 0, 0, 0), SILENT_S)
    core.receive_feedback(encode(other), SILENT_S + 0.02)
    assert core.policy.starting and core.policy.restarts == 1
    assert core.policy.start.base == core.framer.seq + len(core.batch)
    elsewhere = Receipt("other-stream", "rx", "tx-3", 0, 500, (0, 0, 0, 0), SILENT_S)
    core.receive_feedback(encode(elsewhere), SILENT_S + 0.03)
    assert core.policy.restarts == 1


def test_the_start_s_reports_keep_the_least_position_room_and_queue_state_as_recomputed():
    """``StartReports`` keeps its minima in heaps and its short and filling receivers in
    sets (a report costs O(log N)): after every step of 5,000 random reports, NAK rates and
    departures of 40 receivers, each answer is the one recomputed over all of them."""
    rng = random.Random(35)
    rep, sent = StartReports(), 0
    names = [f"r{i}" for i in range(40)]
    for _ in range(5_000):
        r, op = rng.choice(names), rng.random()
        sent += rng.randrange(0, 50)
        if op < 0.9:
            rep.report(r, max(0, sent - rng.randrange(0, 400)), rng.randrange(0, 300),
                       rng.choice((0.0, 0.0, 0.0, 150.0)), sent)
        elif op < 0.95:
            rep.said_rate(r, 100.0)
        else:
            rep.gone(r)
        pos, room, most = rep.pos, rep.room, rep.most_room
        assert rep.least() == min(pos.values(), default=None)
        assert rep.credit == min(room.values(), default=math.inf)
        assert rep.short() == (bool(rep.take) or any(
            2 * (room[x] - pos[x]) < max(m, 1) for x, m in most.items()))
        assert rep.filling == any(4 * (room[x] - pos[x]) < 3 * most[x] for x in room)
        assert len(rep._pos_heap) <= 4 * len(pos) + 65  # rebuilt, not grown
