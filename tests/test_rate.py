"""NakRateController: exact values at hand-chosen times, and properties."""

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nakflow import ConfigError, NakConfig
from nakflow.policy.curve import (
    PROBE_ROOM_SHARE,
    probe_rate,
    probe_step,
    recovery_bound_s,
    room_step,
)
from nakflow.policy.fill import holdoff_s
from nakflow.policy.rate import USED_GAIN
from nakflow.policy.registry import NakRateController


def measured(ctrl: NakRateController, rate: float, t0: float, t1: float) -> None:
    """Feed the meter ``rate`` msgs/s from t0 to t1 in 1 ms sends."""
    n = round((t1 - t0) * 1000)
    for i in range(n + 1):
        ctrl.on_sent(int(rate / 1000), now=t0 + i / 1000)


def used(ctrl: NakRateController, t0: float, t1: float) -> None:
    """A sender that sends at its limit from t0 to t1, 1 ms at a time."""
    owed = 0.0
    for i in range(round((t1 - t0) * 1000)):
        now = t0 + i / 1000
        owed += ctrl.rate(now=now) / 1000
        ctrl.on_sent(int(owed), now=now)
        owed -= int(owed)


def test_an_unused_limit_does_not_grow():
    """An application that sends 20,000 msgs/s leaves its limit at USED_GAIN times that,
    where the ramp would have taken it to max_rate unused; sending at the limit again,
    the limit goes on growing, and an unused one does not fall either."""
    ctrl = NakRateController()
    ctrl.rate(now=0.0)
    measured(ctrl, 20_000, 0.0, 1.0)
    assert ctrl.rate(now=1.0) == pytest.approx(USED_GAIN * 20_000, rel=0.05)
    assert ctrl.snapshot()["unused_holds"] > 0
    assert ctrl.rate(now=5.0) == ctrl.rate(now=1.0)  # idle: neither up nor down
    used(ctrl, 5.0, 5.5)
    assert ctrl.rate(now=5.5) > 4 * USED_GAIN * 20_000
    free = NakRateController()  # the same start, the limit used all along
    free.rate(now=0.0)
    used(free, 0.0, 1.0)
    assert free.rate(now=1.01) == pytest.approx(5_000 * 1.25 ** 20)  # every step


def test_non_limiting_start_stays_there_without_naks():
    ctrl = NakRateController(NakConfig(initial_rate_msgs=None))  # seed 001's start
    assert ctrl.rate(now=0.0) == NakConfig().max_rate_msgs
    assert ctrl.rate(now=1000.0) == NakConfig().max_rate_msgs
    assert ctrl.next_deadline() is None


def test_default_start_ramps_geometrically_until_the_first_nak():
    ctrl = NakRateController()
    assert ctrl.rate(now=10.0) == 5_000  # first use anchors the ramp
    assert ctrl.next_deadline() == pytest.approx(10.05)
    assert ctrl.rate(now=10.049) == 5_000
    assert ctrl.rate(now=10.05) == pytest.approx(5_000 * 1.25)
    assert ctrl.rate(now=10.5) == pytest.approx(5_000 * 1.25 ** 10)
    measured(ctrl, 40_000, 10.5, 10.6)
    ctrl.on_nak(50, now=10.6)  # ends slow start: cut, then the CUBIC curve
    assert ctrl.rate(now=10.6) == pytest.approx(40_000 * 0.9, rel=0.03)
    assert ctrl.rate(now=10.6 + 0.1 + 0.05) < 40_000  # no geometric ramp any more
    used(ctrl, 10.6, 30.0)  # a sender that uses its limit gets all the way back
    assert ctrl.rate(now=30.0) == NakConfig().max_rate_msgs


def test_first_nak_cuts_relative_to_the_measured_send_rate():
    """A cut from the non-limiting start must bite: it applies to the rate reached."""
    ctrl = NakRateController(NakConfig(initial_rate_msgs=None))
    measured(ctrl, 10_000, 0.0, 0.1)
    assert ctrl.measured_rate() == pytest.approx(10_000, rel=0.02)
    assert ctrl.on_nak(50, now=0.1) is True
    assert ctrl.rate(now=0.1) == pytest.approx(9_000, rel=0.02)


def test_stronger_nak_in_window_deepens_weaker_changes_nothing():
    cfg = NakConfig(initial_rate_msgs=10_000, max_rate_msgs=1e6)
    ctrl = NakRateController(cfg)
    ctrl.on_nak(50, now=1.0)
    assert ctrl.rate(now=1.0) == 9_000
    assert ctrl.on_nak(87, now=1.02) is True
    assert ctrl.rate(now=1.02) == 5_000  # relative to the window's base, not 9000
    assert ctrl.on_nak(75, now=1.03) is False
    assert ctrl.on_nak(87, now=1.04) is False
    assert ctrl.rate(now=1.04) == 5_000
    assert ctrl.cuts == 2


