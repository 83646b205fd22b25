import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from tests.netns import multicast_unavailable

#: JVM flags for the suite's short-lived Spark JVMs, given to every one of them.
SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """Every Spark JVM the tests start, in this process or in the commands they run,
    lives for seconds on two cores: it gets C1 only (no C2 compiler threads competing
    with the job for the CPU) and the serial collector, about 30 % less start-up and job
    time. Not a library default: a long job wants C2. Drivers take SPARK_SUBMIT_OPTS,
    the standalone Master and Workers SPARK_DAEMON_JAVA_OPTS, and executors (local-cluster
    and standalone) ``spark.executor.extraJavaOptions`` from a spark-defaults.conf in a
    SPARK_CONF_DIR of the session's own."""
    if "SPARK_CONF_DIR" not in os.environ:
        conf_dir = tempfile.mkdtemp(prefix="nakflow-tests-spark-conf-")
        with open(os.path.join(conf_dir, "spark-defaults.conf"), "w") as f:
            f.write(f"spark.executor.extraJavaOptions  {SHORT_JVM}\n")
        os.environ["SPARK_CONF_DIR"] = conf_dir
        config.add_cleanup(lambda: shutil.rmtree(conf_dir, ignore_errors=True))
    for var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(var, SHORT_JVM)


@pytest.fixture(scope="session")
def require_multicast() -> None:
    """Skip where multicast cannot run; under CI fail instead, so CI proves it works."""
    why = multicast_unavailable()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"multicast must run in CI: {why}")
    pytest.skip(why)


#: Spark masters the adapter is tested on: local mode with task retries allowed, and
#: separate executor JVMs (each with its own Python workers).
SPARK_MASTERS = {"local": "local[2,4]", "local-cluster": "local-cluster[2,1,1024]"}


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """One SparkSession per master for the whole run (start-ups are the expensive part).

    Request it through ``@pytest.mark.parametrize("spark", [...], indirect=True)`` with
    keys of SPARK_MASTERS; pytest groups the tests by master and stops one session
    before it starts the next.
    """
    pytest.importorskip("pyspark")
    from spark_adapter.session import spark_session

    session = spark_session(SPARK_MASTERS[request.param], "nakflow-tests")
    yield session
    session.stop()


@pytest.fixture()
def pushgateway():
    """Debian's prometheus-pushgateway on 127.0.0.1 (scripts/setup.sh installs it)."""
    exe = shutil.which("prometheus-pushgateway")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus-pushgateway must be installed in CI (scripts/setup.sh)")
        pytest.skip("prometheus-pushgateway is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=1)
            return True
        except OSError:
            return False

    try:
        deadline = time.monotonic() + 30
        while not up():
            assert time.monotonic() < deadline, "the pushgateway did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
