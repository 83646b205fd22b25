"""nakflow on a real Spark standalone cluster: a Master and two Workers (separate JVMs)
started from the installed PySpark, with executors running a bare Python that has none of
nakflow's packages, so what they import must come with the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv

import pytest

from nakflow.tables import parse_table
from tests.snippets import run_snippet
from tests.test_spark_adapter import Collecting

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("pyspark")
    from spark_adapter.standalone import StandaloneCluster

    with StandaloneCluster(workers=2) as running:
        yield running


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python of the driver's version with nothing installed: a worker host's python3."""
    folder = tmp_path_factory.mktemp("bare-venv")
    venv.EnvBuilder(with_pip=False).create(folder)
    python = str(folder / "bin" / "python")
    probe = subprocess.run([python, "-c", "import zmq"], capture_output=True, text=True)
    assert "No module named 'zmq'" in probe.stderr  # really bare
    return python


def run_job(cluster, python: str, rx: Collecting, rows: int, ship: str, *extra: str):
    cmd = [sys.executable, "-m", "tests.standalone_job", cluster.master, python,
           ",".join(rx.data), ",".join(rx.feedback), str(rows), ship, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_cluster_is_a_real_master_with_two_workers(cluster):
    state = cluster.state()
    assert state["status"] == "ALIVE" and state["aliveworkers"] == 2
    assert {w["host"] for w in state["workers"]} == {"127.0.0.1"}
    assert cluster.master.startswith("spark://127.0.0.1:")


def test_executors_without_nakflow_fail_with_one_clear_line(cluster, bare_python):
    rx = Collecting(1, "nak")
    try:
        run = run_job(cluster, bare_python, rx, 1_000, ship="none")
    finally:
        rx.close()
    assert run.returncode == 3, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, run.stderr[-3000:]
    assert "Spark executors cannot import nakflow" in errors[0]
    assert f"Python {bare_python} (3." in errors[0]  # the executors ran the Python asked for
    assert "lacks nakflow, transports, spark_adapter, zmq, msgpack" in errors[0]
    assert "ship=" in errors[0] and "spark.pyspark.python" in errors[0]  # what to do
    assert "Traceback" not in run.stderr and "Py4J" not in run.stderr
    assert rx.receivers[0].snapshot()["delivered"] == 0


def test_shipped_writer_delivers_every_row_once_across_a_task_retry(cluster, bare_python,
                                                                    pushgateway):
    """... and each task pushes its metrics to a real Pushgateway (prometheus_client
    went with the bundle: the executors' Python has none)."""
    rows = 8_000
    rx = Collecting(1, "nak")
    try:
        run = run_job(cluster, bare_python, rx, rows, "auto", pushgateway)
        assert run.returncode == 0, run.stderr[-3000:] + cluster.logs()[-6000:]
        snap = rx.finish(2)[0]
    finally:
        rx.close()
    assert sorted(rx.ids[0]) == list(range(rows))  # each row exactly once
    metrics = {m["partition"]: m for m in json.loads(run.stdout)}
    assert (metrics[1]["attempt"], metrics[1]["epoch"]) == (1, 1)  # the retry ran
    assert metrics[0]["attempt"] == 0
    p1 = sorted((s for s in snap["senders"] if s["sender"].endswith("/p1")),
                key=lambda s: s["epoch"])
    assert [(s["epoch"], s["status"]) for s in p1] == [(0, "incomplete"), (1, "complete")]
    from tests.test_service import scrape, value

    page = scrape(f"{pushgateway}/metrics")
    for m in metrics.values():  # the last push per task id: the attempt that completed
        sender = next(s["sender"] for s in snap["senders"]
                      if s["sender"].endswith(f"/p{m['partition']}"))
        assert value(page, "nakflow_messages_sent_total", job="nakflow-spark",
                     id=sender) == m["rows"] == rows // 2


@pytest.mark.timeout(660)  # its own bound, 600 s, governs, not the suite's 300 s guard
def test_eval_on_its_own_standalone_cluster(tmp_path):
    """`nakflow eval --standalone 2` as docs/spark.md shows it: its own Master and
    Workers, executors on a bare Python it made, nakflow shipped with the job; every row
    at every receiver, the slow one's credit granted to the executors' senders.

    Not that the slow receiver NAKs: NAK's start keeps no more in flight than a queue has
    room for below 40 %, under the lowest NAK level, so a slow receiver of 79 messages
    NAKs only if the executors outrun it once the start is over (a CI run had it send
    none, running alone)."""
    run = run_snippet("standalone.sh", tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[eval] starting a standalone Master (spark://127.0.0.1:" in run.stderr
    table = {(r["mode"], r["receiver"]): r for r in parse_table(run.stdout)}
    assert set(table) == {(m, r) for m in ("nak", "ack") for r in ("slow", "fast-1", "fast-2")}
    for key, row in table.items():
        assert (row["missing"], row["lost"], row["complete"]) == ("0", "0", "2/2"), key
    assert int(table["ack", "slow"]["credits"]) > 0


def test_the_writer_works_through_a_spark_connect_server():
    """A real Spark Connect server (its own JVM and executors); this process is only a
    Connect client, as a notebook would be. foreachPartition runs the writer there."""
    pytest.importorskip("pyspark.sql.connect.session")
    pytest.importorskip("grpc")
    from spark_adapter.standalone import ConnectServer

    rx = Collecting(2, "ack")
    try:
        with ConnectServer("local[2]") as server:
            code = ("import sys; from spark_adapter import WriterConfig, nakflow_writer; "
                    "from spark_adapter.session import spark_session; "
                    "spark = spark_session(sys.argv[1]); "
                    "print(type(spark).__module__); "
                    "cfg = WriterConfig(sys.argv[2].split(','), sys.argv[3].split(','), "
                    "mode='ack', stream='test', wait_receivers=2); "
                    "spark.range(6000, numPartitions=3).selectExpr('id')"
                    ".foreachPartition(nakflow_writer(cfg))")
            run = subprocess.run([sys.executable, "-c", code, server.url, ",".join(rx.data),
                                  ",".join(rx.feedback)], capture_output=True, text=True,
                                 timeout=300, cwd=ROOT)
            assert run.returncode == 0, run.stderr[-3000:]
            snaps = rx.finish(3)
    finally:
        rx.close()
    assert run.stdout.strip() == "pyspark.sql.connect.session"  # really a Connect client
    for ids, snap in zip(rx.ids, snaps, strict=True):
        assert sorted(ids) == list(range(6_000))
        assert (snap["dropped"], snap["lost"]) == (0, 0)


def test_the_data_source_writes_from_the_clusters_executors(cluster):
    """``df.write.format("nakflow")`` on the standalone cluster, the executors on this
    venv's Python (the data source's Arrow writer needs pyarrow there, which is too big
    to ship with a job: ``nakflow eval`` says so and sends row by row without it)."""
    from tests.test_datasource import Collector

    rx = Collector(stream="test")
    try:
        cmd = [sys.executable, "-m", "tests.standalone_job", cluster.master, sys.executable,
               rx.rx.data_endpoints[0], rx.rx.feedback_endpoints[0], "6000", "none",
               "datasource"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-3000:] + cluster.logs()[-6000:]
        snap = rx.finish(2)
    finally:
        rx.rx.close()
    from nakflow.arrow import to_record_batch

    assert sorted(to_record_batch(rx.got).column("id").to_pylist()) == list(range(6_000))
    tasks = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(t["partition"] for t in tasks) == [0, 1]
    assert snap["lost"] == 0 and snap["duplicates"] == 0
    assert all(t["receivers_complete"] == 1 and t["rows"] == 3_000 for t in tasks)


def test_the_wait_for_the_master_takes_a_page_not_yet_json_for_not_up_yet(tmp_path):
    """The Master's web UI can answer before its ``/json/`` page is there: a CI run's eval
    ended at once with ``Expecting value: line 1 column 1 (char 0)``. The wait goes on
    until the page says the workers are alive (a real HTTP server: empty, then HTML, then
    the JSON)."""
    import http.server
    import threading

    from spark_adapter.standalone import StandaloneCluster

    bodies = [b"", b"<html>starting</html>", b'{"aliveworkers": 1}', b'{"aliveworkers": 2}']

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.pop(0) if len(bodies) > 1 else bodies[0]
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = StandaloneCluster(workers=2, start_timeout_s=30.0, folder=str(tmp_path),
                                    web_ui=f"http://127.0.0.1:{server.server_port}")
        cluster._wait(lambda state: state.get("aliveworkers", 0) >= 2, "2 Worker(s)")
    finally:
        server.shutdown()
        server.server_close()
    assert bodies == [b'{"aliveworkers": 2}']
