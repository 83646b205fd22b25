"""TokenBucket: exact waits at explicit times."""

import pytest

from nakflow import ConfigError
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
