"""A real Spark standalone cluster on this machine: one Master and N Workers, on 127.0.0.1.

They are started from the installed PySpark's ``spark-class`` as separate JVMs (as
``start-master.sh`` / ``start-worker.sh`` would on real hosts), with bounded cores and
memory, their logs and work directories in a temporary folder, and are stopped when the
context ends. ``nakflow eval --standalone N`` and the tests use it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spark_home() -> str:
    """The installed PySpark's folder, which is a Spark distribution (bin/spark-class, jars)."""
    try:
        import pyspark
    except ImportError as exc:
        raise ValueError(f"this needs PySpark (pip install 'nakflow[spark]'): {exc}") from exc
    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclass
class StandaloneCluster:
    """``with StandaloneCluster(workers=2) as cluster: spark_session(cluster.master)``."""

    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    start_timeout_s: float = 90.0
    progress: Callable[[str], None] | None = None
    master: str = ""
    web_ui: str = ""
    folder: str = ""
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def start(self) -> None:
        if self.workers < 1:
            raise ValueError(f"a standalone cluster needs at least one worker: {self.workers}")
        home = spark_home()
        self.folder = tempfile.mkdtemp(prefix="nakflow-standalone-")
        port, ui = _free_port(), _free_port()
        self.master, self.web_ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}"
        self._say(f"starting a standalone Master ({self.master}) and {self.workers} Worker(s)"
                  f", logs in {self.folder} ...")
        try:
            self._spawn(home, "master", ["org.apache.spark.deploy.master.Master",
                                         "--host", "127.0.0.1", "--port", str(port),
                                         "--webui-port", str(ui)])
            self._wait(lambda state: state.get("status") == "ALIVE", "the Master to start")
            for i in range(self.workers):
                work = os.path.join(self.folder, f"worker-{i}")
                os.makedirs(work)
                self._spawn(home, f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", self.master,
                    "--host", "127.0.0.1", "--cores", str(self.cores_per_worker),
                    "--memory", self.memory_per_worker, "--webui-port", "0",
                    "--work-dir", work])
            self._wait(lambda state: state.get("aliveworkers", 0) >= self.workers,
                       f"{self.workers} Worker(s) to register")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, home: str, name: str, args: list[str]) -> None:
        env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=self.folder, SPARK_NO_DAEMONIZE="1")
        with open(os.path.join(self.folder, f"{name}.log"), "wb") as log:
            self._procs.append(subprocess.Popen(
                [os.path.join(home, "bin", "spark-class"), *args], env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))

    def state(self) -> dict[str, Any]:
        """The Master's own view (its web UI's /json), e.g. ``aliveworkers``, ``activeapps``."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as reply:
            state: dict[str, Any] = json.load(reply)
            return state

    def _wait(self, ready: Callable[[dict[str, Any]], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark standalone process exited ({proc.returncode}) "
                                       f"while waiting for {what}; see {self.folder}")
            try:
                if ready(self.state()):
                    return
            except (OSError, ValueError):  # the web UI is not up yet, or is up before its
                pass  # /json/ page: an empty or HTML body (a CI run's "Expecting value")
            time.sleep(0.2)
        raise TimeoutError(f"timed out after {self.start_timeout_s:.0f} s waiting for {what}; "
                           f"see the logs in {self.folder}")

    def logs(self) -> str:
        """Every log under the folder (masters, workers, executors' stderr), for a failure."""
        parts = []
        for root, _dirs, files in os.walk(self.folder):
            for name in sorted(files):
                if name.endswith(".log") or name == "stderr":
                    path = os.path.join(root, name)
                    with open(path, errors="replace") as f:
                        parts.append(f"==> {path} <==\n{f.read()[-4000:]}")
        return "\n".join(parts)

    def stop(self, keep_folder: bool = False) -> None:
        for proc in reversed(self._procs):  # workers first: they kill their executors
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._procs.clear()
        if self.folder and not keep_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class ConnectServer:
    """A Spark Connect server (``start-connect-server.sh``'s class, via spark-submit) on
    127.0.0.1, running its jobs on ``master``; clients use ``url`` (``sc://...``).
    Its executors run ``python`` (default: this interpreter)."""

    master: str = "local[2]"
    python: str = ""
    start_timeout_s: float = 120.0
    url: str = ""
    folder: str = ""
    _proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ConnectServer:
        home = spark_home()
        self.folder = tempfile.mkdtemp(prefix="nakflow-connect-")
        port = _free_port()
        self.url = f"sc://127.0.0.1:{port}"
        python = self.python or sys.executable
        env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=python)
        with open(os.path.join(self.folder, "connect-server.log"), "wb") as log:
            self._proc = subprocess.Popen(
                [os.path.join(home, "bin", "spark-submit"), "--master", self.master,
                 "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                 "--name", "nakflow Spark Connect server",
                 "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                 "--conf", f"spark.connect.grpc.binding.port={port}",
                 "--conf", "spark.driver.host=127.0.0.1",
                 "--conf", "spark.driver.bindAddress=127.0.0.1",
                 "--conf", "spark.ui.enabled=false",
                 "--conf", f"spark.pyspark.python={python}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while True:  # ready when its gRPC port accepts connections
            if self._proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"the Spark Connect server exited; see {self.folder}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise TimeoutError(f"the Spark Connect server did not start in "
                                       f"{self.start_timeout_s:.0f} s; see {self.folder}") from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
