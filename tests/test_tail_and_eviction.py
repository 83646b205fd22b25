"""The tail is always known, and ACK lets go of a dead receiver as soon as its connection
closes.

* A sender idle after data announces its last seq (``Hello.announce``: PGM's SPM), and
  repeats END after END (NORM's flush): a receiver that lost the tail counts it lost
  and asks for it, and one that lost END still ends. On the real cores, virtual time.
* A frame that uses no new field encodes as an older peer knows it (revision 1 layout).
* ``ack``: a killed receiver's connection closes (ZeroMQ's socket monitor); the ledger
  evicts whoever stays silent for ``disconnect_probe_s`` as ``disconnected``, long
  before ``receiver_timeout_s``; live receivers keep their place. Real processes.
"""

from __future__ import annotations

import json
import random
import signal
import time

import msgpack
import pytest

from nakflow import AckConfig, ReceiverConfig, ReceiverCore, RepairConfig, Sender, SenderConfig
from nakflow.core.sender_core import SenderCore
from nakflow.core.tail import ANNOUNCE_FIRST_S, END_REPEAT_MAX_S, END_REPEATS
from nakflow.events import ReceiverLeft
from nakflow.policy.credit import CreditLedger
from nakflow.testing import LocalReceivers, ReceiverSpec
from nakflow.wire import End, Hello, Progress, Repair, decode, encode


def _sender(mode: str = "nak") -> SenderCore:
    cfg = SenderConfig(mode=mode, linger_s=0.0, repair=RepairConfig(enabled=False))
    return SenderCore(cfg.named("S", 1), now=0.0)


def _receiver(mode: str = "nak", repair: bool = True) -> ReceiverCore:
    cfg = ReceiverConfig(mode=mode, capacity_msgs=1_000,
                         repair=RepairConfig(enabled=repair)).named("r")
    return ReceiverCore(cfg, now=0.0, rng=random.Random(1))


def _run_timers(core: SenderCore, until: float) -> list[bytes]:
    """Run the core's timer as a driver would, up to ``until``; what it sent."""
    out: list[bytes] = []
    while (t := core.get_timer()) is not None and t <= until:
        core.handle_timer(t)
        out += core.frames_to_send()
    return out


def test_an_idle_sender_announces_its_last_seq_and_a_lost_tail_is_counted_and_asked_for():
    tx = _sender()
    frames = []
    for i in range(3):
        assert tx.offer(b"m%d" % i, 0.001 * i) == 0.0
        tx.flush(0.001 * i)
        frames += tx.frames_to_send()
    assert len(frames) == 3
    announced = [decode(b) for b in _run_timers(tx, 2.0)]
    hellos = [f for f in announced if type(f) is Hello]
    assert hellos and all(f.announce and f.next_seq == 3 for f in hellos)
    assert hellos[0].ts == pytest.approx(0.002 + ANNOUNCE_FIRST_S)
    assert 4 <= len(hellos) <= 8  # doubling intervals, not a frame per timer look
    rx = _receiver()
    rx.receive_data(frames[0], 0.01)  # the tail (seqs 1, 2) never arrives
    assert [type(decode(b)) for b in rx.frames_to_send()] == [Progress]  # the start's
    rx.receive_data(encode(hellos[0]), 0.06)
    assert rx.outbox == []  # an announcement is not answered
    stream = rx.tracker.per_sender()[0]
    assert (stream["received"], stream["lost"], stream["status"]) == (1, 2, "incomplete")
    asked = []
    for now in (0.1, 0.2, 0.4, 0.8):
        rx.handle_timer(now)
        asked += [decode(b) for b in rx.frames_to_send()]
    repairs = [f for f in asked if type(f) is Repair]
    assert repairs and repairs[0].ranges == ((1, 3),)


def test_end_is_repeated_and_close_waits_for_it_in_every_mode():
    for mode in ("nak", "ack", "none"):
        tx = _sender(mode)
        tx.close(0.0)
        first = [decode(b) for b in tx.frames_to_send()]
        assert [type(f) for f in first] == [Hello, End] and not tx.closed  # nothing sent:
        # HELLO first, so that receivers count the END of a stream they heard
        rest = [decode(b) for b in _run_timers(tx, 5.0)]
        ends = [f for f in rest if type(f) is End]
        assert len(ends) == END_REPEATS and tx.closed, (mode, rest)
        assert type(rest[-1]).__name__ == "Bye"


