import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest
from hypothesis import settings

from tests.netns import multicast_unavailable

# Property tests check behaviour, never speed: no per-example deadline (hypothesis's
# default, 200 ms, failed a sequence tracker's example at 528 ms on pure Python while
# two test runs shared the two cores; the same example took 0.03 ms on its re-run).
settings.register_profile("nakflow", deadline=None)
settings.load_profile("nakflow")

# -- three workers, two cores, then the quiet tests alone ---------------------------------
#
# ``make test`` runs the suite in two pytest runs: the tests that share the machine on
# three pytest-xdist workers (``-m "not quiet"``), then those marked ``quiet`` serially.
# A quiet test measures flow control against receivers that are only as fast as the CPU
# they get (a queue that must not fill, a rate that must not be cut), runs the lab,
# watches RSS or puts a deadline on a process's progress: it must have the machine to
# itself. In one run, each quiet test waited for the other workers' running tests to
# end (a Spark test: up to 40 s) with the machine held by those alone: a fresh clone's
# timeline had one test running for 287 s of its 761 (the 29 quiet tests took 295 s),
# and the suite took 10m17s-12m49s. The rules for the shared run keep what a test
# observes the same as in a serial run, and the workers evenly loaded:
#
# - a module's tests run on one worker, so its module fixtures (a standalone Spark
#   cluster, the lab's namespaces) start once; the modules on the shared SparkSessions
#   (the ``spark`` fixture) run on one worker, so there is one session per master for the
#   run, as serially;
# - the longest of these units go first (``UNIT_SECONDS``, measured in the shared run),
#   so that no worker is left with a long one at the end;
# - should a run under xdist include quiet tests (``pytest -n 3`` by hand), each still
#   runs alone, the other workers held between their tests: the lock below is a
#   readers-writer lock on a file the workers see, writers first.
#
# (A custom scheduler, not ``--dist loadgroup``: with pytest 9.2, xdist 3.8's
# ``xdist_group`` no longer changes a test's id, and the groups are silently ignored.)

#: the modules whose tests share the session-wide SparkSessions
SPARK_MODULES = ("tests/test_spark_adapter.py", "tests/test_datasource.py")
#: seconds a unit's shared tests took on three workers (a fresh clone's ``make test``, 2
#: cores, 2026-11-27); the rest take under 30
UNIT_SECONDS = {"spark": 230, "tests/test_standalone.py": 222,
                "tests/test_benchmarks.py": 180,  # (its smoke alone: 90-118 s)
                "tests/test_simulations.py": 160, "tests/test_readme.py": 45,
                "tests/test_speedups.py": 44, "tests/test_multicast.py": 38,
                "tests/test_repair_live.py": 31}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or "spark"."""
    module = nodeid.split("::", 1)[0]
    return "spark" if module in SPARK_MODULES else module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: without it, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        """xdist's scope scheduling (a unit to a worker, whole), with our units, in the
        order the workers collected them (longest first: ``_LongestFirst``)."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return ByUnit(config, log)


class _LongestFirst:
    """Longest units first, after pytest has ordered the items by their fixtures' params
    (a stable sort: that order within a unit stays)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items.sort(key=lambda item: -UNIT_SECONDS.get(unit_of(item.nodeid), 0))


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
    if os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(_LongestFirst(), "nakflow-longest-first")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Hold the machine shared for an ordinary test, alone for a ``quiet`` one, from the
    setup of its fixtures (a module's receivers, a session's Spark) to their teardown."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    folder = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    quiet = item.get_closest_marker("quiet") is not None
    with open(folder / "nakflow-turnstile.lock", "a") as gate, \
            open(folder / "nakflow-machine.lock", "a") as machine:
        fcntl.flock(gate, fcntl.LOCK_EX)  # a waiting quiet test holds it: no new readers
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


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
