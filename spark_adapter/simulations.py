"""Run simulation tasks as Spark tasks (``nakflow simulate --spark [MASTER]``).

Each (point, mode) is one task; results come back in task order and, because
every run is seeded, equal those of the local run for the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from simulations.scenarios import Task, run_point

from .session import spark_session


def run_on_spark(tasks: Sequence[Task], master: str = "local[*]") -> list[dict[str, Any]]:
    spark = spark_session(master, "nakflow-simulate")
    try:
        rdd = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks)))
        return list(rdd.map(run_point).collect())
    finally:
        spark.stop()
