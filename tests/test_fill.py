"""FillMonitor: levels, repeats, hysteresis and suppression at explicit times."""

from collections.abc import Callable

import pytest

from nakflow import ConfigError, NakConfig
from nakflow.policy.registry import FillMonitor

A, B = ("a", 1), ("b", 1)  # streams: (sender, epoch)


def test_silent_without_overload():
    m = FillMonitor(100)
    assert [m.update(d, now=i * 0.01) for i, d in enumerate(range(50))] == [None] * 50
    assert m.next_deadline() is None
    assert m.naks_sent == {}


def test_emits_each_level_when_first_reached_even_within_a_window():
    m = FillMonitor(100)
    out = [m.update(d, now=0.0) for d in (49, 50, 60, 75, 80, 87, 99, 100)]
    assert out == [None, 50, None, 75, None, 87, None, 100]


def test_repeats_highest_held_level_once_per_window():
    m = FillMonitor(100, NakConfig(window_s=0.05))
    assert m.update(80, now=0.0) == 75
    assert m.update(80, now=0.03) is None
    assert m.next_deadline() == pytest.approx(0.05)
    assert m.update(80, now=0.05) == 75
    assert m.update(80, now=0.07) is None
    assert m.update(80, now=0.101) == 75
    assert m.naks_sent == {75: 3}


def test_hysteresis_holds_a_level_until_well_below_it():
    m = FillMonitor(100, NakConfig(hysteresis_pct=10))
    assert m.update(50, now=0.0) == 50
    assert m.update(45, now=0.01) is None and m.held_level == 50
    assert m.update(41, now=0.1) == 50  # still held: repeat
    assert m.update(39, now=0.2) is None and m.held_level is None
    assert m.update(45, now=0.3) is None  # must reach 50 again
    assert m.update(50, now=0.31) == 50


def test_falling_fill_repeats_the_lower_level():
    m = FillMonitor(100, NakConfig(hysteresis_pct=5))
    assert m.update(90, now=0.0) == 87
    assert m.update(80, now=0.06) == 75


def test_suppressed_by_an_equal_or_higher_nak_heard_in_window():
    m = FillMonitor(100)
    m.on_heard(87, now=0.0)
    assert m.update(80, now=0.01) is None
    assert m.suppressed == 1
    assert m.update(90, now=0.02) is None  # 87 heard covers our 87 too
    assert m.suppressed == 2
    assert m.update(100, now=0.03) == 100  # stronger than anything heard
    m2 = FillMonitor(100)
    m2.on_heard(50, now=0.0)
    assert m2.update(80, now=0.01) == 75  # weaker heard: not covered
    m3 = FillMonitor(100)
    m3.on_heard(87, now=0.0)
    assert m3.update(80, now=0.06) == 75  # heard NAK is older than a window


def test_capacity_must_be_positive():
    with pytest.raises(ConfigError):
        FillMonitor(0)


def test_backpressure_episodes_use_high_and_low_watermarks():
    from nakflow.policy.backpressure import BackpressureEpisodes

    ep = BackpressureEpisodes(100)
    for t, depth in [(0.0, 90), (1.0, 100), (1.5, 60), (2.0, 49), (3.0, 100), (3.2, 10)]:
        ep.observe(depth, now=t)
    snap = ep.snapshot(now=4.0)
    assert snap == {"backpressure_events": 2, "backpressure_duration_s": 1.2}


def test_timeline_keeps_one_sample_per_interval_and_stays_bounded():
    from nakflow.core.timeline import Timeline

    tl = Timeline(("depth",), interval_s=10, max_samples=16)
    for i in range(100):
        tl.sample(i, i)
    assert tl.as_dict()["depth"] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]  # 10 s apart
    for i in range(100, 10_000):
        tl.sample(i, i)
    assert len(tl) < 16 and tl.interval_s > 10  # halved and coarsened, never over the bound
    series = tl.as_dict(t0=0.0)
    assert series["t"][0] == 0.0 and series["t"][-1] > 9000  # still spans the whole run
    with pytest.raises(ValueError):
        tl.sample(1e6, 1, 2)


