"""The simulator: vectorised policies equal the scalar ones, an independent event-driven
model agrees, and the scenario outputs show what seed 001 claims."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from nakflow import AckConfig, NakConfig, RepairConfig
from nakflow.policy.registry import CreditGranter, FillMonitor
from nakflow.tables import parse_table
from simulations import SCENARIOS, SimParams, VecCreditGranter, VecFillMonitor, simulate
from simulations.cores import CoreSimParams, simulate_cores
from simulations.events import simulate_events
from tests.snippets import run_snippet


@pytest.mark.parametrize("rtt_s", [0.0, 0.03])
def test_vectorised_fill_monitor_decides_exactly_like_the_scalar_one(rtt_s):
    """Levels, repeats, hysteresis, suppression, hold-off; with an RTT also the predicted
    fill and the RTT-scaled hold-off."""
    rng = np.random.default_rng(7)
    n, cfg = 40, NakConfig()
    caps = rng.integers(50, 500, n)
    vec = VecFillMonitor(caps, cfg, rng=np.random.default_rng(99))
    draws = np.random.default_rng(99)  # the same stream, drawn one at a time in turn
    scalars = [FillMonitor(int(c), cfg, rng=draws) for c in caps]
    vec.set_rtt(rtt_s)
    for m in scalars:
        m.set_rtt(rtt_s)
    depth = rng.integers(0, caps + 1)
    decisions = 0
    for step in range(3_000):
        now = step * 0.001
        depth = np.clip(depth + rng.integers(-30, 31, n), 0, caps)  # random walks
        active = rng.random(n) > 0.05  # a few skip a step (paused)
        heard = np.where(rng.random(n) < 0.02, rng.choice([50, 75, 87, 100], n), 0)
        vec.on_heard(heard, now)
        for i, m in enumerate(scalars):
            if heard[i]:
                m.on_heard(int(heard[i]), now=now)
        got = vec.update(depth, now, active)
        want = [(m.update(int(d), now=now) or 0) if a else 0
                for m, d, a in zip(scalars, depth, active, strict=True)]
        assert got.tolist() == want, f"step {step}"
        decisions += sum(1 for w in want if w)
    assert decisions > 100  # the walk really crossed levels
    assert vec.suppressed == sum(m.suppressed for m in scalars) > 0
    assert vec.predicted == sum(m.predicted for m in scalars)
    assert (vec.predicted > 0) == (rtt_s > 0)


@pytest.mark.parametrize("max_share", [1.0, 0.5])
def test_vectorised_credit_granter_decides_exactly_like_the_scalar_one(max_share):
    rng = np.random.default_rng(11)
    s_count, n, cfg = 2, 15, AckConfig(max_share=max_share)
    caps = rng.integers(20, 200, n)
    vec = VecCreditGranter(s_count, caps, cfg)
    scalars = [CreditGranter(int(c), cfg) for c in caps]
    keys = [(f"s{s}", 1) for s in range(s_count)]
    pos = np.zeros((s_count, n), np.int64)
    grants = 0
    for step in range(2_000):
        now = step * 0.001
        arrive = rng.integers(0, 4, (s_count, n)) * (rng.random((s_count, n)) < 0.5)
        heard = (arrive > 0) | (step == 0)
        pos += arrive
        vec.on_sender(heard, pos, now)
        vec.on_enqueued(arrive)
        release = np.minimum(arrive, rng.integers(0, 4, (s_count, n)))
        vec.on_released(release)
        for i, g in enumerate(scalars):
            for s, key in enumerate(keys):
                if heard[s, i]:
                    g.on_sender(key, int(pos[s, i]), now=now)
                    g.on_enqueued(key, int(arrive[s, i]))
                g.on_released(key, int(release[s, i]))
        due, limit = vec.poll(now)
        for i, g in enumerate(scalars):
            want = dict(g.poll(now=now))
            got = {keys[s]: int(limit[s, i]) for s in range(s_count) if due[s, i]}
            assert got == want, f"step {step} receiver {i}"
            grants += len(want)
    assert grants > 1_000


@pytest.mark.parametrize("mode", ["nak", "ack", "none"])
def test_event_driven_model_agrees_with_the_vectorised_one(mode):
    """Agreement within 5 % on goodput, 10 % on queue peak and drops (measured: < 1 %)."""
    p = SimParams(receivers=3, slow=1, slow_fraction=0.25, consume_rate_msgs=8_000.0,
                  sender_max_rate_msgs=20_000.0, capacity_msgs=500, rtt_s=0.01, duration_s=3.0)
    vec, evt = simulate(p, mode, seed=3), simulate_events(p, mode, seed=3)
    for key in ("overall", "min"):
        assert vec["goodput"][key] == pytest.approx(evt["goodput"][key], rel=0.05)
    assert vec["queue_peak"] == pytest.approx(evt["queue_peak"], rel=0.10)
    assert vec["dropped"] == pytest.approx(evt["dropped"], rel=0.10, abs=10)
    assert vec["lost"] == evt["lost"] == 0


def test_same_seed_same_result_other_seed_other_draws():
    p = SimParams(receivers=20, slow=2, rtt_s=0.01, rtt_jitter=0.5, duration_s=1.0)
    a, b, c = (simulate(p, "nak", seed=s) for s in (5, 5, 6))
    strip = lambda r: {k: v for k, v in r.items() if k != "wall_s"}  # noqa: E731
    assert strip(a) == strip(b)
    assert a["receivers"][0]["rtt_s"] != c["receivers"][0]["rtt_s"]


def test_ack_throughput_falls_as_window_over_rtt_nak_does_not():
    base = dict(receivers=3, duration_s=4.0, capacity_msgs=2_000, consume_rate_msgs=50_000.0,
                sender_max_rate_msgs=100_000.0)
    out = {}
    for rtt in (0.001, 0.1, 0.2):
        p = SimParams(rtt_s=rtt, **base)
        out[rtt] = {m: simulate(p, m, seed=1)["goodput"]["overall"] for m in ("nak", "ack")}
    # window (2,000) >= BDP (50k x 1 ms): ACK at the receivers' rate
    assert out[0.001]["ack"] == pytest.approx(50_000, rel=0.05)
    # window < BDP: about window / RTT. Re-grants go out once a quarter of the window is
    # free (and heartbeats re-grant too), so what is in flight is 3/4 to 1 window:
    # measured 0.75 (RTT 100 ms) and 0.94 (RTT 200 ms) x window / RTT.
    assert out[0.2]["ack"] < out[0.1]["ack"] < out[0.001]["ack"]
    for rtt in (0.1, 0.2):
        assert 0.6 * 2_000 / rtt < out[rtt]["ack"] < 1.0 * 2_000 / rtt, out
    # NAK does not fall as window / RTT. It does lose some (measured 45.3k, 37.4k, 32.3k
    # msgs/s at 1, 100, 200 ms: a 40 ms queue cannot hide a 200 ms reaction time), and
    # that is reported in the issue note rather than tuned away here.
    for rtt in (0.1, 0.2):
        assert out[rtt]["nak"] > 2 * out[rtt]["ack"], out
        assert out[rtt]["nak"] > 0.6 * out[0.001]["nak"], out


def test_dead_receiver_stalls_ack_until_the_timeout_nak_keeps_the_others_going():
    p = SimParams(receivers=5, dead=1, dead_at_s=2.0, duration_s=9.0,
                  consume_rate_msgs=20_000.0, receiver_timeout_s=5.0)
    nak, ack = simulate(p, "nak", seed=1), simulate(p, "ack", seed=1)
    assert ack["recovery_s"] == pytest.approx(5.0, abs=0.3)
    assert nak["recovery_s"] is not None and nak["recovery_s"] < 0.2
    assert nak["goodput"]["min"] > 0.9 * 20_000  # every live receiver at its rate
    assert nak["dropped_normal"] == 0 and ack["dropped_normal"] == 0


def test_nak_feedback_stays_flat_as_receivers_grow_ack_grows_linearly():
    fb = {}
    for n in (10, 1_000):
        p = SimParams(receivers=n, duration_s=2.0, capacity_msgs=2_000, rtt_s=0.002,
                      rtt_jitter=0.5, consume_rate_msgs=20_000.0)
        fb[n] = {m: simulate(p, m, seed=2)["feedback_per_s_at_sender"] for m in ("nak", "ack")}
    assert fb[1_000]["nak"] < 3 * max(fb[10]["nak"], 1.0), fb  # suppression
    assert fb[1_000]["ack"] == pytest.approx(100 * fb[10]["ack"], rel=0.3), fb


def test_nak_converges_to_the_slow_receivers_rate_with_zero_overflow():
    """Stated bound: within 5 % of the slow receiver's rate (measured: 0.6 % below)."""
    result = simulate(SimParams(**SCENARIOS["slow-receiver"].base), "nak", seed=0)
    slow = result["receivers"][0]
    assert slow["role"] == "slow"
    assert slow["goodput"] == pytest.approx(slow["consume_rate"], rel=0.05)
    assert result["dropped"] == 0 and result["lost"] == 0