def test_end_repeats_do_not_stretch_with_an_rtt_measured_across_a_full_buffer():
    """An ACK sender whose HELLO waited behind seconds of data in its TCP buffer (the
    lab's 8 Mbit/s link) measured an RTT of 5.2 s, and its END repeats (2 RTT, doubling)
    kept close() waiting 72 s after every receiver had ended. Each gap is capped."""
    tx = _sender("ack")
    tx.roster.rtt_s = 5.2
    tx.close(0.0)
    tx.frames_to_send()
    ends_at = []
    while not tx.closed and (t := tx.get_timer()) is not None and t <= 100.0:
        tx.handle_timer(t)
        ends_at += [t for b in tx.frames_to_send() if type(decode(b)) is End]
    assert len(ends_at) == END_REPEATS and tx.closed
    assert ends_at[-1] <= END_REPEATS * END_REPEAT_MAX_S, ends_at  # was 10.4, 31.2, 72.8


def test_a_receiver_that_lost_end_ends_on_a_repeat():
    tx, rx = _sender("none"), _receiver("none", repair=False)
    tx.offer(b"x", 0.0)
    tx.close(0.0)
    data_and_end = tx.frames_to_send()
    rx.receive_data(data_and_end[0], 0.001)  # DATA arrives, the first END does not
    for buf in _run_timers(tx, 5.0):
        rx.receive_data(buf, 0.5)
    stream = rx.tracker.per_sender()[0]
    assert stream["status"] == "complete" and ("S", 1) in rx.endings.ends


def test_frames_without_new_fields_keep_the_older_layout():
    hello = Hello("s", "n", "sender", "nak", 1, 5, "", 1.0)
    assert len(msgpack.unpackb(encode(hello))) == 2 + 8  # revision 1's field count
    announced = Hello("s", "n", "sender", "nak", 1, 5, "", 1.0, True)
    assert len(msgpack.unpackb(encode(announced))) == 2 + 9
    assert decode(encode(announced)) == announced and decode(encode(hello)) == hello


def test_ledger_evicts_only_the_silent_after_a_closed_connection():
    led = CreditLedger(AckConfig(receiver_timeout_s=5.0, disconnect_probe_s=0.6))
    for r in ("live", "dead", "quiet"):
        led.on_credit(r, 100, now=0.0)
    led.suspect(now=1.0, within=0.6)
    led.on_credit("live", 120, now=1.2)  # a heartbeat grant answers
    led.on_alive("quiet")  # so does a HELLO
    assert led.expire(now=1.5) == []
    assert led.expire(now=1.6) == [("dead", "disconnected")]
    assert led.receivers == ["live", "quiet"] and led.disconnected == 1 and led.evicted == 0
    led.suspect(now=2.0, within=0.6)  # another closed connection, everyone answers
    led.on_credit("live", 130, now=2.1)
    led.on_credit("quiet", 130, now=2.1)
    assert led.expire(now=2.7) == [] and led.receivers == ["live", "quiet"]


def test_ack_evicts_a_killed_receiver_on_disconnect_not_after_the_timeout():
    """Three ``nakflow receive`` processes, ack; one is killed while the sender streams.
    The sender learns of the closed connection, evicts the silent one as
    ``disconnected`` and goes on to the other two, which get everything."""
    specs = [ReceiverSpec(f"r{i}", capacity_msgs=2_000) for i in range(3)]
    left: list[tuple[float, ReceiverLeft]] = []
    killed_at: list[float] = []
    with LocalReceivers(specs, mode="ack", duration_s=60) as rx:
        rx.wait_ready()
        tx = Sender(rx.data, rx.feedback, mode="ack", max_rate_msgs=5_000,
                    ack=AckConfig(receiver_timeout_s=30.0),
                    on_event=lambda e: left.append((time.monotonic(), e))
                    if isinstance(e, ReceiverLeft) else None)
        tx.wait_for_receivers(3, timeout=30)

        for i in range(10_000):
            if i == 2_500:  # a quarter in: r2's credit (2,000 past what it took) cannot
                # cover the rest, so only its eviction lets the send go on. (A timer at
                # 0.5 s once fired late in a loaded full run: the send never needed r2's
                # credit again, nothing was evicted, and the test failed.)
                killed_at.append(time.monotonic())
                rx.procs[2].send_signal(signal.SIGKILL)
            tx.send(b"%d" % i, timeout=25.0)  # 30 s receiver_timeout_s: the probe frees it
        tx.close()
        snap = tx.snapshot()
        reports = []
        for proc in rx.procs[:2]:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-2000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [(e.receiver, e.reason) for _t, e in left if e.reason != "bye"] == [
        ("r2", "disconnected")], (left, snap)  # r0 and r1 say BYE when they are done
    print({"evicted_after_s": round(left[0][0] - killed_at[0], 3),
           "credit_stalled_s": snap["credit_stalled_s"]})
    assert snap["policy"]["disconnected"] == 1 and snap["policy"]["evicted"] == 0
    for r in reports:
        assert (r["delivered"], r["lost"], r["dropped"]) == (10_000, 0, 0), r