def test_with_an_rtt_a_rising_fill_is_acted_on_one_rtt_ahead():
    """Fill rising 100 points/s with a 100 ms RTT: NAK 50 at 40 % (it will be at 50 % when
    the cut takes effect), not at 50 %; without an RTT, at 50 %; never the top level on a
    prediction alone; a falling fill predicts nothing."""
    def first_nak(rtt_s: float) -> tuple[int, int]:
        m = FillMonitor(100)
        m.set_rtt(rtt_s)
        for step in range(100):  # one message every 10 ms: 100 % of the queue per s
            if (level := m.update(step, now=step * 0.01)) is not None:
                return step, level
        raise AssertionError("no NAK")

    assert first_nak(0.0) == (50, 50)
    step, level = first_nak(0.1)
    assert level == 50 and 38 <= step <= 42
    m = FillMonitor(100)
    m.set_rtt(10.0)  # an absurd RTT: the prediction saturates below the top level
    levels = {m.update(d, now=d * 0.01) for d in range(0, 99)}
    assert 100 not in levels and m.predicted > 0
    m = FillMonitor(100)
    m.set_rtt(0.1)
    out = [m.update(d, now=(60 - d) * 0.01) for d in range(60, 0, -1)]
    assert set(out) == {None} or out[0] == 50  # only today's fill counts going down
    assert m.predicted == 0


def test_rtt_scaled_holdoff_stays_below_the_window():
    cfg = NakConfig(backoff_rtts=0.5)

    class Zero:
        def random(self) -> float:
            return 0.999

    m = FillMonitor(100, cfg, rng=Zero())
    m.set_rtt(0.04)
    assert m.update(60, now=0.0) is None
    assert m.next_deadline() == pytest.approx(0.0 + 0.02 * 0.999 / 1, rel=0.5)
    m.set_rtt(10.0)
    assert m._backoff_s == pytest.approx(0.9 * cfg.window_s)


# -- the path as congestion: loss in flight and queueing delay -----------------------
def test_loss_in_flight_counts_as_fill_by_its_share_per_span():
    from nakflow.policy.fill import LossMonitor

    m = LossMonitor(NakConfig().loss_fill, window_s=0.05, min_msgs=64, min_frames=10)
    assert m.observe(0, 0, now=0.0) == 0.0  # the first call starts a span
    # (messages missing, arrived; gaps and frames are keywords)
    assert m.observe(1, 99, gap_events=1, frames=10, now=0.06) == 0.0  # 1 %: repair only
    assert m.observe(13, 187, gap_events=3, frames=20, now=0.12) == 0.5  # 12 %: lowest level
    assert m.observe(13, 187, gap_events=3, frames=20, now=0.14) == 0.5  # held a window
    assert m.observe(73, 227, gap_events=4, frames=22, now=0.18) == 0.0  # the hold is over;
    # 60 % of messages but 3 frames: too few to judge yet, the span goes on ...
    assert m.observe(80, 240, gap_events=5, frames=28, now=0.22) == 1.0  # ... to 10 frames
    assert m.observe(85, 260, gap_events=6, frames=30, now=0.30) == 0.0  # too few again
    assert m.windows == 2


def test_random_loss_at_many_receivers_is_not_read_as_congestion():
    """The sender acts on the worst receiver: 200 receivers, 1 % of 16-message frames
    lost at random at 320 frames/s (slow start's first rate) for 2 s. Judged over 100
    frames no receiver's loss reads as a fill (expected 1e-4 times); judged per 50 ms
    window (16 frames, the rule before) it did about 90 times."""
    import random

    from nakflow.policy.fill import LossMonitor

    def fills(min_frames: int) -> int:
        rng = random.Random(5)
        n = 0
        for _ in range(200):
            m = LossMonitor(NakConfig().loss_fill, 0.05, 64, min_frames)
            lost = arrived = gaps = frames = 0
            for i in range(640):
                if rng.random() < 0.01:
                    lost, gaps = lost + 16, gaps + 1
                else:
                    arrived, frames = arrived + 16, frames + 1
                n += m.observe(lost, arrived, gap_events=gaps, frames=frames,
                               now=i / 320) > 0 and m._fill_until == i / 320 + 0.05
        return n

    assert fills(NakConfig().loss_min_frames) == 0
    assert fills(1) > 30


