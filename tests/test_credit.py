"""CreditLedger and CreditGranter: exact behaviour and the credit invariant."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nakflow import AckConfig, CreditViolation
from nakflow.policy.registry import CreditGranter, CreditLedger


def test_nothing_sendable_before_any_credit():
    led = CreditLedger()
    assert led.sendable(now=0.0) == 0
    with pytest.raises(CreditViolation):
        led.on_sent(1, now=0.0)


def test_slowest_receiver_governs_and_cumulative_limits_tolerate_loss_and_reorder():
    led = CreditLedger()
    led.on_credit("a", 100, now=0.0)
    led.on_credit("b", 40, now=0.0)
    assert led.sendable(now=0.0) == 40
    led.on_sent(40, now=0.0)
    assert led.sendable(now=0.0) == 0
    led.on_credit("b", 90, now=0.1)
    led.on_credit("b", 60, now=0.1)  # stale, reordered: harmless
    assert led.sendable(now=0.1) == 50
    led.on_credit("a", 70, now=0.2)  # below what was already sent: never negative
    assert led.sendable(now=0.2) == 50


def test_dead_receiver_stalls_until_evicted_after_timeout():
    led = CreditLedger(AckConfig(receiver_timeout_s=5.0))
    led.on_credit("live", 10, now=0.0)
    led.on_credit("dead", 10, now=0.0)
    led.on_sent(10, now=0.0)
    for t in (1.0, 2.0, 3.0, 4.0, 4.9):
        led.on_credit("live", int(10 + t * 100), now=t)
        assert led.sendable(now=t) == 0  # the dead one governs
    assert led.next_deadline() == pytest.approx(5.0)
    assert led.sendable(now=5.0) == 0  # due, but evicted (and reported) on the timer only
    assert led.expire(now=5.0) == [("dead", "evicted")]
    assert led.sendable(now=5.0) == 500 - 10  # dead evicted: the live one alone governs
    assert led.evicted == 1 and led.receivers == ["live"]


def test_a_sender_held_by_credit_says_whose():
    """``AckFlow.why_held``, for a send that timed out: the receivers whose credit ends
    where the sender stands, longest silent first, or none left, or too few joined."""
    from nakflow.policy.sender_flows import AckFlow

    flow = AckFlow("s", "tx", 1, AckConfig(receiver_timeout_s=5.0))
    assert flow.why_held(now=0.0) == "no receiver is left to grant credit"
    flow.ledger.on_credit("dead", 10, now=0.0)
    flow.ledger.on_credit("live", 10, now=0.0)
    assert flow.ledger.holders(now=0.5) == []  # credit is left
    assert flow.admit(10, now=1.0) == (10, 0.0)
    flow.ledger.on_presence("new", now=1.5)  # joins with nothing granted
    assert flow.admit(1, now=2.0) == (0, math.inf)
    assert flow.ledger.holders(now=2.0) == [("dead", 10, 2.0), ("live", 10, 2.0),
                                            ("new", 10, 0.5)]
    assert flow.why_held(now=2.0) == (
        "waiting for credit from dead and 2 more, which allows messages below 10, its last "
        "credit 2.0 s ago; a receiver is dropped after 5 s without credit")
    flow.ledger.on_credit("live", 500, now=2.5)
    flow.ledger.on_credit("new", 500, now=2.5)
    assert flow.why_held(now=3.5) == (
        "waiting for credit from dead, which allows messages below 10, its last credit "
        "3.5 s ago; a receiver is dropped after 5 s without credit")
    flow.ledger.on_presence("newer", now=4.0)
    flow.ledger.on_credit("dead", 500, now=4.0)
    assert flow.why_held(now=4.5) == (
        "waiting for credit from newer, which has granted nothing yet; a receiver is "
        "dropped after 5 s without credit")
    two = AckFlow("s", "tx", 1, AckConfig(min_receivers=2))
    two.ledger.on_credit("a", 10, now=0.0)
    assert two.why_held(now=0.0) == "1 of the 2 receivers min_receivers asks for have joined"
    two.ledger.on_presence("b", now=0.0)
    assert two.why_held(now=0.0) == (
        "waiting for credit from b, which has granted nothing yet; a receiver is dropped "
        "after 5 s without credit")


def test_bye_leaves_and_min_receivers_gates():
    led = CreditLedger(AckConfig(min_receivers=2))
    led.on_credit("a", 10, now=0.0)
    assert led.sendable(now=0.0) == 0
    led.on_credit("b", 20, now=0.0)
    assert led.sendable(now=0.0) == 10
    led.on_bye("a")
    assert led.sendable(now=0.0) == 0  # below min_receivers again


def test_absurd_credit_is_clamped():
    led = CreditLedger(AckConfig(max_credit_ahead=1000))
    led.on_credit("x", 2**62, now=0.0)
    assert led.sendable(now=0.0) == 1000
    assert led.clamped == 1


ops = st.lists(st.one_of(
    st.tuples(st.just("credit"), st.sampled_from("abc"), st.integers(0, 500)),
    st.tuples(st.just("send"), st.integers(1, 50)),
    st.tuples(st.just("bye"), st.sampled_from("abc")),
    st.tuples(st.just("tick"), st.floats(0, 3)),
), max_size=120)


@given(ops)
def test_never_more_sent_than_the_slowest_live_receiver_granted(script):
    """Reactive Streams rule 1.1 under any interleaving of credits, sends, joins, timeouts."""
    led = CreditLedger(AckConfig(receiver_timeout_s=2.0))
    now = 0.0
    granted: dict[str, int] = {}
    seen: dict[str, float] = {}
    for op in script:
        if op[0] == "credit":
            _, r, lim = op
            led.on_credit(r, lim, now=now)
            granted[r] = max(granted.get(r, lim), lim)
            seen[r] = now
        elif op[0] == "bye":
            led.on_bye(op[1])
            granted.pop(op[1], None)
        elif op[0] == "tick":
            now += op[1]
            led.expire(now=now)  # the driver's timer: evictions happen (and are told) there
        else:
            live = {r: g for r, g in granted.items() if now - seen[r] < 2.0}
            n = min(op[1], led.sendable(now=now))
            if n:
                before = led.next_seq
                led.on_sent(n, now=now)
                assert live and before + n <= min(live.values())
            granted = {r: g for r, g in granted.items() if r in led.receivers}


def test_granter_never_promises_more_than_the_queue_holds():
    """A sender joining while the first holds the whole queue gets a zero grant at once
    (so its ledger knows this receiver and waits), then its share as the queue drains."""
    g = CreditGranter(100)
    s1, s2 = ("s1", 0), ("s2", 0)
    g.on_sender(s1, 0, now=0.0)
    assert g.poll(now=0.0) == [(s1, 100)]
    g.on_sender(s2, 500, now=0.0)
    assert g.poll(now=0.0) == [(s2, 500)]  # nothing free: "you may send nothing yet"
    g.on_sender(s1, 100, now=0.01)
    g.on_enqueued(s1, 100)
    g.on_released(s1, 30)
    assert g.poll(now=0.01) == [(s2, 530)]  # what s1 freed, s1 being over its window of 50
    g.on_released(s1, 70)
    assert dict(g.poll(now=0.02)) == {s1: 150, s2: 550}  # both at their window


def test_two_senders_heard_in_opposite_orders_both_get_credit_everywhere():
    """Two tasks starting together, heard s1-then-s2 by one receiver and s2-then-s1 by
    the other: with max_share 0.5 each gets room at both at once; at 1.0 (the default)
    each holds one queue whole and waits at the other until idle_credit_s (the stalls
    of ACK runs in `nakflow eval`, which runs its ACK receivers at 0.5)."""
    s1, s2 = ("s1", 0), ("s2", 0)
    for share, both_granted in ((0.5, True), (1.0, False)):
        a = CreditGranter(100, AckConfig(max_share=share))
        b = CreditGranter(100, AckConfig(max_share=share))
        grants: dict[tuple[str, tuple[str, int]], int] = {}
        for g, order, name in ((a, (s1, s2), "a"), (b, (s2, s1), "b")):
            for key in order:
                g.on_sender(key, 0, now=0.0)
                grants.update({(name, k): lim for k, lim in g.poll(now=0.0)})
        assert all(v > 0 for v in grants.values()) == both_granted, (share, grants)


@pytest.mark.parametrize("seed", range(5))
def test_granted_senders_never_overflow_the_queue(seed):
    """Senders that send what they are granted, joining and ending at random, messages
    arriving late (some read before a sender's END but queued after it), a consumer of
    random speed: the queue never holds more than its capacity."""
    rng = random.Random(seed)
    cap = rng.randint(10, 300)
    g = CreditGranter(cap)
    queue: list[tuple[str, int]] = []
    sent: dict[tuple[str, int], int] = {}  # next seq at the sender
    arrived: dict[tuple[str, int], int] = {}  # next seq read by the receiver
    limits: dict[tuple[str, int], int] = {}
    joined = 0

    def arrive(key, n, now):
        nonlocal queue
        arrived[key] += n
        g.on_sender(key, arrived[key], now=now)
        queue += [key] * n
        g.on_enqueued(key, n)

    for step in range(3_000):
        now = step * 0.001
        if rng.random() < 0.01 and len(sent) < 6:
            key = (f"s{joined}", 0)
            joined += 1
            sent[key] = arrived[key] = rng.randint(0, 1000)
            g.on_sender(key, sent[key], now=now)
        if sent and rng.random() < 0.003:
            gone = rng.choice(sorted(sent))
            late = sent[gone] - arrived[gone]
            g.on_sender(gone, sent[gone], now=now)  # the last DATA frames were read,
            g.on_sender_gone(gone)  # then END, and only then are those frames queued
            queue += [gone] * late
            g.on_enqueued(gone, late)
            del sent[gone], arrived[gone]
            limits.pop(gone, None)
        for key, limit in g.poll(now=now):
            if key in sent:
                limits[key] = max(limits.get(key, 0), limit)
        for key in sent:
            sent[key] += rng.randint(0, max(0, limits.get(key, 0) - sent[key]))
            arrive(key, rng.randint(0, sent[key] - arrived[key]), now)
        assert len(queue) <= cap, f"step {step}: {len(queue)} queued, capacity {cap}"
        for _ in range(rng.randint(0, 3)):
            if queue:
                g.on_released(queue.pop(0), 1)
    assert joined >= 2


def test_granter_regrants_after_a_quarter_is_freed_and_heartbeats():
    g = CreditGranter(100, AckConfig(heartbeat_s=0.2))
    key = ("s", 1)
    g.on_sender(key, 0, now=0.0)
    assert g.poll(now=0.0) == [(key, 100)]
    g.on_sender(key, 100, now=0.01)
    g.on_enqueued(key, 100)  # arrivals do not move the limit
    assert g.poll(now=0.01) == []
    g.on_released(key, 24)
    assert g.poll(now=0.02) == []  # less than a quarter freed
    g.on_released(key, 1)
    assert g.poll(now=0.03) == [(key, 125)]
    assert g.next_deadline() == pytest.approx(0.23)
    assert g.poll(now=0.23) == [(key, 125)]  # heartbeat: same limit, liveness


def test_granter_counts_losses_in_flight_as_freed_and_forgets_ended_senders():
    g = CreditGranter(10)
    key = ("s", 0)
    g.on_sender(key, 0, now=0.0)
    g.poll(now=0.0)
    g.on_sender(key, 10, now=0.1)  # 10 sent, only 4 arrived
    g.on_enqueued(key, 4)
    assert g.limit_for(key) == 16
    g.on_sender_gone(key)
    assert g.poll(now=0.2) == [] and g.next_deadline() is None


def test_two_senders_holding_credit_at_different_receivers_do_not_deadlock():
    """Receiver 1 hears A first, receiver 2 hears B first: each gives its first sender the
    whole queue and the other a zero grant, so A waits at 2 and B at 1 (grants cannot be
    taken back). After idle_credit_s the unused credit is lent out and both finish."""
    cap, cfg = 100, AckConfig(idle_credit_s=0.5)
    rx = [CreditGranter(cap, cfg), CreditGranter(cap, cfg)]
    a, b = ("A", 0), ("B", 0)
    sent = {a: 0, b: 0}
    limits: dict = {a: {}, b: {}}
    queues: list[list] = [[], []]
    rx[0].on_sender(a, 0, now=0.0)
    rx[1].on_sender(b, 0, now=0.0)
    first_progress = None
    for step in range(5_000):
        now = step * 0.001
        if step == 1:
            rx[0].on_sender(b, 0, now=now)
            rx[1].on_sender(a, 0, now=now)
        for i, g in enumerate(rx):
            for key, limit in g.poll(now=now):
                limits[key][i] = max(limits[key].get(i, 0), limit)
        for key in (a, b):
            if len(limits[key]) == 2:
                n = min(10, min(limits[key].values()) - sent[key])
                if n > 0:
                    sent[key] += n
                    for i, g in enumerate(rx):
                        g.on_sender(key, sent[key], now=now)
                        g.on_enqueued(key, n)
                        queues[i] += [key] * n
                elif step % 100 == 0:  # blocked: its HELLO says it waits for credit
                    for g in rx:
                        g.on_sender(key, sent[key], now=now, waiting=True)
        if first_progress is None and min(sent.values()) > 0:
            first_progress = now
        for i, g in enumerate(rx):
            for _ in range(2):
                if queues[i]:
                    g.on_released(queues[i].pop(0), 1)
    assert first_progress is not None and 0.5 <= first_progress < 1.0
    assert min(sent.values()) > 2_000  # both kept going (2 msgs/ms consumed per queue)


def test_a_quiet_sender_keeps_its_reservation():
    """A sender granted the queue that sends nothing for a long time (a Spark task still
    computing its rows) is not waiting for credit: its grant keeps reserving room, so a
    newcomer gets nothing until it has been used and consumed."""
    g = CreditGranter(100, AckConfig(idle_credit_s=0.5))
    a, b = ("A", 0), ("B", 0)
    g.on_sender(a, 0, now=0.0)
    assert g.poll(now=0.0) == [(a, 100)]
    g.on_sender(b, 0, now=0.01)
    for step in range(1, 300):  # 3 s, A silent
        now = step * 0.01
        for key, limit in g.poll(now=now):
            assert key != b or limit == 0, f"{now}: B granted {limit} while A holds 100"
    g.on_sender(a, 0, now=3.0, waiting=True)  # now A says it waits (blocked elsewhere)
    g.on_sender(b, 0, now=3.0)
    assert dict(g.poll(now=3.01)).get(b, 0) > 0  # after idle_credit_s, A's credit is lent


def test_made_up_peers_are_refused_past_the_cap_and_known_ones_keep_their_credit():
    ledger = CreditLedger(AckConfig(), max_receivers=3)
    for r in ("a", "b", "c", "mallory-1", "mallory-2"):
        ledger.on_credit(r, 100, now=0.0)
    assert ledger.receivers == ["a", "b", "c"] and ledger.snapshot()["refused"] == 2
    assert ledger.sendable(now=0.1) == 100
    granter = CreditGranter(1_000, AckConfig(), max_senders=2)
    for key in (("s1", 0), ("s2", 0), ("fake", 0), ("fake", 1)):
        granter.on_sender(key, 0, now=0.0)
    assert granter.senders == [("s1", 0), ("s2", 0)]
    assert granter.snapshot()["senders_refused"] == 2
    assert dict(granter.poll(now=0.0)) == {("s1", 0): 500, ("s2", 0): 500}


def test_a_receiver_heard_but_not_yet_granting_holds_the_sender_back():
    """A receiver whose HELLO was heard but whose first credit is late or lost joins with
    nothing granted: the sender waits for it instead of sending on the others' credit
    into its queue (the cause of ACK's drops in the chaos run with lossy feedback)."""
    ledger = CreditLedger(AckConfig(receiver_timeout_s=1.0))
    ledger.on_presence("slow", now=0.0)
    ledger.on_credit("fast", 2_000, now=0.0)
    assert ledger.sendable(now=0.01) == 0
    ledger.on_credit("slow", 500, now=0.02)
    assert ledger.sendable(now=0.03) == 500
    ledger.on_presence("slow", now=0.04)  # a later HELLO changes nothing
    assert ledger.sendable(now=0.05) == 500


def test_a_heard_receiver_that_never_grants_is_evicted_and_does_not_rejoin_by_hello():
    ledger = CreditLedger(AckConfig(receiver_timeout_s=1.0))
    ledger.on_credit("a", 100, now=0.0)
    ledger.on_presence("mute", now=0.0)
    assert ledger.sendable(now=0.5) == 0
    ledger.on_credit("a", 100, now=0.9)  # a stays alive
    assert ledger.expire(now=1.01) == [("mute", "evicted")]  # after receiver_timeout_s
    assert ledger.sendable(now=1.01) == 100
    ledger.on_presence("mute", now=1.1)  # its HELLOs do not stall the sender again
    assert ledger.sendable(now=1.2) == 100
    ledger.on_credit("mute", 50, now=1.3)  # a credit re-joins it
    assert ledger.sendable(now=1.4) == 50


def test_a_granting_receiver_restarted_after_eviction_rejoins_by_hello_with_no_credit():
    """Killed, evicted, restarted under its id: its HELLO holds the sender back until its
    first grant, as a new receiver's does (before, it got the others' pace until its
    credit arrived: 248 drops in a full-suite run of test_faults); a mute one stays out."""
    ledger = CreditLedger(AckConfig(receiver_timeout_s=1.0))
    ledger.on_credit("a", 1_000, now=0.0)
    ledger.on_credit("r2", 1_000, now=0.0)
    ledger.on_presence("mute", now=0.0)
    ledger.on_credit("a", 1_000, now=0.9)
    assert sorted(ledger.expire(now=1.05)) == [("mute", "evicted"), ("r2", "evicted")]
    assert ledger.sendable(now=1.05) == 1_000
    ledger.on_presence("r2", now=1.5)  # restarted
    ledger.on_presence("mute", now=1.5)
    assert ledger.sendable(now=1.6) == 0
    ledger.on_credit("r2", 600, now=1.7)
    assert ledger.sendable(now=1.8) == 600
    assert "mute" not in ledger.receivers


def test_a_new_epoch_of_a_sender_retires_the_old_ones_reservation():
    """A sender killed mid-stream sends no END: its grant would keep reserving the queue
    for sender_timeout_s. Its restart (same id, newer epoch) proves it dead: the
    reservation goes at once, the messages it left queued keep their room."""
    g = CreditGranter(100)
    old, new = ("s", 1), ("s", 2)
    g.on_sender(old, 0, now=0.0)
    assert g.poll(now=0.0) == [(old, 100)]
    g.on_sender(old, 30, now=0.1)
    g.on_enqueued(old, 30)  # then it dies: 30 queued, 70 granted and unused
    g.on_sender(new, 0, now=0.2)
    assert g.senders == [new] and g.snapshot()["epochs_retired"] == 1
    assert dict(g.poll(now=0.2)) == {new: 70}  # not 0: the dead epoch holds only its 30
    g.on_released(old, 30)
    g.on_sender(("t", 1), 0, now=0.3)  # another id is not affected by s's epochs
    assert set(g.senders) == {new, ("t", 1)}


def test_an_ack_receivers_full_queue_holds_back_what_a_sender_sent_past_it():
    """A sender that has not heard this receiver yet (it restarted under its id: data
    comes as soon as ZeroMQ reconnects) sends past its queue: what does not fit stays in
    the socket, not dropped (no repair in ack would bring it back), and comes in as the
    consumer makes room."""
    from nakflow import ReceiverConfig, ReceiverCore
    from nakflow.live.delivery_queue import DeliveryQueue
    from nakflow.wire import encode_data

    core = ReceiverCore(ReceiverConfig(mode="ack", receiver_id="r", capacity_msgs=10),
                        now=0.0)
    q = DeliveryQueue(10, "drop-newest", wake=lambda: None, wake_every=1)
    seq, now = 0, 0.0
    while core.wants_data(q.full) and seq < 100:  # the driver reads while it may
        now += 0.001
        core.receive_data(encode_data("default", "s", 1, seq, now, [b"x", b"y"]), now)
        seq += 2
        core.exchange(q, now)
    assert seq < 100 and len(q) == 10 and core.dropped == 0
    assert not core.wants_data(q.full)  # the rest waits in the socket
    got = len(q.take(10, 0))
    core.exchange(q, now + 0.001)
    while core.wants_data(q.full) and seq < 100:
        now += 0.001
        core.receive_data(encode_data("default", "s", 1, seq, now, [b"x", b"y"]), now)
        seq += 2
        core.exchange(q, now)
    got += len(q.take(100, 0))
    assert core.dropped == 0 and got == seq - len(core.deliveries())
