"""CreditLedger and CreditGranter: exact behaviour and the credit invariant."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nakflow import AckConfig, CreditGranter, CreditLedger, CreditViolation


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
    assert led.sendable(now=5.0) == 500 - 10  # dead evicted: the live one alone governs
    assert led.evicted == 1 and led.receivers == ["live"]


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
        else:
            live = {r: g for r, g in granted.items() if now - seen[r] < 2.0}
            n = min(op[1], led.sendable(now=now))
            if n:
                before = led.next_seq
                led.on_sent(n, now=now)
                assert live and before + n <= min(live.values())
            granted = {r: g for r, g in granted.items() if r in led.receivers}


def test_granter_initial_grant_is_capacity_shared_among_senders():
    g = CreditGranter(100)
    g.on_sender(("s1", 0), 0, now=0.0)
    assert g.poll(now=0.0) == [(("s1", 0), 100)]
    g.on_sender(("s2", 0), 500, now=0.0)
    assert dict(g.poll(now=0.0))[("s2", 0)] == 550


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