def test_queueing_delay_counts_as_fill_and_clock_offsets_cancel():
    from nakflow.policy.fill import DelayMonitor

    m = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    t = 0.0
    for _ in range(4):  # sender a's clock is 3 s behind ours, b's 2 s ahead; no queue
        m.on_delay(A, 3.0 + 0.001)
        m.on_delay(B, -2.0 + 0.001)
        t += 0.06
        assert m.observe(now=t) == 0.0
    m.on_delay(A, 3.0 + 0.001 + 0.12)  # a's path now queues 120 ms ...
    m.on_delay(A, 3.0 + 0.001 + 0.30)  # ... (the lowest of the window counts)
    m.on_delay(B, -2.0 + 0.001)
    # 120 ms lies between 100 ms (0.75) and 200 ms (0.87): the fill in between, so a
    # queue that shrinks shows a falling fill
    assert m.observe(now=t + 0.06) == pytest.approx(0.774) and m.queueing_s == pytest.approx(
        0.12)
    assert m.observe(now=t + 0.08) == pytest.approx(0.774)  # held within the window
    m.on_delay(A, 3.0 + 0.001 + 0.45)
    assert m.observe(now=t + 0.12) == 1.0
    m.forget(A)  # a's END: its silence from now on means nothing
    assert m.observe(now=t + 0.18) == 0.0


def test_a_streams_first_frames_set_the_delay_base():
    """A sender starting faster than a slow link: its first window's frames are the least
    queued it will ever send, so the queue the second window shows is judged against
    them (before, the base came from the second window: the queue already 200 ms deep
    counted as none, and the lab's first NAK came a window later)."""
    from nakflow.policy.fill import DelayMonitor

    m = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    m.on_delay(A, 0.002)
    m.on_delay(A, 0.060)
    assert m.observe(now=0.05) == 0.0  # one window is no stream yet
    m.on_delay(A, 0.150)  # the link's queue grows
    m.on_delay(A, 0.210)
    assert m.observe(now=0.10) == pytest.approx(0.8076)  # 148 ms: 0.75 .. 0.87
    assert m.queueing_s == pytest.approx(0.148)


def test_a_congested_sender_falling_silent_counts_as_more_congestion_for_a_while():
    """A multicast repair holding everything behind a lost packet, or a link dropping
    all: the frames stop. Silence from a path that was queueing is not an empty path."""
    from nakflow.policy.fill import DELAY_SILENCE_S, DelayMonitor

    m = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    for i in range(3):
        m.on_delay(A, 0.010)  # the base
        m.observe(now=i * 0.06)
    m.on_delay(A, 0.010 + 0.06)  # 60 ms queueing: past the first level
    assert m.observe(now=0.24) == pytest.approx(0.55)
    assert m.observe(now=0.30) == pytest.approx(0.774)  # silent: 60 ms + 60 ms of silence
    assert m.observe(now=0.60) == 1.0  # 60 ms + 360 ms
    assert m.silent_windows == 2
    assert m.observe(now=0.24 + DELAY_SILENCE_S + 0.1) == 0.0  # gone quiet for good
    quiet = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    quiet.on_delay(B, 0.010)
    quiet.observe(now=0.0)
    quiet.on_delay(B, 0.011)
    assert quiet.observe(now=0.06) == 0.0
    assert quiet.observe(now=1.0) == 0.0  # a sender that pauses on an empty path: nothing


def test_a_sender_that_ended_leaves_no_silence_behind():
    """END read in the same window as the sender's queued frames (a receiver back from a
    stop reads it at the end of its backlog): those frames must not make the sender
    congested again, or its silence after END holds the fill up for DELAY_SILENCE_S."""
    from nakflow.policy.fill import DelayMonitor

    m = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    for i in range(3):
        m.on_delay(A, 0.010)
        m.observe(now=i * 0.06)
    m.on_delay(A, 0.010 + 0.06)  # 60 ms queueing: past the first level ...
    m.forget(A)  # ... then its END
    assert m.observe(now=0.24) == 0.0
    assert m.observe(now=0.60) == 0.0 and m.silent_windows == 0


