"""docs/exit-codes.md, row by row, with the real processes: what each command exits with,
and that a misconfiguration fails at once with its real cause. Rows shown elsewhere are
named in the table's doc; this file has the rest (and the fail-fast cases)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from nakflow import ConfigError, KeyMismatch, PeerMismatch, Sender
from nakflow.keyfile import write_shared_key
from nakflow.testing import nakflow_cmd
from spark_adapter import WriterConfig
from tests.test_cli import endpoints, nakflow, receiver
from transports import EndpointError

pytestmark = pytest.mark.slow


def last_line(text: str) -> str:
    return [ln for ln in text.strip().splitlines() if "speedups" not in ln][-1]


# -- 0 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_idle_service_stopped_by_a_signal_exits_0(signum):
    """A service (no --senders, no --duration) that heard nobody: a routine stop, not a
    failure (a systemd unit with Restart=on-failure must not log one)."""
    rx = receiver(*endpoints())
    rx.send_signal(signum)
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0, err
    report = json.loads(out)
    assert report["problems"] == [] and report["stopped_by"] == signal.Signals(signum).name


def test_a_service_stopped_after_a_complete_stream_exits_0():
    data, fb = endpoints()
    rx = receiver(data, fb)
    tx = nakflow("send", "--data", data, "--feedback", fb, "--count", "3000")
    assert tx.returncode == 0, tx.stderr
    assert "to 1 receiver: 1 complete" in tx.stderr
    rx.send_signal(signal.SIGTERM)
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0 and json.loads(out)["delivered"] == 3000, err


# -- 1 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mine,theirs", [("ack", "nak"), ("nak", "ack")])
def test_a_receiver_of_another_mode_fails_the_sender_at_once_naming_it(mine, theirs):
    """The sender stops waiting as soon as the receiver answers (not after --wait-timeout)
    and its last line says which receiver runs which mode."""
    data, fb = endpoints()
    rx = receiver(data, fb, "--mode", theirs, "--id", "r-other", "--duration", "60")
    try:
        t0 = time.monotonic()
        tx = nakflow("send", "--data", data, "--feedback", fb, "--mode", mine,
                     "--wait-timeout", "60")
        took = time.monotonic() - t0
    finally:
        rx.kill()
        rx.communicate()
    assert tx.returncode == 1, tx.stderr
    line = last_line(tx.stderr)
    assert "error: receiver r-other runs mode" in line and repr(theirs) in line, line
    assert repr(mine) in line
    assert took < 30, took  # far inside --wait-timeout: it did not wait that out


def test_a_receiver_with_another_shared_key_is_named_when_the_wait_runs_out(tmp_path):
    """It cannot read the sender's sealed HELLO, so it never answers; its own frames,
    sealed with another key, may as well be a forger's (who must not stop a sender), so
    the sender names the key when its wait runs out, and exits 1, not 2."""
    mine, theirs = write_shared_key(str(tmp_path), "a"), write_shared_key(str(tmp_path), "b")
    data, fb = endpoints()
    rx = receiver(data, fb, "--shared-key", theirs, "--duration", "60")
    try:
        tx = nakflow("send", "--data", data, "--feedback", fb, "--shared-key", mine,
                     "--wait-timeout", "2")
    finally:
        rx.kill()
        rx.communicate()
    assert tx.returncode == 1, tx.stderr
    line = last_line(tx.stderr)
    assert "no receiver answered" in line and "sealed with another shared key" in line, line


def test_a_wait_that_reached_every_receiver_but_heard_no_answer_says_so():
    """Another stream: the receiver is up and takes the connection, but never answers.
    The error said only "0 of 1 receivers answered"; it now says the endpoints were
    reached, and what makes a receiver that is up stay silent."""
    from nakflow import Receiver
    from transports.channels import REACHED_BUT_SILENT

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", stream="orders") as rx, \
            Sender(rx.data_endpoints, rx.feedback_endpoints, stream="order") as tx, \
            pytest.raises(TimeoutError) as err:
        tx.wait_for_receivers(timeout=0.5)
    assert str(err.value) == (f"0 of 1 receivers answered in 0.5 s on {rx.data_endpoints[0]}; "
                              f"{REACHED_BUT_SILENT}")
    assert "only its own stream, --stream" in REACHED_BUT_SILENT


def test_a_wait_for_more_receivers_than_the_endpoints_lead_to_says_so():
    """Two receivers waited for on one data endpoint: the one there answered. The error
    said the receivers were up but did not answer, which is not what happened."""
    from nakflow import Receiver
    from transports.channels import REACHED_BUT_SILENT

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as rx, \
            Sender(rx.data_endpoints, rx.feedback_endpoints) as tx:
        with pytest.raises(TimeoutError) as err:
            tx.wait_for_receivers(2, timeout=0.5)
        with pytest.raises(ValueError, match="n must be >= 0, not -1"):
            tx.wait_for_receivers(-1)  # it returned 0
    assert str(err.value) == (
        f"1 of 2 receivers answered in 0.5 s on {rx.data_endpoints[0]}: each data endpoint "
        "leads to one receiver, so at most 1 can answer (wait for fewer, or list every "
        "receiver's endpoints)")
    assert REACHED_BUT_SILENT not in str(err.value)


def test_peer_mismatch_in_python():
    from nakflow import Receiver

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="ack") as rx, \
            Sender(rx.data_endpoints, rx.feedback_endpoints, mode="nak") as tx, \
            pytest.raises(PeerMismatch, match=r"runs mode 'ack'.*this sender runs 'nak'"):
        tx.wait_for_receivers(1, timeout=60)



def test_an_ack_send_that_never_waited_for_receivers_names_a_mode_mismatch():
    """An ``ack`` sender that sends without ``wait_for_receivers`` to a ``nak`` receiver:
    no credit ever comes. Its send's timeout said "no permission to send within 3 s (ack:
    no receiver is left to grant credit)"; it now raises the cause it heard."""
    from nakflow import Receiver

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="nak") as rx, \
            Sender(rx.data_endpoints, rx.feedback_endpoints, mode="ack") as tx, \
            pytest.raises(PeerMismatch, match=r"^no permission to send within 3 s: receiver "
                                              r"r-\w+ runs mode 'nak', this sender runs 'ack'"):
        tx.send(b"x", timeout=3)