def test_many_receivers_same_nak_in_window_act_like_one():
    cfg = NakConfig(initial_rate_msgs=10_000)
    ctrl = NakRateController(cfg)
    for i in range(100):
        ctrl.on_nak(75, now=1.0 + i * 0.0004)
    assert ctrl.rate(now=1.04) == 7_000
    assert ctrl.cuts == 1
    assert ctrl.naks_received == {75: 100}


def test_stepwise_cubic_increase_exact_values():
    cfg = NakConfig(initial_rate_msgs=10_000, max_rate_msgs=1e6, quiet_s=0.05, cubic_c=4.0,
                    probe_after_s=None)
    ctrl = NakRateController(cfg)
    # rate 5000; W halfway back to the rate at the NAK: 7500; K = cbrt(2500 / (4 * 7500))
    ctrl.on_nak(87, now=0.0)
    w, k_s = 7_500, (1 / 12) ** (1 / 3)
    assert ctrl.rate(now=0.049) == 5_000  # first quiet window: no rise yet
    assert ctrl.next_deadline() == pytest.approx(0.05)
    # step k at 0.05 + (k-1)*0.05, value W + c*W*(k*0.05 - K)^3
    for k in (1, 2, 5, 10, 14):
        t = 0.05 + (k - 1) * 0.05
        want = w + 4 * w * (k * 0.05 - k_s) ** 3
        assert ctrl.rate(now=t + 1e-9) == pytest.approx(max(want, 5_000))
        assert ctrl.rate(now=t + 0.049) == pytest.approx(max(want, 5_000))  # flat between steps
    # concave below W (steps shrink), convex above (steps grow): BIC/CUBIC
    fresh = NakRateController(cfg)  # time only moves forward: replay on a fresh controller
    fresh.on_nak(87, now=0.0)
    r = [fresh.rate(now=0.05 + (k - 1) * 0.05 + 1e-9) for k in range(1, 21)]
    steps = [b - a for a, b in itertools.pairwise(r)]
    assert steps[0] > steps[7] and steps[-1] > steps[10]