def test_a_consumer_that_emptied_the_queue_when_it_last_took_is_away_not_slow():
    """Live, on two cores, a consumer that keeps up whenever it runs does not run for
    some tens of ms (its thread descheduled, the GIL with the I/O thread), and the queue
    fills meanwhile: not news. Once it takes only part of what waits (slower than what
    arrives), or the queue overflowed, it is."""
    from nakflow.core.seqtrack import SequenceTracker
    from nakflow.policy.signals import NEWS, NOT_NEWS, FillSignals

    def signals() -> tuple[FillSignals, int]:
        sig, delivered = FillSignals(NakConfig(), capacity_msgs=1000, on=True), 0
        for i in range(10):  # each look, it took all there was
            sig.on_consumed(delivered, 100, i * 0.001)
            delivered += 100
        return sig, delivered

    tracker = SequenceTracker()
    sig, delivered = signals()
    sig.on_consumed(delivered, 600, 0.011)  # it took the last 100; then 600 came
    sig.seen_depth(600, 0, tracker, now=0.011)
    assert sig.judge(0.012) == NOT_NEWS
    sig.on_consumed(delivered + 100, 700, 0.02)  # back: it took 100 of the 600
    sig.seen_depth(700, 0, tracker, now=0.02)
    assert sig.judge(0.02) == NEWS
    sig, delivered = signals()
    sig.on_consumed(delivered, 1000, 0.011)
    sig.seen_depth(1000, 5, tracker, now=0.011)  # ... and the queue overflowed
    assert sig.judge(0.012) == NEWS


def test_a_standing_delay_older_than_the_base_period_becomes_the_new_base():
    from nakflow.policy.fill import DELAY_BASE_S, DelayMonitor

    m = DelayMonitor(NakConfig().delay_fill, window_s=0.05)
    m.on_delay(A, 0.001)
    m.observe(now=0.0)
    t = 0.0
    while t < DELAY_BASE_S + 20:  # a route change: 80 ms more, for good
        t += 0.05
        m.on_delay(A, 0.081)
        m.observe(now=t)
    assert m.queueing_s == pytest.approx(0.0)


def test_path_signals_are_checked_and_can_be_switched_off():
    with pytest.raises(ConfigError):
        NakConfig(loss_fill=((0.1, 0.5), (0.2, 0.75)))  # shares must decrease
    with pytest.raises(ConfigError):
        NakConfig(delay_fill=((0.0, 0.5),))
    from nakflow import ReceiverConfig, ReceiverCore

    core = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="r",
                                       capacity_msgs=100,
                                       nak=NakConfig(loss_fill=(), delay_fill=()),
                                       max_streams=10), now=0.0)
    core.tracker.on_data("x", 1, 0, 10)
    core.tracker.on_data("x", 1, 1_000, 10)  # 990 missing
    for i in range(5):
        assert core.seen_depth(0, now=i * 0.05) == 0


def test_a_switched_off_delay_monitor_keeps_nothing():
    """ack and none receivers have the monitor off: frames must not pile up in it."""
    from nakflow.policy.fill import DelayMonitor

    m = DelayMonitor((), window_s=0.05)
    for i in range(10_000):
        m.on_delay(f"s{i}", 0.01)
        m.observe(now=i * 0.001)
    assert m._win == {} and m._base == {}