def test_a_stray_answer_in_another_mode_does_not_stop_a_sender_whose_receivers_answer():
    """The core's rule, with explicit time: an answer in another mode (a forger on an open
    channel, or a receiver of another deployment) stops the wait only if, within
    MISMATCH_GRACE_S, not enough receivers of the sender's own mode answer."""
    from nakflow import SenderConfig, SenderCore
    from nakflow.core.wait import MISMATCH_GRACE_S
    from nakflow.wire import Hello, encode

    def core() -> SenderCore:
        tx = SenderCore(SenderConfig(mode="nak", sender_id="s", epoch=1), now=0.0)
        tx.want_receivers(1, 0.0)
        tx.handle_timer(0.0)  # its first HELLO: answers echo its stamp
        tx.receive_feedback(encode(Hello("default", "stray", "receiver", "ack", 0, 0, "s",
                                         tx.framer.hello_stamps[-1])), 0.01)
        return tx

    tx = core()
    assert tx.receivers_ready() == 1 or tx.wait_error(0.02) is None  # not at once
    tx.receive_feedback(encode(Hello("default", "mine", "receiver", "nak", 0, 0, "s",
                                     tx.framer.hello_stamps[-1])), 0.05)
    assert "mine" in tx.roster.answered and tx.snapshot(0.1)["mode_mismatch"] == 1
    tx = core()
    assert tx.wait_error(0.01 + MISMATCH_GRACE_S / 2) is None
    error = tx.wait_error(0.01 + MISMATCH_GRACE_S)
    assert isinstance(error, PeerMismatch) and not isinstance(error, KeyMismatch)
    assert "receiver stray runs mode 'ack'" in str(error)


def test_a_wait_that_runs_out_after_frames_of_another_key_raises_key_mismatch():
    """The core's rule, with explicit time: frames sealed with another key do not stop a
    waiting sender (a forger's would), but once its wait runs out they are named, as a
    ``KeyMismatch`` (a ``TimeoutError`` too: nobody answered)."""
    from nakflow import SenderConfig, SenderCore
    from nakflow.wire import Hello, encode
    from nakflow.wire.auth import FrameAuth, SharedKey

    tx = SenderCore(SenderConfig(mode="nak", sender_id="s", epoch=1,
                                 shared_key=SharedKey(b"a" * 32)), now=0.0)
    tx.want_receivers(1, 0.0)
    theirs = FrameAuth(SharedKey(b"b" * 32))
    tx.receive_feedback(theirs.seal(encode(Hello("default", "r", "receiver", "nak", 0, 0, "s",
                                                 0.0)), now=0.01), 0.01)
    assert tx.receivers_ready() == 0 and tx.wait_error(5.0) is None
    error = tx.wait_error(5.0, timed_out=True)
    assert isinstance(error, KeyMismatch) and isinstance(error, TimeoutError)
    assert "no receiver answered, and 1 " in str(error) and "--shared-key" in str(error)


