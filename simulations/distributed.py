"""Run simulation tasks as Spark tasks (``nakflow simulate --spark [MASTER]``).

Each (point, mode) is one task; results come back in task order and, because
every run is seeded, equal those of the local run for the same seed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from .model import SimParams
from .scenarios import run_point


def run_on_spark(tasks: Sequence[tuple[str, str, SimParams, str, int]],
                 master: str = "local[*]") -> list[dict[str, Any]]:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ValueError(f"--spark needs PySpark (pip install 'nakflow[spark]'): {exc}") from exc
    # executors' Python workers must be this interpreter (it has nakflow installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("nakflow-simulate")
             .config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    try:
        rdd = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks)))
        return list(rdd.map(run_point).collect())
    finally:
        spark.stop()
