"""`nakflow receive` as a long-running service (signals, sinks, its report) and the
Prometheus endpoint, scraped over real HTTP during live runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import msgpack
import pytest

from nakflow.live.receiver import Receiver
from nakflow.live.sender import Sender
from nakflow.testing import nakflow_cmd

pytest.importorskip("prometheus_client")
from nakflow.live.prometheus import serve_metrics

pytestmark = pytest.mark.slow


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """A /metrics page as {(name, labels): value}, parsed by prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(page: dict, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in page.items()
            if n == name and all((k, v) in ls for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def wait_until(check, timeout: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_scraped_metrics_equal_the_json_snapshots():
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="nak", stream="m",
                  capacity_msgs=1_000) as rx:
        tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode="nak", stream="m")
        server = serve_metrics(tx, rx)
        try:
            tx.wait_for_receivers(1)
            during = scrape(server.url)  # a scrape while both are live
            assert value(during, "nakflow_messages_sent_total", role="sender") == 0
            for i in range(800):  # 80 % of the queue: NAKs, no drops
                tx.send(msgpack.packb({"i": i}))
            tx.flush()
            assert rx.wait_for_ends(1, 30)
            got = rx.get_many(300, timeout=5)  # leave 500 queued: fill 0.5
            # then the consumer takes nothing: the receiver says so once (a NAK with
            # signal "paused") and is silent after it; scrape once the sender heard it
            wait_until(lambda: rx.snapshot()["naks_while_paused"] > 0, 30, "the pause")

            def all_heard() -> bool:
                tx.poll(0.01)  # the sender reads its feedback
                heard = sum(tx.snapshot()["naks_received"].values())
                return heard == sum(rx.snapshot()["naks_sent"].values())

            wait_until(all_heard, 30, "the NAKs at the sender")
            page = scrape(server.url)
            s, r = tx.snapshot(), rx.snapshot()
        finally:
            server.close()
            tx.close()
    assert len(got) == 300
    sender = {"role": "sender", "id": s["sender_id"], "stream": "m", "mode": "nak"}
    receiver = {"role": "receiver", "id": r["receiver_id"], "stream": "m", "mode": "nak"}
    assert value(page, "nakflow_messages_sent_total", **sender) == s["sent"] == 800
    assert value(page, "nakflow_frames_sent_total", **sender) == s["frames"]
    assert value(page, "nakflow_rate_limit_messages_per_second", **sender) == s["rate_limit"]
    for level, n in s["naks_received"].items():
        assert value(page, "nakflow_naks_total", level=str(level), **sender) == n
    assert value(page, "nakflow_messages_received_total", **receiver) == r["received"]
    assert value(page, "nakflow_messages_delivered_total", **receiver) == r["delivered"]
    assert value(page, "nakflow_queue_messages", **receiver) == r["queued"] == 500
    assert value(page, "nakflow_queue_fill_ratio", **receiver) == pytest.approx(
        r["queued"] / 1_000)
    assert value(page, "nakflow_messages_dropped_total", **receiver) == r["dropped"]
    for reason, key in (("in_flight", "lost"), ("queue_full", "dropped_unrepaired"),
                        ("beyond_history", "beyond_history"),
                        ("before_join", "missed_before_join")):
        assert value(page, "nakflow_messages_missing", reason=reason, **receiver) == r[key]
    for status, n in (("complete", 1), ("open", 0), ("incomplete", 0)):
        assert value(page, "nakflow_streams", status=status, **receiver) == n
    for kind in ("mode", "key"):
        assert value(page, "nakflow_peer_mismatch_total", kind=kind, **sender) == 0
    for level, n in r["naks_sent"].items():
        assert value(page, "nakflow_naks_total", level=str(level), **receiver) == n
    assert sum(r["naks_sent"].values()) > 0  # the small queue did fill


def test_counters_only_grow_and_what_repair_brings_back_is_a_gauge():
    """A scraper reads a counter that fell as a restart. ``nakflow_messages_lost_total``
    was one, of figures that repair brings down: a gap found in flight read 1, then 0
    once repaired. Those are now the gauge ``nakflow_messages_missing``; every counter of
    a receiver's exposition only grows, here over a gap and its repair (the real core,
    frames in)."""
    from nakflow.config import ReceiverConfig
    from nakflow.core.receiver_core import ReceiverCore
    from nakflow.live.prometheus import snapshot_metrics
    from nakflow.wire import Data, RData, encode

    def page(now: float) -> dict[tuple[str, str, frozenset], float]:
        return {(f.type, s.name, frozenset(s.labels.items())): s.value
                for f in snapshot_metrics(core.snapshot(now)) for s in f.samples}

    core = ReceiverCore(ReceiverConfig(mode="nak", stream="m", receiver_id="r"), now=0.0)
    core.receive_data(encode(Data("m", "s", 1, 0, 0.0, (b"a",))), 0.01)
    core.receive_data(encode(Data("m", "s", 1, 2, 0.0, (b"c",))), 0.02)  # seq 1 lost
    gap = page(0.03)
    core.receive_data(encode(RData("m", "s", 1, 1, 0.0, (b"b",))), 0.04)
    repaired = page(0.05)
    missing = ("gauge", "nakflow_messages_missing")
    assert [v for k, v in gap.items() if k[:2] == missing and ("reason", "in_flight") in k[2]
            ] == [1.0]
    assert [v for k, v in repaired.items() if k[:2] == missing and ("reason", "in_flight")
            in k[2]] == [0.0]
    counters = {k: v for k, v in gap.items() if k[0] == "counter"}
    assert len(counters) >= 12
    assert all(repaired[k] >= v for k, v in counters.items()), [
        (k, v, repaired[k]) for k, v in counters.items() if repaired[k] < v]
    assert repaired[("counter", "nakflow_messages_repaired_total",
                     frozenset({"role": "receiver", "id": "r", "stream": "m",
                                "mode": "nak"}.items()))] == 1


def start_service(tmp_path, *extra: str) -> tuple[subprocess.Popen, dict]:
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        nakflow_cmd("receive", "--data", "tcp://127.0.0.1:*", "--feedback",
                    "tcp://127.0.0.1:*", "--stream", "svc", "--metrics-port", "0",
                    "--ready-file", str(ready), "--json", *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: ready.exists() or proc.poll() is not None, 30, "the receiver")
    assert proc.poll() is None, proc.communicate()
    return proc, json.loads(ready.read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_service_drains_its_queue_into_the_sink_on_a_signal(tmp_path, signum):
    """The consumer is slow (1,000 msgs/s), so most of the 4,000 messages are still queued
    when the signal comes: all of them must reach the file, the report must say so, and
    the exit status must be 0."""
    out = tmp_path / "out.jsonl"
    proc, ready = start_service(tmp_path, "--consume-rate", "1000", "--sink", f"file:{out}")
    try:
        with Sender(ready["data"], ready["feedback"], mode="nak", stream="svc") as tx:
            tx.wait_for_receivers(1)
            for i in range(4_000):
                tx.send(msgpack.packb({"id": i, "name": f"row-{i}"}))
        wait_until(lambda: value(scrape(ready["metrics"]), "nakflow_messages_received_total")
                   == 4_000, 60, "every message to arrive")
        queued = value(scrape(ready["metrics"]), "nakflow_queue_messages")
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert queued > 1_000  # the signal really came with a backlog
    assert f"stopping on {signal.Signals(signum).name}: draining" in stderr
    report = json.loads(stdout)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["payload"]["id"] for x in lines] == list(range(4_000))  # in order, once
    assert lines[7]["payload"] == {"id": 7, "name": "row-7"} and lines[7]["seq"] == 7
    assert report["delivered"] == 4_000 and report["queued"] == 0
    assert report["sink"] == {"target": f"file:{out}", "written": 4_000, "not_written": 0,
                              "error": None, "rejected": 0, "rejected_why": None}


def test_every_payload_becomes_a_line_binary_and_out_of_range_ones_too(tmp_path):
    """Whatever a sender's payload is, the JSON-line sink writes it and nothing is lost:
    bytes that are neither msgpack nor UTF-8 (a protobuf, say) as ``payload_b64``, a
    msgpack timestamp past year 9999 too. Before, the first ended the receiver with a
    KeyError traceback, the second with an OverflowError."""
    import base64
    import os

    out = tmp_path / "out.jsonl"
    proc, ready = start_service(tmp_path, "--senders", "1", "--sink", f"file:{out}")
    payloads = [os.urandom(24) + b"\xff" for _ in range(20)]
    payloads += [msgpack.packb({"at": msgpack.Timestamp(2**40, 5)}), "héllo".encode(),
                 msgpack.packb({"id": 1}), b""]
    try:
        with Sender(ready["data"], ready["feedback"], mode="nak", stream="svc") as tx:
            tx.wait_for_receivers(1)
            tx.send_batch(payloads)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert json.loads(stdout)["sink"]["written"] == len(lines) == len(payloads)
    assert [base64.b64decode(x["payload_b64"]) for x in lines[:21]] == payloads[:21]
    assert [x["payload"] for x in lines[21:]] == ["héllo", {"id": 1}, ""]


def test_a_payload_is_a_row_then_text_then_a_msgpack_scalar_then_base64():
    """The JSON-line sink's reading of a payload, where msgpack and UTF-8 text overlap:
    text wins over a msgpack number (``a`` is also 97), a map, array or string over text
    (no UTF-8 text is a map or array; a msgpack string of 128-191 bytes is UTF-8 text,
    its header an Arabic letter), and a number that is no text stays msgpack; or the
    reading said (``--payload``)."""
    from nakflow.core.receiver_core import Message
    from nakflow.live.sinks import message_json

    def payload(raw: bytes, reading: str = "auto") -> object:
        record = json.loads(message_json("s", Message("x", 1, 0, 0.0, raw), reading))
        return record.get("payload", ("b64", record.get("payload_b64")))

    greek = "\u03b1\u03b2a"  # alpha, beta, a: 5 bytes, a msgpack uint32
    long_text = "x" * 130  # as msgpack: 0xd9 0x82 ..., also UTF-8 text (U+0642 first)
    cases = [(b"a", "a"), ("Я".encode(), "Я"), (greek.encode(), greek), (b"{", "{"),
             (msgpack.packb({"id": 1}), {"id": 1}), (msgpack.packb([1, "x"]), [1, "x"]),
             (msgpack.packb("hello"), "hello"), (msgpack.packb(long_text), long_text),
             (msgpack.packb(-5), -5), (msgpack.packb(1.5), 1.5), (msgpack.packb(None), None),
             (b"", ""), (b"\xff\x00", ("b64", "/wA="))]
    assert [payload(raw) for raw, _ in cases] == [want for _, want in cases]
    # said, not guessed (nakflow receive --payload)
    assert [payload(b"a", r) for r in ("msgpack", "text", "base64")] == [97, "a", ("b64", "YQ==")]
    said_text = msgpack.packb(long_text)
    assert payload(said_text, "text") == said_text.decode()
    assert payload(b"\xc1", "text") == payload(b"\xc1", "msgpack") == ("b64", "wQ==")


def test_service_pipes_json_lines_into_a_command(tmp_path):
    out = tmp_path / "counted"
    command = f"{sys.executable} -c \"import sys; open({str(out)!r}, 'w').write(" \
              "str(sum(1 for _ in sys.stdin)))\""
    proc, ready = start_service(tmp_path, "--sink", f"cmd:{command}", "--senders", "1",
                                "--mode", "ack")
    with Sender(ready["data"], ready["feedback"], mode="ack", stream="svc") as tx:
        tx.wait_for_receivers(1)
        tx.send_batch([b"plain text %d" % i for i in range(2_500)])
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert out.read_text() == "2500"
    assert json.loads(stdout)["sink"]["written"] == 2_500


def test_a_sink_that_fails_stops_the_service_and_counts_what_it_could_not_write(tmp_path):
    proc, ready = start_service(tmp_path, "--sink", "cmd:head -c 1000 >/dev/null",
                                "--senders", "1")
    with Sender(ready["data"], ready["feedback"], mode="nak", stream="svc") as tx:
        tx.wait_for_receivers(1)
        for _ in range(20_000):
            if proc.poll() is not None:
                break
            tx.try_send(b"y" * 200)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    report = json.loads(stdout)
    sink = report["sink"]
    assert sink["error"] and "failed" in sink["error"]
    assert sink["not_written"] > 0
    # every message the receiver delivered was either written or counted as not written
    assert sink["written"] + sink["not_written"] == report["delivered"]


def test_the_metrics_show_the_sink_the_streams_and_a_peer_of_another_mode(tmp_path):
    """An operator watches a service through its metrics, not its exit: messages its
    Parquet sink cannot write (left out, the rest written), the streams by status, and a
    sender started in the wrong mode show there while it runs, as the report says at
    the end."""
    from nakflow.errors import PeerMismatch

    pytest.importorskip("pyarrow")
    proc, ready = start_service(tmp_path, "--sink", f"parquet:{tmp_path / 'pq'}")
    try:
        with Sender(ready["data"], ready["feedback"], mode="nak", stream="svc") as tx:
            tx.wait_for_receivers(1)
            tx.send_batch([msgpack.packb({"i": i}) for i in range(300)] + [b"\x07"] * 3)

        def sunk() -> float:
            page = scrape(ready["metrics"])
            return sum(value(page, "nakflow_sink_messages_total", outcome=o)
                       for o in ("written", "rejected"))

        wait_until(lambda: sunk() == 303, 60, "the sink to take every message")
        with pytest.raises(PeerMismatch, match="mode"), Sender(
                ready["data"], ready["feedback"], mode="ack", stream="svc") as wrong:
            wrong.wait_for_receivers(1, timeout=10)
        wait_until(lambda: value(scrape(ready["metrics"]), "nakflow_peer_mismatch_total",
                                 kind="mode") > 0, 30, "the mismatch")
        page = scrape(ready["metrics"])
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads(stdout)
    assert proc.returncode == 1, stderr  # rejected messages and a mismatch are problems
    sink = {"sink": f"parquet:{tmp_path / 'pq'}"}
    assert [value(page, "nakflow_sink_messages_total", outcome=o, **sink)
            for o in ("written", "rejected", "not_written")] == [300, 3, 0]
    assert value(page, "nakflow_sink_failed", **sink) == 0
    assert (report["sink"]["written"], report["sink"]["rejected"]) == (300, 3)
    assert [value(page, "nakflow_streams", status=s)
            for s in ("complete", "open", "incomplete")] == [1, 0, 0]
    assert 0 < value(page, "nakflow_peer_mismatch_total", kind="mode") <= report[
        "mode_mismatch"]
    assert value(page, "nakflow_peer_mismatch_total", kind="key") == 0


def test_send_serves_metrics_while_it_runs(tmp_path):
    rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", stream="svc")
    try:
        proc = subprocess.Popen(
            nakflow_cmd("send", "--data", ",".join(rx.data_endpoints), "--feedback",
                        ",".join(rx.feedback_endpoints), "--stream", "svc", "--duration", "30",
                        "--max-rate", "2000", "--metrics-port", "0", "--wait-receivers", "1",
                        "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        url = []

        def logged() -> bool:
            line = proc.stderr.readline()
            if "metrics on " in line:
                url.append(line.rsplit(" ", 1)[1].strip())
            return bool(url) or proc.poll() is not None

        wait_until(logged, 30, "the metrics line")
        wait_until(lambda: value(scrape(url[0]), "nakflow_messages_sent_total") >= 1_000,
                   30, "1,000 messages")
        page = scrape(url[0])
        assert value(page, "nakflow_rate_limit_messages_per_second") <= 2_000
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM  # stopped mid-stream: no END
        report = json.loads(stdout)
        assert report["sent"] >= 1_000
        assert any("interrupted by SIGTERM" in p for p in report["problems"])
    finally:
        rx.close()
        if proc.poll() is None:
            proc.kill()


def test_spark_style_push_reaches_a_real_pushgateway(pushgateway):
    from nakflow.live.prometheus import push_metrics

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", stream="p") as rx, \
            Sender(rx.data_endpoints, rx.feedback_endpoints, stream="p") as tx:
        tx.wait_for_receivers(1)
        tx.send_batch([b"q"] * 1_234)
        snap = tx.snapshot()
    push_metrics(pushgateway, snap, job="nakflow-test")
    page = scrape(f"{pushgateway}/metrics")
    assert value(page, "nakflow_messages_sent_total", job="nakflow-test",
                 id=snap["sender_id"]) == 1_234
    assert value(page, "nakflow_frames_sent_total", job="nakflow-test",
                 id=snap["sender_id"]) == snap["frames"]


def test_a_signal_between_taking_a_chunk_and_sinking_it_waits_for_the_hand_over():
    """SIGTERM raised Interrupted wherever the receive loop was: once between taking a
    chunk from the queue and writing it to the sink, and that chunk (2 of 4,000 messages
    at --consume-rate 1000) never reached the file. Inside ``signals_held`` the signal
    waits for the hand-over; a second one raises at once."""
    from nakflow.cli.commands import Interrupted, _Held, _raise_interrupted, signals_held

    old = signal.signal(signal.SIGINT, _raise_interrupted)
    try:
        done = []
        with pytest.raises(Interrupted), signals_held():
            signal.raise_signal(signal.SIGINT)
            done.append("taken")
            done.append("handed over")
        assert done == ["taken", "handed over"]
        with pytest.raises(Interrupted), signals_held():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # insists: raises at once
            done.append("never")
        assert done == ["taken", "handed over"]
        assert _Held.pending is None and _Held.depth == 0
    finally:
        signal.signal(signal.SIGINT, old)