def test_a_sink_that_dies_mid_stream_stops_the_service_with_1_and_says_what_it_wrote(
        tmp_path):
    """A real command that reads 100 lines and exits: the service stops, status 1, and
    written + not_written covers every message delivered."""
    data, fb = endpoints()
    rx = receiver(data, fb, "--sink", f"cmd:head -n 100 > {tmp_path / 'got'}",
                  "--consume-rate", "5000")
    with Sender(data, fb) as tx:
        tx.wait_for_receivers(1, timeout=30)
        for i in range(20_000):
            if rx.poll() is not None:
                break
            tx.try_send(b"%d" % i)
            if i % 500 == 0:
                time.sleep(0.01)
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 1, err
    sink = json.loads(out)["sink"]
    assert sink["written"] >= 100 and sink["not_written"] > 0 and sink["error"]
    assert sink["written"] + sink["not_written"] == json.loads(out)["delivered"]
    assert len((tmp_path / "got").read_text().splitlines()) == 100
    # the last lines say so too (they said "delivered N of N, 0 missing" and no more)
    assert (f"nakflow receive: problem: the sink wrote {sink['written']:,} messages, not the "
            f"other {sink['not_written']:,}: sink cmd:head -n 100") in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_sink_counts_written_only_what_left():
    """``--sink file:`` on a full disk (/dev/full): the file's buffer took the first chunk,
    which was counted written, and lost it with the next write's ENOSPC. Each chunk is
    flushed now: written 0, not written every message delivered, exit 1."""
    data, fb = endpoints()
    rx = receiver(data, fb, "--senders", "1", "--sink", "file:/dev/full",
                  "--consume-rate", "1000")  # takes of 2 messages: lines a buffer holds
    with Sender(data, fb) as tx:
        tx.wait_for_receivers(1, timeout=30)
        tx.send_batch([b"%d" % i for i in range(200)])
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 1, err
    report = json.loads(out)
    sink = report["sink"]
    assert sink["written"] == 0 and sink["not_written"] == report["delivered"] > 0
    assert "No space left on device" in sink["error"]


def test_messages_the_parquet_sink_cannot_write_are_counted_and_the_rest_written(tmp_path):
    """A msgpack int, bytes that are neither msgpack nor Arrow and an integer beyond int64,
    among rows: each is left out and counted, every row around them is written, and the
    receiver says so and exits 1. Before, the int raised TypeError out of the receive loop
    (a traceback, the rest unwritten), and the junk stopped the sink."""
    pytest.importorskip("pyarrow")
    import msgpack
    import pyarrow.parquet as pq

    data, fb = endpoints()
    rx = receiver(data, fb, "--senders", "1", "--sink", f"parquet:{tmp_path / 'pq'}")
    bad = [msgpack.packb(5), b"junk", msgpack.packb({"i": 2**64 - 1})]
    with Sender(data, fb) as tx:
        tx.wait_for_receivers(1, timeout=30)
        tx.send_batch([msgpack.packb({"i": i}) for i in range(10)])
        tx.send_batch(bad)
        tx.send_batch([msgpack.packb({"i": i}) for i in range(10, 20)])
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 1, err
    report = json.loads(out)
    assert report["delivered"] == 23 and report["sink"]["error"] is None
    assert (report["sink"]["written"], report["sink"]["rejected"]) == (20, 3)
    assert pq.read_table(tmp_path / "pq").column("i").to_pylist() == list(range(20))
    assert ("problem: the sink could not write 3 messages (the first: "
            f"{report['senders'][0]['sender']} ") in err
    assert ("seq 10: a msgpack int, not a row (a map of column name to value)); it wrote "
            "the others") in err


