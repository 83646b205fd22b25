"""A SparkSession set up for nakflow jobs: quiet logs, loopback-only when local."""

from __future__ import annotations

import os
import sys
from typing import Any


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[N,F]``, ``local-cluster[...]``: all on this machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def spark_session(master: str = "local[*]", app: str = "nakflow",
                  conf: dict[str, str] | None = None) -> Any:
    """Get or create a SparkSession with log noise kept to warnings.

    For masters on this machine the driver, the executors and their Python
    workers bind to 127.0.0.1 only and run this interpreter (which has nakflow
    installed). On a real cluster, Python and addresses are the cluster's.

    Raises ValueError if PySpark is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ValueError(f"this needs PySpark (pip install 'nakflow[spark]'): {exc}") from exc
    builder = SparkSession.builder.master(master).appName(app)
    builder = builder.config("spark.ui.enabled", "false")
    if is_local_master(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors inherit it
        builder = (builder.config("spark.pyspark.python", sys.executable)
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
