"""Run simulation tasks as Spark tasks (``nakflow simulate --spark [MASTER]``).

Each (point, mode) is one task; results come back in task order and, because
every run is seeded, equal those of the local run for the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_adapter.session import spark_session

from .model import SimParams
from .scenarios import run_point


def run_on_spark(tasks: Sequence[tuple[str, str, SimParams, str, int]],
                 master: str = "local[*]") -> list[dict[str, Any]]:
    spark = spark_session(master, "nakflow-simulate")
    try:
        rdd = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks)))
        return list(rdd.map(run_point).collect())
    finally:
        spark.stop()