def test_a_parquet_sink_that_fills_its_disk_counts_written_only_what_a_reader_gets(
        tmp_path):
    """The disk fills (here: a file size limit, RLIMIT_FSIZE) as the second stream's rows
    go into their file: that file cannot be read. Its messages were counted written when
    they were handed over (21,000 written, 0 not written, one file of 1,000 rows on disk).
    Now written counts closed files: 1,000, the rest not written, and the directory reads
    (the broken file is removed; an open one is hidden, ``.part-...``, so a reader of the
    directory never trips on it)."""
    pytest.importorskip("pyarrow")
    import resource

    import msgpack
    import pyarrow.parquet as pq

    from nakflow.testing import nakflow_cmd

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    data, fb = endpoints()
    out_dir = tmp_path / "pq"
    rx = subprocess.Popen(
        nakflow_cmd("receive", "--data", data, "--feedback", fb, "--json", "--senders", "2",
                    "--sink", f"parquet:{out_dir}"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=small_files)
    try:
        assert rx.stderr is not None and "ready" in rx.stderr.readline()
        with Sender(data, fb) as tx:
            tx.wait_for_receivers(1, timeout=30)
            tx.send_batch([msgpack.packb({"i": i}) for i in range(1_000)])
        deadline = time.monotonic() + 60
        while not any(p.suffix == ".parquet" for p in out_dir.iterdir()):  # its file closed
            assert time.monotonic() < deadline and rx.poll() is None
            time.sleep(0.02)
        with Sender(data, fb) as tx:  # 20,000 rows of 150 random bytes: 3 MB, over it
            tx.wait_for_receivers(1, timeout=30)
            for start in range(0, 20_000, 1_000):
                tx.send_batch([msgpack.packb({"i": i, "s": os.urandom(150).hex()})
                               for i in range(start, start + 1_000)])
        out, err = rx.communicate(timeout=120)
    finally:
        if rx.poll() is None:
            rx.kill()
    assert rx.returncode == 1, err
    report = json.loads(out)
    sink = report["sink"]
    assert "File too large" in sink["error"]
    assert report["delivered"] == 21_000
    assert (sink["written"], sink["not_written"], sink["rejected"]) == (1_000, 20_000, 0)
    assert sink["written"] + sink["not_written"] == report["delivered"]
    assert pq.read_table(out_dir).column("i").to_pylist() == list(range(1_000))
    assert [p.name.startswith("part-") for p in out_dir.iterdir()] == [True]


def test_a_handler_that_raises_is_a_problem_in_the_receivers_verdict():
    """``Receiver(handler=f)``: the messages ``f`` raised on are counted and logged, and
    the verdict (``receiver_verdict``, the CLI's last lines) says so, where it said
    "0 missing" and nothing more."""
    from nakflow import Receiver
    from nakflow.report import receiver_verdict

    last = threading.Event()

    def picky(msg) -> None:
        if msg.seq == 99:
            last.set()
        if msg.seq % 10 == 0:
            raise ValueError("not this one")

    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", handler=picky) as rx:
        with Sender(rx.data_endpoints, rx.feedback_endpoints) as tx:
            tx.wait_for_receivers(timeout=10)
            tx.send_batch([b"%d" % i for i in range(100)])
        assert last.wait(20)
        deadline = time.monotonic() + 20  # the END, read by the receiver's I/O thread
        while not rx.done(1) and time.monotonic() < deadline:
            time.sleep(0.01)
        verdict = receiver_verdict(rx.snapshot(), expect_senders=1)
    assert verdict.line == "delivered 100 of 100 from 1 sender, 0 missing"
    assert verdict.problems == ["the handler raised on 10 messages (logged)"]


# -- 2 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sink,words", [
    ("cmd:/no/such/cmd", "/no/such/cmd: no such file"),
    ("cmd:no-such-program-here --x", "no-such-program-here: command not found"),
    ("cmd:true", "exited at once with status 0"),
    ("cmd:sh -c 'exit 3'", "exited at once with status 3"),
    ("file:/no/such/dir/out.jsonl", "cannot open /no/such/dir/out.jsonl"),
    ("parquet:/proc/nakflow-no-such-dir", "cannot create /proc/nakflow-no-such-dir"),
])
def test_a_sink_that_cannot_start_is_one_line_exit_2_and_no_ready(sink, words):
    out = nakflow("receive", "--data", "tcp://127.0.0.1:*", "--feedback", "tcp://127.0.0.1:*",
                  "--sink", sink)
    assert out.returncode == 2, out.stderr
    assert "ready" not in out.stderr and words in last_line(out.stderr), out.stderr


