"""A SparkSession set up for nakflow jobs: quiet logs, loopback-only when local."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any
from urllib.parse import urlsplit

#: Where the JVM's own output of this process's Spark goes (None: no JVM started here).
JVM_LOG: dict[str, str] = {}


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[N,F]``, ``local-cluster[...]``: all on this machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def is_loopback_master(master: str) -> bool:
    """A cluster master on this machine's loopback (``spark://127.0.0.1:7077``)."""
    host = urlsplit(master).hostname if "://" in master else None
    return host in ("127.0.0.1", "localhost", "::1")


def spark_session(master: str = "local[*]", app: str = "nakflow",
                  conf: dict[str, str] | None = None, *, ship: str = "auto",
                  executor_python: str | None = None, check: bool = True) -> Any:
    """Get or create a SparkSession with log noise kept to warnings.

    A ``sc://host:port`` master is a Spark Connect server: the session is a thin client
    (``df.foreachPartition(nakflow_writer(cfg))`` works through it; the RDD-based
    helpers such as ``send_with_metrics`` do not, Connect has no RDDs).
    For ``local`` masters the driver, the executors and their Python workers bind
    to 127.0.0.1 only and run this interpreter (which has nakflow installed).
    For a cluster master (``spark://``, ``yarn``, ``k8s://``) the executors run the
    cluster's Python (``executor_python`` sets ``spark.pyspark.python``), so with
    ``ship`` "auto" or "bundle" nakflow and its dependencies go with the job (see
    :mod:`spark_adapter.shipping`), and with ``check`` a probe task first makes sure
    the executors can import them, raising ExecutorImportError in one line if not.
    A master on 127.0.0.1 also keeps the driver on loopback.

    Raises ValueError if PySpark is not installed or ``ship`` is unknown.
    """
    from .shipping import SHIP_CHOICES, build_bundle, bundle_conf, check_executors

    if ship not in SHIP_CHOICES:
        raise ValueError(f"ship must be one of {', '.join(SHIP_CHOICES)}: {ship!r}")
    if master.startswith("sc://"):
        return _connect_session(master, app, ship)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ValueError(f"this needs PySpark (pip install 'nakflow[spark]'): {exc}") from exc
    settings = {"spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false"}  # nakflow prints its own progress
    if is_local_master(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors inherit it
        settings.update({"spark.pyspark.python": sys.executable,
                         "spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1"})
    elif is_loopback_master(master):
        settings.update({"spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    python = executor_python or (conf or {}).get("spark.pyspark.python")
    if python:  # PySpark takes the executors' Python from the driver's environment
        settings["spark.pyspark.python"] = python
        os.environ["PYSPARK_PYTHON"] = python
    local = is_local_master(master)
    if ship == "bundle" or (ship == "auto" and not local):
        settings.update(bundle_conf(build_bundle(), settings))
    _start_quiet_jvm(master, app, settings)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if check and not local:
        try:
            check_executors(spark)
        except BaseException:
            spark.stop()
            raise
    return spark


def _connect_session(url: str, app: str, ship: str) -> Any:
    """A Spark Connect client session (no JVM here: the server runs the job, and its
    executors' Python must have nakflow; the client cannot ship compiled modules)."""
    if ship == "bundle":
        raise ValueError("ship='bundle' is not available through Spark Connect: install "
                         "nakflow in the Python the Connect server's executors run")
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).appName(app).getOrCreate()


def _start_quiet_jvm(master: str, app: str, settings: dict[str, str]) -> None:
    """Start Spark's JVM with its console output (log4j's start-up lines, JVM warnings,
    Hadoop's native-library warning) in a log file instead of the user's terminal.
    Does nothing if this process started Spark's JVM before."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or SparkContext._active_spark_context is not None:
        return  # this process's JVM is up already (a stopped session keeps it)
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app)
    for key, value in settings.items():
        conf.set(key, value)
    fd, path = tempfile.mkstemp(prefix="nakflow-spark-", suffix=".log")
    with os.fdopen(fd, "wb") as log:  # the child keeps its own copy of the descriptor
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})  # type: ignore[no-untyped-call]
    JVM_LOG["path"] = path
    SparkContext(conf=conf, gateway=gateway)