def test_after_probe_after_s_without_a_nak_the_limit_also_grows_geometrically():
    """Freed capacity is found in steps of probe_factor, not after CUBIC's plateau; the
    probe needs the RTT, waits probe_rtts of it, and grows at most once per RTT."""
    cfg = NakConfig(initial_rate_msgs=10_000, max_rate_msgs=1e6, quiet_s=0.1, step_s=0.05,
                    probe_after_s=0.3, probe_factor=1.1, probe_rtts=4)

    def ticks(rtt: float | None, room: float | None = 1e9
              ) -> tuple[NakRateController, NakRateController]:
        plain, ctrl = NakRateController(replace(cfg, probe_after_s=None)), NakRateController(cfg)
        for c in (plain, ctrl):
            if rtt is not None:
                c.set_rtt(rtt)
            if room is not None:
                c.set_probe_room(room)
            c.on_nak(87, now=0.0)
        return plain, ctrl

    def at(k: int) -> float:  # steps tick at 0.1, 0.15, ...
        return 0.1 + (k - 1) * 0.05 + 1e-9

    plain, ctrl = ticks(None)  # no RTT measured: no probe
    assert all(ctrl.rate(now=at(k)) == plain.rate(now=at(k)) for k in range(1, 15))
    plain, ctrl = ticks(0.001, room=None)  # no queue's room known: no probe
    assert all(ctrl.rate(now=at(k)) == plain.rate(now=at(k)) for k in range(1, 15))
    plain, ctrl = ticks(0.001)  # short RTT: after step 4 (0.3 s without a NAK), x1.1 a step
    assert all(ctrl.rate(now=at(k)) == plain.rate(now=at(k)) for k in range(1, 5))
    base = ctrl.rate(now=at(4))
    for k in range(5, 12):
        assert ctrl.rate(now=at(k)) == pytest.approx(max(plain.rate(now=at(k)),
                                                         base * 1.1 ** (k - 4)))
    assert ctrl.rate(now=at(11)) > 1.5 * plain.rate(now=at(11))
    plain, ctrl = ticks(0.1)  # 100 ms: waits 4 RTTs (step 6), then x1.1 every 2 steps
    assert all(ctrl.rate(now=at(k)) == plain.rate(now=at(k)) for k in range(1, 7))
    base = ctrl.rate(now=at(6))
    for k in range(7, 15):
        assert ctrl.rate(now=at(k)) == pytest.approx(max(plain.rate(now=at(k)),
                                                         base * 1.1 ** ((k - 6 + 1) // 2)))


def test_hold_blocks_increase_without_recutting_then_recut_after_hold():
    cfg = NakConfig(initial_rate_msgs=10_000, hold_s=0.2)
    ctrl = NakRateController(cfg)
    ctrl.on_nak(75, now=0.0)  # 7000, hold until 0.2
    assert ctrl.on_nak(75, now=0.04) is False  # same window, equal level
    assert ctrl.on_nak(75, now=0.08) is False  # outside window, inside hold
    assert ctrl.holds == 2  # both kept the limit: the window's repeat and the held one
    assert ctrl.rate(now=0.179) == 7_000  # quiet timer restarted at 0.08
    assert ctrl.rate(now=0.181) > 7_000  # quiet_s later: the first step
    assert ctrl.on_nak(50, now=0.19) is False  # still holding: blocks the rise again
    before = ctrl.rate(now=0.21)
    assert ctrl.on_nak(75, now=0.21) is True  # hold over: the queue is still not draining
    assert ctrl.rate(now=0.21) == pytest.approx(before * 0.7)
    assert ctrl.on_nak(100, now=0.22) is True  # stronger, same window: deepens from the base
    assert ctrl.rate(now=0.22) == pytest.approx(before * 0.25)


def test_repeated_top_level_nak_cuts_once_per_top_hold():
    """A full queue repeats NAK(100) every window while the backlog drains: re-cutting
    on each would compound 0.25 per window into a collapse (measured live: 2M -> 150).
    The top level holds for top_hold_s only: a full queue drops data while it waits."""
    ctrl = NakRateController(NakConfig(initial_rate_msgs=10_000, hold_s=0.2, top_hold_s=0.1))
    ctrl.on_nak(100, now=0.0, fill=100.0)
    assert ctrl.on_nak(100, now=0.06, fill=100.0) is False
    assert ctrl.rate(now=0.06) == pytest.approx(10_000 * 0.25)
    assert ctrl.on_nak(100, now=0.11, fill=100.0) is True  # hold over, still full: cut again
    assert ctrl.rate(now=0.11) == pytest.approx(10_000 * 0.25 * 0.25)


def test_repeat_after_hold_cuts_only_while_the_queue_is_not_draining():
    ctrl = NakRateController(NakConfig(initial_rate_msgs=10_000, hold_s=0.2))
    ctrl.on_nak(75, now=0.0, fill=80.0)
    assert ctrl.rate(now=0.0) == pytest.approx(7_000)
    for t in (0.05, 0.1, 0.15, 0.2):  # the receiver repeats every window: held
        assert ctrl.on_nak(75, now=t, fill=79.0) is False
    assert ctrl.on_nak(75, now=0.25, fill=77.0) is False  # below the cut's fill: draining
    assert ctrl.rate(now=0.25) == pytest.approx(7_000)
    assert ctrl.on_nak(75, now=0.30, fill=81.0) is True  # growing again: cut
    assert ctrl.rate(now=0.30) == pytest.approx(7_000 * 0.7)
    assert ctrl.on_nak(87, now=0.31, fill=87.5) is True  # stronger always cuts


def test_w_comes_from_where_the_episode_began_not_from_its_repeats():
    cfg = NakConfig(initial_rate_msgs=10_000, hold_s=0.0)
    ctrl = NakRateController(cfg)
    ctrl.on_nak(50, now=0.0, fill=51.0)
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(10_000 * 0.95)
    ctrl.on_nak(50, now=0.06, fill=60.0)  # the same episode: rate cut again, W kept
    assert ctrl.rate(now=0.06) == pytest.approx(10_000 * 0.9 * 0.9)
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(10_000 * 0.95)
    ctrl.on_nak(100, now=0.07, fill=100.0)  # stronger: W lowered for the severity
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(10_000 * (1 + 0.25) / 2)


def test_a_probe_grows_no_faster_than_half_the_smallest_room_takes_per_reaction():
    """Each growth of the probe is at most probe_step: geometric while probe_factor's
    growth is below it, then by probe_step a growth. Over a long path to short queues
    it grows slowly; over loopback to large ones as probe_factor says. The overshoot
    that step allows (until a NAK sent at the queue's 50 % acts, growing meanwhile)
    fills no more than PROBE_ROOM_SHARE of the room the receivers reported."""
    cfg = NakConfig(probe_after_s=0.2)

    def probing(rtt: float, room: float) -> list[float]:  # from a plateau of 20,000
        got = [probe_rate(cfg, rtt, steps, 20_000.0, 0.0, 20_000.0, room)
               for steps in range(1, 60)]
        return [r for r in got if r is not None]

    for rtt, room in ((0.05, 800), (0.0002, 4_000), (0.2, 200)):  # rooms: 40 % of queues
        rates = probing(rtt, room)
        per = max(1, math.ceil(rtt / cfg.step_s - 1e-9))
        most = probe_step(cfg, rtt, per, room)
        growths = [b - a for a, b in itertools.pairwise(rates)]
        assert 0 < max(growths) <= most * (1 + 1e-9)
        # what the probe adds while a NAK is on its way (react; a growth every ``per``
        # steps, so floor(react / growth) + 1 growths at most in that time), over react,
        # fills no more than PROBE_ROOM_SHARE of the room
        react = rtt + holdoff_s(cfg, rtt)  # a round trip and the hold-off: a queue NAKs at once
        span = (math.floor(react / (per * cfg.step_s)) + 1) * per  # steps they take
        added = max(b - a for a, b in zip(rates, rates[span:], strict=False))
        assert added * react <= PROBE_ROOM_SHARE * room * (1 + 1e-9)
    slow, fast = probing(0.05, 800), probing(0.0002, 4_000)
    assert slow[5] - slow[4] == pytest.approx(probe_step(cfg, 0.05, 1, 800))  # by the step
    assert fast[5] == pytest.approx(fast[0] * cfg.probe_factor ** 5)  # by probe_factor
    assert slow[5] < 0.6 * fast[5]
    assert fast[1] == pytest.approx(fast[0] * cfg.probe_factor)  # geometric at first
    assert probe_rate(cfg, 0.05, 40, 20_000.0, 0.0, 20_000.0, None) is None  # no room known
    # in the controller: the room the start reported lets it probe
    ctrl, plain = NakRateController(cfg), NakRateController(cfg)
    for c in (ctrl, plain):
        c.set_rtt(0.0002)
        c.on_nak(87, now=0.0)
    ctrl.set_probe_room(4_000)
    assert ctrl.rate(now=1.0) > 1.5 * plain.rate(now=1.0)


def test_a_queue_past_its_first_level_cuts_to_what_its_consumer_takes():
    """A queue NAK past the first level that says what the consumer took (``taken``) cuts
    to ``rate_shares`` of it, deeper than the level's factor where that leaves the sender
    above the consumer: a burst at 48,500 msgs/s into a consumer of 20,000 was cut only
    to 24,300 by 50, 75, 87 % and its queue overflowed. The first level keeps its factor
    (the consumer may just have met a burst); a path's NAK (what arrived, not what a
    consumer took) and a NAK with no rate keep theirs."""
    cfg = NakConfig(initial_rate_msgs=48_000, max_rate_msgs=1e6)

    def cut(level: int, **kw: object) -> float:
        ctrl = NakRateController(cfg)
        assert ctrl.on_nak(level, now=1.0, **kw) is True
        return ctrl.rate(now=1.0)

    assert cut(75, rate=20_000.0, taken=True) == pytest.approx(20_000 * 0.93)
    assert cut(87, rate=20_000.0, taken=True) == pytest.approx(20_000 * 0.87)
    assert cut(100, rate=20_000.0, taken=True) == pytest.approx(20_000 * 0.75)
    assert cut(50, rate=20_000.0, taken=True) == pytest.approx(48_000 * 0.9)
    assert cut(75, rate=20_000.0, path=True) == pytest.approx(48_000 * 0.7)
    assert cut(75, rate=20_000.0) == pytest.approx(48_000 * 0.7)
    assert cut(75) == pytest.approx(48_000 * 0.7)
    assert cut(75, rate=40_000.0, taken=True) == pytest.approx(40_000 * 0.93)  # a floor too
    ctrl = NakRateController(cfg)  # in the window of a first-level cut: deepened to it
    ctrl.on_nak(50, now=1.0, rate=20_000.0, taken=True)
    assert ctrl.on_nak(75, now=1.01, rate=20_000.0, taken=True) is True
    assert ctrl.rate(now=1.01) == pytest.approx(20_000 * 0.93)


def test_the_probe_does_not_grow_past_a_rate_a_consumers_queue_reported():
    """A queue's NAK that says what its consumer takes sets W there, and the probe stays
    off until the next episode: a probe from it doubled the limit before that queue's
    next NAK at 50 % came (a chaos run: 1,034 of 40,000 dropped). A path's NAK (a
    queueing delay: the rate arrived while a queue was on the path) and a start's
    measurement are not a consumer's word, and the probe goes on from them."""
    cfg = NakConfig(initial_rate_msgs=40_000, max_rate_msgs=1e7)

    def after(path: bool | None, t: float = 1.5) -> float:
        ctrl = NakRateController(cfg if path is not None else replace(cfg, probe_after_s=None))
        ctrl.set_rtt(0.0002)
        ctrl.set_probe_room(10_000)
        ctrl.on_nak(87, now=0.0, rate=10_000.0, path=bool(path))
        return ctrl.rate(now=t)

    plain = after(None)  # no probe at all
    assert after(False) == pytest.approx(plain)  # a consumer's rate: the curve alone
    assert after(True) > 1.5 * plain  # a path's: the probe
    begun = NakRateController(cfg)  # a start's plateau: the probe
    begun.set_rtt(0.0002)
    begun.set_probe_room(10_000)
    begun.begin(9_000.0, 10_000.0, now=0.0, ramp=False)
    assert begun.rate(now=1.5) > 1.5 * plain


def test_a_consumers_rate_far_below_what_was_sent_holds_the_probe_off_only_for_a_while():
    """A queue NAK whose rate is below TOLD_FAR of what was sent when the episode began
    (a fast consumer measured in its first stall: 4,571 msgs/s where it took 150,000)
    holds the probe off for TOLD_S, then the probe climbs back within a second; one
    near what was sent (100,000 of 150,000) still holds it off for good."""
    from nakflow.policy.rate import TOLD_FAR, TOLD_S

    cfg = NakConfig(initial_rate_msgs=150_000, max_rate_msgs=1e6)

    def limits(told: float) -> list[float]:
        ctrl = NakRateController(cfg)
        ctrl.set_rtt(0.001)
        ctrl.set_probe_room(4_000)
        ctrl.on_nak(87, now=1.0, rate=told, taken=True)
        return [ctrl.rate(now=1.0 + t) for t in (TOLD_S - 0.05, TOLD_S + 1.0)]

    assert 4_571 < TOLD_FAR * 150_000 < 100_000
    held, back = limits(4_571.0)
    assert held < 1.5 * 4_571 and back > 100_000  # the curve alone took 5.8 s
    _, near_later = limits(100_000.0)
    plain = NakRateController(replace(cfg, probe_after_s=None))  # no probe at all
    plain.on_nak(87, now=1.0, rate=100_000.0, taken=True)
    assert near_later == pytest.approx(plain.rate(now=1.0 + TOLD_S + 1.0))


def test_after_a_drain_the_limit_resumes_just_under_the_rate_the_receiver_reported():
    """A full queue (or path) drains at a deep cut; once no NAK came for quiet_s, the
    limit goes back to the lowest level's share of what the receiver said it takes, not
    along the curve from the drain's rate (the lab's link sat at half its rate for 2.5 s
    after each drain). Holds while it drains carry the receiver's later reports. Only
    for the path's NAKs (delay, loss, silence): their quiet means its queue drained."""
    cfg = NakConfig(initial_rate_msgs=4_000)
    ctrl = NakRateController(cfg)
    assert ctrl.on_nak(100, now=0.0, fill=100.0, rate=2_000.0, path=True) is True
    assert ctrl.rate(now=0.0) == pytest.approx(2_000 * 0.75)  # drain at 3/4 of it
    assert ctrl.on_nak(100, now=0.05, fill=100.0, rate=2_400.0, path=True) is False
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(2_400)  # ... its report is W
    assert ctrl.rate(now=0.149) == pytest.approx(2_000 * 0.75)  # still draining
    resumed = ctrl.rate(now=0.151)  # quiet_s without a NAK: the backlog is gone
    assert resumed == pytest.approx(2_400 * cfg.rate_shares[50], rel=0.01)
    assert ctrl.rate(now=2.0) > 2_400  # then the curve probes above it
    plain = NakRateController(cfg)  # a NAK without a rate: the curve from the cut
    plain.on_nak(100, now=0.0, fill=100.0)
    assert plain.rate(now=0.151) < 0.6 * resumed
    queue = NakRateController(cfg)  # a queue's NAK: quiet only means below its first
    queue.on_nak(100, now=0.0, fill=100.0, rate=2_000.0)  # level, and a consumer back
    queue.on_nak(100, now=0.05, fill=100.0, rate=2_400.0)  # from a pause needs spare
    assert queue.rate(now=0.151) < 0.9 * resumed  # rate to catch up: the curve


def test_only_the_receiver_of_the_last_cut_moves_the_plateau_with_a_hold():
    """Another receiver's NAK that only holds the limit (a fast one that was descheduled
    a moment) says nothing of what the slow one takes: its rate must not lift W, or the
    limit would resume at the fast one's rate after the drain."""
    ctrl = NakRateController(NakConfig(initial_rate_msgs=4_000))
    assert ctrl.on_nak(100, now=0.0, fill=100.0, rate=2_000.0, source="slow", path=True)
    assert not ctrl.on_nak(50, now=0.05, fill=55.0, rate=10_000.0, source="fast", path=True)
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(2_000)
    assert not ctrl.on_nak(100, now=0.06, fill=100.0, rate=2_400.0, source="slow", path=True)
    assert ctrl.snapshot()["last_cut_base"] == pytest.approx(2_400)
    # resumed at (the first level's share of) the slow one's rate, not the fast one's
    share = ctrl.config.rate_shares[50]
    assert ctrl.rate(now=0.17) == pytest.approx(2_400 * share, rel=1e-3)


def test_min_rate_floors_every_cut():
    cfg = NakConfig(initial_rate_msgs=1_000, min_rate_msgs=100, hold_s=0)
    ctrl = NakRateController(cfg)
    for i in range(50):
        ctrl.on_nak(100, now=i * 0.06)
    assert ctrl.rate(now=2.94) == 100


def test_unknown_levels_map_down_and_below_lowest_is_ignored():
    ctrl = NakRateController(NakConfig(initial_rate_msgs=10_000))
    assert ctrl.on_nak(10, now=0.0) is False
    assert ctrl.ignored == 1
    ctrl.on_nak(80, now=0.0)  # between 75 and 87: acts as 75
    assert ctrl.rate(now=0.0) == 7_000


def test_initial_rate_below_max_ramps_from_first_use():
    ctrl = NakRateController(NakConfig(initial_rate_msgs=1_000, max_rate_msgs=2_000))
    assert ctrl.rate(now=5.0) == 1_000
    assert ctrl.rate(now=5.0 + recovery_bound_s(ctrl.config)) == 2_000


def test_config_rejects_nonsense():
    with pytest.raises(ConfigError):
        NakConfig(min_rate_msgs=0)
    with pytest.raises(ConfigError):
        NakConfig(levels=(75, 50))
    with pytest.raises(ConfigError):
        NakConfig(cut_factors={50: 0.9})
    with pytest.raises(ConfigError):
        NakConfig(initial_rate_msgs=1)  # below min_rate_msgs
    with pytest.raises(ConfigError):
        NakConfig(ramp_factor=1.0)
    assert NakConfig(initial_rate_msgs=1e9).start_rate_msgs == NakConfig().max_rate_msgs


def test_no_config_takes_nan_for_a_number():
    """NaN passes every bound (each comparison with it is false): ``linger_s``,
    ``hello_interval_s``, ``hold_s``, ``backoff_s`` and five more fields took it before.
    Every float field of every config, the Spark writer's too, refuses it by name."""
    import dataclasses

    from nakflow.config import AckConfig, ReceiverConfig, RepairConfig, SenderConfig
    from spark_adapter.config import WriterConfig

    base = {WriterConfig: {"data": "tcp://127.0.0.1:1", "feedback": "tcp://127.0.0.1:2"}}
    checked = 0
    for cls in (NakConfig, AckConfig, RepairConfig, SenderConfig, ReceiverConfig,
                WriterConfig):
        for f in dataclasses.fields(cls):
            default = cls(**base.get(cls, {}))
            if isinstance(getattr(default, f.name), float) or "float" in str(f.type):
                with pytest.raises(ConfigError, match=f"{cls.__name__}.{f.name} is NaN"):
                    cls(**{**base.get(cls, {}), f.name: float("nan")})
                checked += 1
    assert checked >= 30


def test_a_config_value_of_the_wrong_kind_is_named_not_taken():
    """``capacity_msgs="100"`` failed deep in the queue (``'<' not supported between
    instances of 'str' and 'int'``), ``float("inf")`` with an OverflowError, and 10.5 or
    True were taken as a capacity. Every int, float, bool and str field of every config
    refuses a value of another kind by name; numpy's numbers are taken as Python's."""
    import dataclasses

    import numpy as np

    from nakflow.config import AckConfig, ReceiverConfig, RepairConfig, SenderConfig
    from spark_adapter.config import WriterConfig

    base = {WriterConfig: {"data": "tcp://127.0.0.1:1", "feedback": "tcp://127.0.0.1:2"}}
    wrong = {"int": ("100", True, 10.5, float("inf")), "float": ("3", True, b"1"),
             "bool": (1, "yes", None), "str": (5, b"nak")}
    checked = 0
    for cls in (NakConfig, AckConfig, RepairConfig, SenderConfig, ReceiverConfig,
                WriterConfig):
        for f in dataclasses.fields(cls):
            kind, _, rest = str(f.type).partition(" | ")
            if kind not in wrong or rest not in ("", "None"):
                continue
            for value in wrong[kind]:
                if rest and value is None:
                    continue
                with pytest.raises(ConfigError, match=f"^{cls.__name__}.{f.name} must be "):
                    cls(**{**base.get(cls, {}), f.name: value})
            checked += 1
    assert checked >= 60
    rx = ReceiverConfig(capacity_msgs=np.int64(7), hello_interval_s=np.float32(0.25))
    assert (rx.capacity_msgs, rx.hello_interval_s) == (7, 0.25)
    assert type(rx.capacity_msgs) is int and type(rx.hello_interval_s) is float
    assert ReceiverConfig(sender_gone_s=None, capacity_msgs=5).sender_gone_s is None
    assert SenderConfig(max_rate_msgs=1000).max_rate_msgs == 1000  # an int is a number
    # inf for a sender's limit: OverflowError in none and ack, at the first send; in a
    # Spark writer's options, a failure of every task
    for make in (lambda v: SenderConfig(max_rate_msgs=v),
                 lambda v: WriterConfig.from_options({**base[WriterConfig],
                                                      "max_rate_msgs": str(v)})):
        with pytest.raises(ConfigError, match="max_rate_msgs must be a finite number > 0, "
                                              "or None"):
            make(float("inf"))
    with pytest.raises(ConfigError, match="burst_s must be a finite number > 0"):
        NakConfig(burst_s=float("inf"))  # an OverflowError at the first send
    with pytest.raises(ConfigError, match=r"epoch must lie in 0\.\.2\*\*64-1, not "):
        SenderConfig(epoch=10**20)  # an OverflowError at the first frame


naks = st.lists(st.tuples(st.floats(0.0, 0.5), st.sampled_from([1, 50, 60, 75, 87, 99, 100])),
                max_size=60)


@given(naks)
def test_limit_stays_within_bounds_under_any_nak_sequence(events):
    cfg = NakConfig(min_rate_msgs=10, max_rate_msgs=1e5)
    ctrl = NakRateController(cfg)
    now = 0.0
    for gap, level in events:
        now += gap
        ctrl.on_sent(100, now=now)
        ctrl.on_nak(level, now=now)
        assert cfg.min_rate_msgs <= ctrl.rate(now=now) <= cfg.max_rate_msgs
        assert cfg.min_rate_msgs <= ctrl.rate(now=now + gap) <= cfg.max_rate_msgs


@given(st.lists(st.tuples(st.floats(0.0, 0.0999), st.sampled_from([50, 75, 87, 100])),
                min_size=1, max_size=80))
def test_a_nak_in_every_window_never_lets_the_rate_rise(events):
    """Gaps up to just under quiet_s (2 windows): receivers' repeats come late, never early."""
    ctrl = NakRateController(NakConfig(initial_rate_msgs=50_000))
    now = 0.0
    ctrl.on_nak(50, now=now)
    last = ctrl.rate(now=now)
    for gap, level in events:
        probe = ctrl.rate(now=now + gap)  # any moment before the next NAK
        assert probe <= last
        now += gap
        ctrl.on_nak(level, now=now)
        rate = ctrl.rate(now=now)
        assert rate <= last
        last = rate


@settings(max_examples=60)
@given(naks, st.floats(1e2, 1e6))
def test_after_naks_stop_rate_returns_to_max_within_bound(events, max_rate):
    cfg = NakConfig(min_rate_msgs=10, max_rate_msgs=max_rate)
    ctrl = NakRateController(cfg)
    now = 0.0
    ctrl.rate(now=now)  # first use starts the clock (and the slow-start ramp)
    for gap, level in events:
        now += gap
        ctrl.on_nak(level, now=now)
    bound = recovery_bound_s(ctrl.config)
    assert math.isfinite(bound)
    assert ctrl.rate(now=now + bound) == cfg.max_rate_msgs
    assert ctrl.next_deadline() is None


def test_rate_memory_recalls_a_recent_paths_rate_and_forgets_old_and_many():
    from nakflow.policy.rate_memory import RateMemory

    mem = RateMemory(max_age_s=10.0, max_paths=2)
    mem.remember(("s", ("tcp://a",)), 80_000.0, now=100.0)
    assert mem.recall(("s", ("tcp://a",)), now=105.0) == 80_000.0
    assert mem.recall(("s", ("tcp://b",)), now=105.0) is None  # another path
    assert mem.recall(("s", ("tcp://a",)), now=110.5) is None  # too old
    mem.remember("b", 1.0, now=0.0)
    mem.remember("c", 2.0, now=0.0)  # a third path: the least recent one goes
    assert mem.recall(("s", ("tcp://a",)), now=101.0) is None and mem.recall("c", now=1) == 2


def test_a_nak_while_less_than_the_floor_was_sent_cuts_the_limit_to_the_floor():
    """The sender sent next to nothing yet (its meter: below min_rate_msgs) and a NAK(100)
    comes: the limit goes down to the floor. It held where it was (a cut to the floor
    from a base at the floor looked like no cut), and a sender under forged NAK(100)s
    that ended its start before it sent anything kept 5,000 msgs/s, 0 cuts."""
    cfg = NakConfig(initial_rate_msgs=5_000, min_rate_msgs=2_000)
    ctrl = NakRateController(cfg)
    assert ctrl.rate(now=0.0) == 5_000
    measured(ctrl, 1_000, 0.0, 0.05)  # 1,000 msgs/s: below the floor
    assert ctrl.on_nak(100, now=0.05)
    assert ctrl.rate(now=0.05) == 2_000 and ctrl.cuts == 1
    assert not ctrl.on_nak(100, now=0.06)  # at the floor: nothing left to cut
    assert ctrl.rate(now=0.06) == 2_000 and ctrl.cuts == 1


def test_a_nak_reporting_a_rate_below_what_was_sent_cuts_even_below_the_floors_base():
    """The same with the receiver's rate in the NAK (the forger's: 1 msg/s). A base and
    a target both clamped to the floor looked like "the receiver takes more than is sent"
    and held: a plain sender under forged NAK(100)s once ended with 1,137 of them and no
    cut (tests/test_security.py). What it takes, 0.75 msgs/s, is compared with what was
    sent, 1,000 msgs/s, before the floor."""
    cfg = NakConfig(initial_rate_msgs=5_000, min_rate_msgs=2_000)
    ctrl = NakRateController(cfg)
    assert ctrl.rate(now=0.0) == 5_000
    measured(ctrl, 1_000, 0.0, 0.05)
    assert ctrl.on_nak(100, now=0.05, rate=1.0)
    assert ctrl.rate(now=0.05) == 2_000 and ctrl.cuts == 1
    held = NakRateController(cfg)  # a receiver that takes more than was sent: held
    measured(held, 1_000, 0.0, 0.05)
    assert not held.on_nak(100, now=0.05, rate=3_000.0) and held.rate(now=0.05) == 5_000


def test_validated_rate_is_the_limit_but_no_more_than_was_really_sent():
    ctrl = NakRateController(NakConfig(initial_rate_msgs=5_000))
    assert ctrl.validated_rate(now=0.0) is None  # nothing sent over a period yet
    for i in range(100):  # 1,000 msgs/s for 0.1 s, far below the limit
        ctrl.on_sent(1, now=i / 1_000)
    assert ctrl.validated_rate(now=0.1) == pytest.approx(1_000, rel=0.05)
    for i in range(1_000):  # then 1,000,000 msgs/s, above it: the limit is what counts
        ctrl.on_sent(1_000, now=0.1 + i / 1_000)
    assert ctrl.validated_rate(now=1.1) == ctrl.rate(now=1.1)


def test_every_cut_and_hold_is_put_down_to_a_receiver_and_a_signal():
    """NakFlow records who and what: counts per signal and per receiver, the limiting
    receiver (the last cut's), the cuts themselves; a NAK from an older receiver (no
    signal) counts as "unknown"."""
    from nakflow.policy.registry import NakFlow
    from nakflow.wire import Nak

    flow = NakFlow("s", NakConfig(initial_rate_msgs=10_000))
    flow.on_feedback(Nak("s", "slow", 75, 80.0, 0.0, 1, 9_000.0), now=0.0)  # queue: cut
    flow.on_feedback(Nak("s", "slow", 75, 80.0, 0.0, 1, 9_000.0), now=0.01)  # same window
    flow.on_feedback(Nak("s", "far", 87, 90.0, 0.0, 2, 0.0), now=0.02)  # delay: deeper
    flow.on_feedback(Nak("s", "old", 50, 55.0, 0.0), now=0.03)  # unknown signal: hold
    flow.on_feedback(Nak("other", "x", 100, 100.0, 0.0, 1, 0.0), now=0.04)  # not ours
    snap = flow.snapshot()
    assert snap["cuts_by_signal"] == {"delay": 1, "queue": 1}
    assert snap["holds_by_signal"] == {"queue": 1, "unknown": 1}
    assert snap["by_receiver"] == {"slow": {"cuts": 1, "holds": 1},
                                   "far": {"cuts": 1, "holds": 0},
                                   "old": {"cuts": 0, "holds": 1}}
    assert snap["limiting"] == {"receiver": "far", "signal": "delay", "since_s": 0.02}
    assert [(e["signal"], e["receiver"], e["level"]) for e in snap["cut_events"]] == [
        ("queue", "slow", 75), ("delay", "far", 87)]
    assert snap["cut_events"][1]["rate"] == pytest.approx(10_000 * 0.5)


def test_the_per_receiver_table_is_bounded():
    from nakflow.policy.attribution import MAX_RECEIVERS, CutLog

    log = CutLog()
    log.cut(0.0, "queue", "real", 75, 1.0)
    log.cut(0.1, "queue", "real", 75, 1.0)
    for i in range(10 * MAX_RECEIVERS):
        log.hold("queue", f"made-up-{i}")
    snap = log.snapshot()
    assert len(log._receivers) <= MAX_RECEIVERS
    assert next(iter(snap["by_receiver"])) == "real"  # the one that cut stays


def test_a_ramp_on_from_a_start_grows_a_step_by_what_the_room_takes_in_while_a_nak_comes():
    """A start that ends ramping on (its rounds held by the receivers' room on a long
    path) hands the limit to the ramp with the RTT and room known: a step then adds no
    more than ``room_step`` (x1.25 from 15,700 msgs/s at 50 ms over queues of 2,000
    overflowed them by 5,110 before the NAK came back). With no room known (no start),
    or where x1.25 adds less (loopback), the ramp is as before."""
    cfg = NakConfig(initial_rate_msgs=5_000)

    def ramp(rtt: float | None, room: float | None, rate: float) -> list[float]:
        ctrl = NakRateController(cfg)
        if rtt is not None:
            ctrl.set_rtt(rtt)
        if room is not None:
            ctrl.set_probe_room(room)
        ctrl.begin(rate, rate, now=0.0, ramp=True)
        return [ctrl.rate(now=k * cfg.step_s + 1e-6) for k in range(1, 8)]

    long_path = ramp(0.05, 800, 15_700)
    most = room_step(cfg, 0.05, cfg.step_s, 800)
    assert 1_000 < most < 5_000
    steps = [(a, b) for a, b in itertools.pairwise(long_path)]
    assert all(b - a == pytest.approx(min(a * 0.25, most)) for a, b in steps)
    assert long_path[-1] < 0.7 * ramp(0.05, None, 15_700)[-1]  # no room known: x1.25 a step
    loopback = ramp(0.0002, 4_000, 100_000)  # the bound (~150,000 a step) is above
    assert loopback == pytest.approx(ramp(None, None, 100_000))  # x1.25 up to 480,000