def _table(stdout: str) -> list[dict[str, str]]:
    """The simulate table's rows, without the wall time (the only column a run's speed
    changes)."""
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in parse_table(stdout)]


def test_simulate_cli_table_json_out_and_errors(tmp_path):
    """docs/simulations.md's commands as written: the list, a table, and the files."""
    run = run_snippet("simulate.sh", tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert all(name in run.stdout for name in SCENARIOS)
    assert [(r["point"], r["mode"]) for r in _table(run.stdout)] == [
        ("rtt_s=0.001", "nak"), ("rtt_s=0.001", "ack"), ("rtt_s=0.05", "nak"),
        ("rtt_s=0.05", "ack")]
    results = tmp_path / "results"
    for name in ("latency-sweep.json", "latency-sweep.csv", "latency-sweep-traces.png",
                 "latency-sweep-sweep.png"):
        assert (results / name).stat().st_size > 0
    saved = json.loads((results / "latency-sweep.json").read_text())["results"]
    assert [r["mode"] for r in saved] == ["nak", "ack"] * 2
    assert all(r["engine"] == "cores" and r["unrepaired"] == 0 for r in saved)
    bad = subprocess.run([sys.executable, "-m", "nakflow", "simulate", "slow-receiver",
                          "--param", "bogus=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown parameter 'bogus'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    empty = subprocess.run([sys.executable, "-m", "nakflow", "simulate", "latency-sweep",
                            "--param", "sweep="], capture_output=True, text=True)
    assert empty.returncode == 2 and "sweep= names no value of rtt_s" in empty.stderr
    # inf passed every bound and failed deep inside with an OverflowError's traceback; a
    # negative seed said only "expected non-negative integer"
    for args, says in ((("--param", "duration_s=inf"), "duration_s must be a finite number, "
                        "not inf"),
                       (("--param", "consume_rate_msgs=inf"), "consume_rate_msgs must be a "
                        "finite number, not inf"),
                       (("--seed", "-3"), "argument --seed: must be >= 0: '-3'")):
        wrong = subprocess.run([sys.executable, "-m", "nakflow", "simulate", "gc-pauses",
                                *args], capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 2 and says in wrong.stderr, wrong.stderr[-2000:]
        assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr[-2000:]


def test_a_sweep_of_no_value_is_an_error():
    """``--param sweep=`` ran no point: a table of "(no rows)" and exit 0."""
    with pytest.raises(ValueError, match="sweep= names no value of rtt_s"):
        SCENARIOS["latency-sweep"].points({"sweep": " , "})
    assert [label for label, _ in SCENARIOS["latency-sweep"].points({"sweep": "0.05,"})] == [
        "rtt_s=0.05"]


def test_the_plots_say_which_engine_ran_and_whether_it_repairs():
    """A sweep run on the real cores (repair on) was captioned "this model has no
    repair", the vectorised model's caveat."""
    from simulations.plots import engine_note

    assert "cores, repair on" in engine_note([{"engine": "cores"}] * 2)
    assert "model, which has no repair" in engine_note([{"engine": "model"}, {}])
    assert "where small" in engine_note([{"engine": "cores"}, {"engine": "model"}])


@pytest.mark.spark
@pytest.mark.slow
def test_spark_sweep_gives_the_same_numbers_as_the_local_run(tmp_path):
    """docs/simulations.md's `--spark local[2]`: each point a Spark task in Python workers;
    the same table as the local run of the same command."""
    pytest.importorskip("pyspark")
    tables = []
    for name in ("simulate.sh", "simulate-spark.sh"):
        run = run_snippet(name, tmp_path, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        tables.append(_table(run.stdout))
    assert tables[0] == tables[1]
    assert len(tables[0]) == 4


def test_real_cores_gc_pauses_held_back_with_repair_dropped_and_counted_without():
    """simulations/cores.py moves real frames between the real SenderCore and
    ReceiverCores: a receiver paused 300 ms every 2 s comes back to a backlog. With repair
    it holds that back until it has emptied its socket and drops none of it (before, what
    was sent after the pause and waited behind it was dropped and repaired, which a
    history shorter than the catch-up cannot do); without repair its queue overflows and
    the drops stay missing (and are counted); ACK drops nothing."""
    p = CoreSimParams(receivers=3, paused=1, pause_for_s=0.3, duration_s=3.0)
    run = simulate_cores(p, "nak", seed=1)
    on = run["receivers"]
    off = simulate_cores(replace(p, repair=RepairConfig(enabled=False)), "nak",
                         seed=1)["receivers"]
    ack = simulate_cores(p, "ack", seed=1)["receivers"]
    assert on[0]["queue_drops"] == 0 and on[0]["delivered"] == run["sent"], on[0]
    assert all(r["lost"] + r["dropped_unrepaired"] + r["beyond_history"] == 0 for r in on)
    assert off[0]["dropped_unrepaired"] == off[0]["queue_drops"] > 0
    assert all(r["queue_drops"] == 0 for r in ack)


def test_real_cores_long_rtt_with_loss_nothing_stays_missing():
    """200 ms RTT and 1 % of DATA lost to every receiver: NAK with repair ends with
    nothing missing, and the sender measured the RTT from the HELLO answers."""
    p = CoreSimParams(receivers=3, rtt_s=0.2, capacity_msgs=2_000, duration_s=3.0,
                      data_loss=0.01)
    r = simulate_cores(p, "nak", seed=2)
    assert r["rtt_ms"] == pytest.approx(200.0)
    for x in r["receivers"]:
        assert x["repaired"] > 0 and x["delivered"] == r["sent"], x


def test_a_long_paths_start_held_by_the_room_ramps_on_without_overflowing_it():
    """50 ms RTT, ten receivers whose queues of 2,000 hold less than a round trip of
    their 50,000 msgs/s: the start's rounds are held by the receivers' room (40 % of a
    queue a round trip), so it ends on a full pipe at ~16,000 msgs/s and ramps on. The
    ramp then grows by what half the room takes in while a NAK comes back: x1.25 a step
    overflowed the queues by 5,110 before the NAK came (every one repaired). The
    simulated sender waits for its receivers' HELLO answers, as a live one does, and
    sizes its first window from the rooms they said."""
    from simulations.scenario_cores import simulate_on_cores
    (p,) = [p for label, p in SCENARIOS["latency-sweep"].points({"sweep": "0.05"})]
    r = simulate_on_cores(replace(p, duration_s=2.0), "nak", seed=0)
    start = r["sender"]["policy"]["start"]
    assert (start["ended"], start["ramps_on"], start["first_window"]) == ("full", True, 400)
    assert (r["dropped"], r["unrepaired"]) == (0, 0)


def test_fanout_repair_model_agrees_with_the_cores_and_bounds_requests():
    """The vectorised repair-request model (10,000 receivers) against the real cores at
    30 (1 % independent loss, 10 ms RTT): same order of requests (the cores also repeat
    requests whose repair was lost or late, which the model leaves out: about 1.4x).
    And what suppression buys at 10,000: each lost frame asked for a few times at most,
    so requests stay below a few per frame sent, however many receivers."""
    from nakflow import RepairConfig
    from simulations.cores import CoreSimParams, simulate_cores
    from simulations.fanout_repair import repair_requests

    p = CoreSimParams(receivers=30, rtt_s=0.01, duration_s=1.0, data_loss=0.01)
    r = simulate_cores(p, "nak", seed=3)
    m = repair_requests(30, loss=0.01, frames_per_s=r["frames"] / p.duration_s, rtt_s=0.01,
                        seed=3)
    assert 0.5 <= r["repair"]["requests"] / m["requests"] <= 2.0, (r["repair"], m)
    big = repair_requests(10_000, loss=0.01, frames_per_s=1_000, rtt_s=0.01,
                          repair=RepairConfig(backoff_s=0.2), seed=1)
    assert big["frames_lost_by_anyone"] == big["frames"]  # every frame: 100 missers each
    assert big["requests_per_lost_frame"] < 2.5, big
    no_holdoff = repair_requests(10_000, loss=0.01, frames_per_s=1_000, rtt_s=0.01,
                                 repair=RepairConfig(backoff_s=0.0), seed=1)
    assert no_holdoff["requests_per_lost_frame"] == pytest.approx(100, rel=0.1)


@pytest.mark.parametrize("scenario,mode", [("slow-receiver", "nak"), ("slow-receiver", "ack"),
                                           ("dead-receiver", "nak"), ("multi-sender", "nak")])
def test_the_vectorised_model_agrees_with_the_real_cores_where_both_run(scenario, mode):
    """`nakflow simulate` runs the real cores up to CORES_MAX_STREAMS receivers x senders
    and the vectorised model above: on sizes both run, the model's goodput (mean and
    slowest) is within 5 % of the cores' (measured: within 1.1 %), and neither loses
    anything where the scenario has no pauses. The model leaves NAK's start out (its
    sender ramps from initial_rate_msgs), so the cores run without it here too (with it
    they were 5.4 % ahead in slow-receiver)."""
    import dataclasses

    from simulations.scenarios import run_point, tasks_for

    over = {"receivers": "5", "duration_s": "3"}
    (cores,) = tasks_for(scenario, over, [mode], 0, "cores")
    params = cores[2]
    cores = (*cores[:2], dataclasses.replace(
        params, nak=dataclasses.replace(params.nak, start_window_msgs=None)), *cores[3:])
    (model,) = tasks_for(scenario, over, [mode], 0, "model")
    c, m = run_point(cores), run_point(model)
    assert (c["engine"], m["engine"]) == ("cores", "model")
    for key in ("overall", "min"):
        assert c["goodput"][key] == pytest.approx(m["goodput"][key], rel=0.05), (key, c, m)
    assert c["unrepaired"] == m["unrepaired"] == 0


def test_where_they_differ_the_model_says_why():
    """gc-pauses: the model has no repair (its drops stay missing) and none of the
    receiver's catch-up judgement; on the cores nothing stays missing (the paused
    receiver holds its backlog back, and would repair a drop)."""
    from simulations.scenarios import run_point, tasks_for

    over = {"receivers": "5", "duration_s": "3"}
    c = run_point(tasks_for("gc-pauses", over, ["nak"], 0, "cores")[0])
    m = run_point(tasks_for("gc-pauses", over, ["nak"], 0, "model")[0])
    assert c["unrepaired"] == 0 and c["dropped"] < m["dropped"]
    assert m["dropped"] > 0 and m["unrepaired"] == m["dropped"]
    assert "leaves out repair" in m["leaves_out"] and "leaves_out" not in c
    # a dead receiver under ack: the cores' sender hears the connection close (as the live
    # one does from ZeroMQ's socket monitor) and evicts it at once; the model waits for
    # receiver_timeout_s (5 s), and says so
    over = {"receivers": "3", "duration_s": "9", "dead_at_s": "2"}
    c = run_point(tasks_for("dead-receiver", over, ["ack"], 0, "cores")[0])
    m = run_point(tasks_for("dead-receiver", over, ["ack"], 0, "model")[0])
    assert c["recovery_s"] is not None and c["recovery_s"] < 1.0, c["recovery_s"]
    assert m["recovery_s"] is not None and m["recovery_s"] > 4.0, m["recovery_s"]
    assert "disconnect signal" in m["leaves_out"]


def test_simulate_picks_the_cores_up_to_the_limit_and_says_so():
    """--engine auto: the cores at 3 receivers, the model above CORES_MAX_STREAMS; the
    table says which made each row and what the model leaves out."""
    from simulations.engines import CORES_MAX_STREAMS

    big = CORES_MAX_STREAMS + 1
    run = subprocess.run([sys.executable, "-m", "nakflow", "simulate", "fanout-sweep",
                          "--param", f"sweep=3,{big}", "--param", "duration_s=0.5",
                          "--modes", "nak"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line.split() for line in run.stdout.splitlines() if line.strip().startswith(
        "receivers=")]
    assert [(r[0], r[2]) for r in rows] == [("receivers=3", "cores"),
                                            (f"receivers={big}", "model")], run.stdout
    assert f"the real cores for up to {CORES_MAX_STREAMS} receivers" in run.stdout
    assert "model rows: the vectorised model" in run.stdout and "leaves out repair" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "nakflow", "simulate", "slow-receiver",
                          "--engine", "exact"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'exact'" in bad.stderr
