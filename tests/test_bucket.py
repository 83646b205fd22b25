"""TokenBucket: exact waits at explicit times."""

import pytest

from nakflow import ConfigError
from nakflow.policy.bucket import GATHER_MSGS
from nakflow.policy.registry import TokenBucket


def test_starts_full_then_paces_to_rate():
    b = TokenBucket(1000, burst_s=0.01)  # burst 10
    assert all(b.request(1, now=0.0) == 0.0 for _ in range(10))
    assert b.request(1, now=0.0) == pytest.approx(0.001)
    assert b.request(1, now=0.001) == 0.0
    assert b.request(1, now=0.001) == pytest.approx(0.001)


def test_wait_takes_nothing_and_burst_is_bounded():
    b = TokenBucket(100, burst_s=0.05)  # burst 5
    assert b.request(5, now=0.0) == 0.0
    assert b.request(2, now=0.0) == pytest.approx(0.02)
    assert b.request(2, now=0.0) == pytest.approx(0.02)  # the refusal took nothing
    assert b.request(5, now=100.0) == 0.0  # long idle earns only one burst
    assert b.request(1, now=100.0) > 0


def test_batch_larger_than_burst_goes_when_full_and_leaves_debt():
    b = TokenBucket(1000, burst_s=0.01)
    assert b.request(50, now=0.0) == 0.0  # full bucket admits it
    assert b.request(1, now=0.0) == pytest.approx(0.041)  # 40 debt + 1


def test_rate_change_takes_effect_immediately():
    b = TokenBucket(1000, burst_s=0.001, min_burst=1)
    b.request(1, now=0.0)
    assert b.request(1, now=0.0) == pytest.approx(0.001)
    b.set_rate(10, now=0.0)
    assert b.request(1, now=0.0) == pytest.approx(0.1)
    b.set_rate(1e6, now=0.05)
    assert b.request(1, now=0.05) == pytest.approx(0.5e-6)  # 0.5 token earned at the old rate


def test_rejects_non_positive_rate():
    with pytest.raises(ConfigError):
        TokenBucket(0)


def test_take_up_to_takes_whole_tokens_only():
    b = TokenBucket(1000, burst_s=0.01)  # 10 tokens
    assert b.take_up_to(4, now=0.0) == 4
    assert b.take_up_to(100, now=0.0) == 6
    assert b.take_up_to(100, now=0.0) == 0
    assert b.take_up_to(100, now=0.0025) == 2  # 2.5 tokens earned: 2 whole ones
    assert b.take_up_to(100, now=0.003) == 1  # the half token was kept


def test_a_wait_lasts_until_gather_s_of_the_rate_may_go_held_on_top_of_the_burst():
    b = TokenBucket(900, burst_s=0.005, gather_s=0.004)  # burst 4.5, gather 3.6
    assert b.capacity == pytest.approx(4.5 + 3.6)  # a wait that runs over loses nothing
    assert b.take_up_to(100, now=0.0) == 8
    assert b.request(1, now=0.0) == pytest.approx((3.6 - 0.1) / 900)  # not 0.9 / 900
    assert b.take_up_to(100, now=3.5 / 900) == 3  # what may go then goes together
    assert b.request(6, now=3.5 / 900) == pytest.approx((6 - 0.6) / 900)  # more than it
    fast = TokenBucket(100_000, burst_s=0.005, gather_s=0.004)  # 400: GATHER_MSGS
    fast.take_up_to(10**6, now=0.0)
    assert fast.request(1, now=0.0) == pytest.approx(GATHER_MSGS / 100_000)
    assert fast.capacity == pytest.approx(500 + GATHER_MSGS)
    plain = TokenBucket(900, burst_s=0.005)
    assert plain.capacity == 4.5
    plain.take_up_to(100, now=0.0)
    assert plain.request(1, now=0.0) == pytest.approx(0.5 / 900)
    with pytest.raises(ConfigError):
        TokenBucket(900, gather_s=-0.001)


def test_a_wait_of_what_it_said_always_suffices():
    """A clock moved by exactly the wait returned (a simulator's) is let through: the
    float rounding of the refill once left 0.9999999999999997 tokens and a wait of 4e-19
    s, forever."""
    b = TokenBucket(900, burst_s=0.005)
    now, sent = 0.0, 0
    for _ in range(1_000):  # bounded: the old bucket never got past the 10th
        wait = b.request(1, now=now)
        now += wait
        sent += wait == 0.0
        if sent == 100:
            break
    assert sent == 100 and now < 0.2