class _Draw:
    """An rng that always draws ``u`` (the hold-off is then known)."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


def test_a_nak_does_not_wait_out_a_hold_off_the_queue_would_fill_in():
    """The hold-off is for suppression among receivers; when the fill's growth since the
    NAK fell due would reach the top level before it ends, the NAK goes now."""
    from nakflow.policy.fill import backoff_delay

    cfg = NakConfig(backoff_s=0.01, predict_rtts=0.0)
    holdoff = backoff_delay(0.9, cfg.backoff_s)  # about 9.9 ms
    slow, fast = FillMonitor(1_000, cfg, rng=_Draw(0.9)), FillMonitor(1_000, cfg, rng=_Draw(0.9))
    assert slow.update(500, now=0.0) is None and fast.update(500, now=0.0) is None  # due, held
    assert slow.update(510, now=0.001) is None  # +1 %/ms: 60 % at the hold-off's end: wait
    assert fast.update(600, now=0.001) == 50  # +10 %/ms: full within it: now
    assert (slow.hurried, fast.hurried) == (0, 1)
    assert slow.update(520, now=holdoff + 1e-6) == 50  # the slow one after its hold-off
    far = FillMonitor(1_000, cfg, rng=_Draw(0.9))
    far.set_rtt(0.2)  # a NAK sent now acts only after the queue is full anyway: it waits
    assert far.update(500, now=0.0) is None and far.update(600, now=0.001) is None
    assert far.hurried == 0


def test_a_steady_slow_consumer_is_slow_not_paused_and_a_stopped_one_is_paused():
    """A consumer of coarse messages (one 100 KB Arrow message every 0.2 s) leaves work
    waiting longer than PAUSE_S between takes every time: judged by its own gaps it is
    slow (a cut helps it), not paused (which undid the cut and the sender overran it,
    252 drops of 340). One that stops taking for several of its gaps has paused."""
    from nakflow.core.seqtrack import SequenceTracker
    from nakflow.policy.signals import NEWS, PAUSE, PAUSE_S, FillSignals

    tracker = SequenceTracker()
    sig = FillSignals(NakConfig(), capacity_msgs=4, on=True)
    delivered, now = 0, 0.0
    verdicts = []
    while now < 3.0:  # the I/O thread looks every 10 ms; the consumer takes one per 0.2 s
        now = round(now + 0.01, 3)
        if round(now * 100) % 20 == 0:
            delivered += 1
        sig.on_consumed(delivered, 4, now)
        sig.seen_depth(4, 0, tracker, now=now)
        if now > 1.0:
            verdicts.append(sig.judge(now))
    assert PAUSE_S < 0.2 and PAUSE not in verdicts and NEWS in verdicts
    while now < 4.0:  # it stops taking
        now = round(now + 0.01, 3)
        sig.on_consumed(delivered, 4, now)
        sig.seen_depth(4, 0, tracker, now=now)
        if sig.judge(now) == PAUSE:
            break
    assert 3.0 + 0.55 <= now <= 3.0 + 0.7  # three of its 0.2 s gaps, from its last take


def test_a_frame_read_late_in_a_chunk_waited_for_the_process_not_the_path():
    """The threaded receiver stamps each frame with the time it read it. Frames read
    120 ms into a chunk (a busy process) waited that long for it, not for the path: the
    delay fill discounts it (``reading_for``), as it does the I/O thread's lateness."""
    import random

    from nakflow import ReceiverConfig, ReceiverCore
    from nakflow.wire import Data, encode

    def queueing(discount: bool) -> float:
        core = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="r",
                                           capacity_msgs=100_000), now=0.0,
                            rng=random.Random(0))
        seq, t = 0, 0.0
        for window in range(6):
            core.late(0.0, t)  # woke on time
            for i in range(20):
                busy = 0.0 if window < 3 else 0.120 + 0.001 * i
                if discount:
                    core.reading_for(busy)
                core.receive_data(encode(Data("s", "tx", 1, seq, t - 0.001, (b"x",))),
                                  t + busy)
                seq += 1
            t += 0.2
            core.signals.delay.observe(now=t)
        return core.signals.delay.queueing_s

    assert queueing(False) == pytest.approx(0.120)  # taken for the path's
    assert queueing(True) == pytest.approx(0.0, abs=1e-9)


def test_a_consumer_that_keeps_up_whenever_it_runs_is_measured_at_what_it_took():
    """On shared cores a fast consumer's thread waits for a core for a few of the I/O
    thread's looks (it takes nothing), then takes everything that waited. Its rate is what
    it took over the time work waited: the looks where it caught up count too (counting
    only the others measured 0-15,000 msgs/s where it took 150,000, and a queue NAK
    carried that). One that never falls behind shows only the arrival rate: no measure.
    One that falls behind for good is measured at what it takes."""
    from nakflow.policy.rates import DrainMeter

    def run(take: Callable[[int, int], int], looks: int = 200) -> DrainMeter:
        meter, delivered, depth = DrainMeter(0.05), 0, 0
        for i in range(looks):  # a look every 2 ms; 300 messages arrive between two
            took = take(i, depth)
            delivered, depth = delivered + took, depth - took + 300
            meter.on_consumed(delivered, depth, i * 0.002)
        return meter

    starved = run(lambda i, depth: depth if i % 6 == 5 else 0)  # away 5 looks in 6
    assert starved.provisional(0.05) == pytest.approx(150_000, rel=0.05)
    assert run(lambda i, depth: depth).provisional(0.05) is None  # it never fell behind
    slow = run(lambda i, depth: min(depth, 100))  # 50,000 msgs/s of the 150,000
    assert slow.provisional(0.05) == pytest.approx(50_000, rel=0.01)
