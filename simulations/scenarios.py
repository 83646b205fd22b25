"""Named scenarios: a base SimParams, optionally swept over one parameter.

Every scenario takes ``--param name=value`` for any scalar SimParams field
(at least receivers, senders, duration_s, rtt_s, capacity_msgs, step_s). A
swept scenario also takes ``--param sweep=v1,v2,...`` to replace its points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engines import pick_engine
from .model import SimParams
from .scenario_cores import run_simulation

#: One run: (scenario, point label, params, mode, seed, engine); picklable for Spark.
Task = tuple[str, str, SimParams, str, int, str]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    base: Mapping[str, Any]
    sweep_param: str | None = None
    sweep_values: Sequence[Any] = field(default_factory=tuple)

    def points(self, overrides: Mapping[str, str]) -> list[tuple[str, SimParams]]:
        """(label, params) for every point, with ``overrides`` (strings from the CLI)."""
        overrides = dict(overrides)
        sweep = overrides.pop("sweep", None)
        values: list[Any] = list(self.sweep_values)
        if sweep is not None:
            if self.sweep_param is None:
                raise ValueError(f"scenario {self.name!r} is not a sweep")
            values = [_parse(self.sweep_param, v) for v in sweep.split(",") if v.strip()]
            if not values:  # it ran no point and printed "(no rows)", exit 0
                raise ValueError(f"sweep= names no value of {self.sweep_param}")
        base = SimParams(**{**self.base, **{k: _parse(k, v) for k, v in overrides.items()}})
        if self.sweep_param is None:
            return [("-", base)]
        if self.sweep_param in overrides:
            values = [getattr(base, self.sweep_param)]
        out = []
        for v in values:
            changes: dict[str, Any] = {self.sweep_param: v}
            if self.sweep_param == "receivers":  # keep the roles valid as N shrinks
                changes["slow"] = min(base.slow, v)
            out.append((f"{self.sweep_param}={v}", base.replace(**changes)))
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(SimParams) if f.name not in ("nak", "ack")}


def _parse(name: str, value: str) -> Any:
    """A --param value, typed like the SimParams field it sets."""
    f = _FIELDS.get(name)
    if f is None:
        raise ValueError(f"unknown parameter {name!r}; known: {', '.join(sorted(_FIELDS))}")
    kind = type(getattr(SimParams(), name))
    try:
        if kind is int:
            return int(float(value)) if float(value).is_integer() else int(value)
        if kind is float:
            return float(value)
        return str(value)
    except ValueError:
        raise ValueError(f"parameter {name}: cannot read {value!r} as {kind.__name__}") from None


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("slow-receiver", "one receiver at a fifth of the others' rate",
             {"receivers": 10, "slow": 1, "slow_fraction": 0.2, "duration_s": 10.0,
              "capacity_msgs": 2_000}),
    Scenario("dead-receiver", "one receiver dies at t=3 s and never comes back",
             {"receivers": 10, "dead": 1, "dead_at_s": 3.0, "duration_s": 12.0,
              "consume_rate_msgs": 20_000.0}),
    Scenario("gc-pauses", "one receiver stops the world for 300 ms every 2 s",
             {"receivers": 10, "paused": 1, "pause_at_s": 2.0, "pause_every_s": 2.0,
              "pause_for_s": 0.3, "duration_s": 10.0, "consume_rate_msgs": 20_000.0}),
    Scenario("latency-sweep", "RTT from 0.1 ms to 200 ms; ACK with a fixed window vs NAK",
             {"receivers": 10, "duration_s": 6.0, "capacity_msgs": 2_000,
              "consume_rate_msgs": 50_000.0, "sender_max_rate_msgs": 100_000.0},
             "rtt_s", (0.0001, 0.001, 0.01, 0.05, 0.1, 0.2)),
    Scenario("fanout-sweep", "N from 1 to 10,000: feedback frames/s at the sender, goodput",
             {"duration_s": 3.0, "capacity_msgs": 2_000, "consume_rate_msgs": 20_000.0,
              "rtt_jitter": 0.5, "rtt_s": 0.002},
             "receivers", (1, 10, 100, 1_000, 10_000)),
    Scenario("bursty-source", "the application produces in bursts (200 ms on, 300 ms off)",
             {"receivers": 10, "slow": 1, "slow_fraction": 0.2, "duration_s": 10.0,
              "source_rate_msgs": 60_000.0, "burst_on_s": 0.2, "burst_off_s": 0.3,
              "capacity_msgs": 2_000}),
    Scenario("heterogeneous", "receiver speeds spread log-uniformly over 10x",
             {"receivers": 50, "spread_lo": 0.1, "duration_s": 10.0, "capacity_msgs": 2_000,
              "rtt_jitter": 0.5}),
    Scenario("multi-sender", "three senders share ten receivers, one of them slow",
             {"receivers": 10, "senders": 3, "slow": 1, "slow_fraction": 0.2,
              "duration_s": 10.0, "capacity_msgs": 3_000, "sender_max_rate_msgs": 50_000.0}),
]}


def run_point(task: Task, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One task, on the real cores or the vectorised model (``pick_engine``)."""
    scenario, label, params, mode, seed, engine = task
    result = run_simulation(params, mode, seed=seed, engine=engine, progress=progress)
    result["scenario"] = scenario
    result["point"] = label
    return result


def tasks_for(name: str, overrides: Mapping[str, str], modes: Sequence[str],
              seed: int, engine: str = "auto") -> list[Task]:
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; try --list")
    return [(name, label, params, mode, seed, pick_engine(params, engine))
            for label, params in SCENARIOS[name].points(overrides) for mode in modes]


def run_tasks(tasks: Sequence[Task], on_done: Callable[[dict[str, Any]], None] | None = None,
              progress: Callable[[int, float], None] | None = None) -> list[dict[str, Any]]:
    """Run tasks in this process, in order."""
    out = []
    for i, task in enumerate(tasks):
        cb = None if progress is None else (lambda f, i=i: progress(i, f))
        result = run_point(task, cb)
        out.append(result)
        if on_done is not None:
            on_done(result)
    return out


def table_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        rows.append({
            "point": r["point"], "mode": r["mode"], "engine": r.get("engine", "model"),
            "goodput": r["goodput"]["overall"], "slowest": r["goodput"]["min"],
            "send_rate": r["send_rate"], "dropped": r["dropped"],
            "unrepaired": r["unrepaired"], "lost": r["lost"],
            "queue_peak": r["queue_peak"], "fb_per_s": r["feedback_per_s_at_sender"],
            "recovery_s": "-" if r["recovery_s"] is None else r["recovery_s"],
            "wall_s": r["wall_s"],
        })
    return rows