@pytest.mark.parametrize("data,feedback,words", [
    ("tcp://127.0.0.1:5600,tcp://127.0.0.1:5610", "tcp://127.0.0.1:5601",
     "2 data endpoints and 1 feedback endpoint"),
    ("tcp://127.0.0.1:5600,tcp://127.0.0.1:5600", "tcp://127.0.0.1:5601,tcp://127.0.0.1:5611",
     "tcp://127.0.0.1:5600 is named twice"),
])
def test_endpoint_lists_that_do_not_pair_are_refused(data, feedback, words):
    out = nakflow("send", "--data", data, "--feedback", feedback)
    assert out.returncode == 2 and words in last_line(out.stderr), out.stderr
    for make in (lambda: Sender(data, feedback), lambda: WriterConfig(data, feedback)):
        with pytest.raises(ValueError, match=words):
            make()
    assert issubclass(EndpointError, ValueError) and issubclass(ConfigError, ValueError)


# -- 128 + signal ------------------------------------------------------------------------
def test_a_one_shot_receive_interrupted_before_it_finished_exits_128_plus_the_signal():
    rx = receiver(*endpoints(), "--senders", "1")
    rx.send_signal(signal.SIGTERM)
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM before it finished" in last_line(err)
    assert json.loads(out)["stopped_by"] == "SIGTERM"  # its report came first


def test_simulate_interrupted_exits_130():
    proc = subprocess.Popen(nakflow_cmd("simulate", "fanout-sweep"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # its first run is done: the sweep is under way
    assert first.startswith("[simulate]"), first
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in last_line(err) and "Traceback" not in err


def test_the_help_of_each_command_states_its_exit_codes():
    for command in ("send", "receive", "eval", "simulate", "speedups"):
        out = subprocess.run([sys.executable, "-m", "nakflow", command, "--help"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "exit status:" in out.stdout, command
        assert "docs/exit-codes.md" in out.stdout.replace("\n", " ")


def test_a_parquet_sink_writes_empty_maps_and_leaves_out_a_type_parquet_cannot_store(
        tmp_path):
    """Rows sent row by row with an empty map (a Spark ``map`` column with no entries,
    msgpack ``{}``) and an empty list: ``nakflow receive --sink parquet:`` died at its
    stop with pyarrow's traceback (``Cannot write struct type 'attrs' with no child
    field to Parquet``), no report, a hidden broken file left. Now an empty map is written
    as a null (a struct of nulls in a file whose rows have keys), and an Arrow message with a type
    Parquet has no form for (a union) is left out and counted ``rejected``, the others
    written."""
    pytest.importorskip("pyarrow")
    import msgpack
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nakflow.arrow import encode_batch
    from nakflow.testing import nakflow_cmd

    data, fb = endpoints()
    out_dir = tmp_path / "pq"
    rx = subprocess.Popen(
        nakflow_cmd("receive", "--data", data, "--feedback", fb, "--json", "--senders", "2",
                    "--sink", f"parquet:{out_dir}"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    union = pa.UnionArray.from_sparse(pa.array([0, 1], type=pa.int8()),
                                      [pa.array([1, 2]), pa.array(["a", "b"])])
    try:
        assert rx.stderr is not None and "ready" in rx.stderr.readline()
        with Sender(data, fb) as tx:
            tx.wait_for_receivers(1, timeout=30)
            tx.send_batch([msgpack.packb({"i": i, "attrs": {} if i < 50 else {"k": i},
                                          "tags": []}) for i in range(100)])
        with Sender(data, fb) as tx:
            tx.wait_for_receivers(1, timeout=30)
            tx.send(encode_batch(pa.RecordBatch.from_arrays([pa.array([1, 2]), union],
                                                            names=["id", "u"])))
            tx.send(encode_batch(pa.RecordBatch.from_arrays([pa.array([3])], names=["id"])))
        out, err = rx.communicate(timeout=60)
    finally:
        if rx.poll() is None:
            rx.kill()
    assert "Traceback" not in err, err
    report = json.loads(out)
    assert report["sink"]["written"] == 101 and report["sink"]["rejected"] == 1, report["sink"]
    assert report["sink"]["not_written"] == 0 and report["sink"]["error"] is None
    assert "Parquet has no form for a type of these rows" in report["sink"]["rejected_why"]
    rows = [r for f in sorted(out_dir.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    first = [r for r in rows if "i" in r and r["i"] is not None]
    assert [r["i"] for r in first] == list(range(100))
    # an empty map: a null, or a struct of nulls where the file's rows have keys
    assert all(r["attrs"] in (None, {"k": None}) for r in first[:50])
    assert [r["attrs"] for r in first[50:]] == [{"k": i} for i in range(50, 100)]
    assert all(r["tags"] == [] for r in first)
    assert [r["id"] for r in rows if r.get("id") is not None] == [3]
    assert rx.returncode == 1  # a message left out is a problem of the run, and says so
