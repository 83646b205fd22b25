"""Real IP multicast (epgm) in a private network namespace.

One sender and two receiver processes on the same two multicast groups (data and
feedback), NAK mode, one receiver slow: nothing may be lost or dropped, with and
without the shared-key MAC. Then forgers on both groups (no key, a wrong key, a
recorded genuine frame played back): a keyed sender is not slowed and keyed
receivers deliver nothing of theirs. The outer test re-runs this file inside
``unshare -n`` (see tests/netns.py); multicast never leaves it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import zmq

from nakflow import SharedKey
from nakflow.keyfile import load_shared_key
from nakflow.testing import ReceiverSpec, run_mode
from nakflow.wire import Data, FrameAuth, Nak, encode
from tests.netns import run_in_netns
from tests.why import why_dropped

IN_NETNS = os.environ.get("NAKFLOW_IN_NETNS") == "1"
COUNT = 20_000
DATA_GROUP = "epgm://127.0.0.1;239.192.30.1:7101"
FEEDBACK_GROUP = "epgm://127.0.0.1;239.192.30.2:7102"
INNER_TESTS = 5
pytestmark = [pytest.mark.multicast, pytest.mark.slow]
inner = pytest.mark.skipif(not IN_NETNS, reason="runs inside a private netns (see last test)")


@pytest.fixture
def key_file(tmp_path) -> str:
    run = subprocess.run([sys.executable, "-m", "nakflow", "keygen", "--shared", str(tmp_path),
                          "stream"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return str(tmp_path / "stream.shared_key")


def brief(run: dict) -> str:
    rx = {r["receiver_id"]: {k: r[k] for k in ("delivered", "dropped", "lost", "queue_peak",
                                               "naks_sent", "malformed", "auth")}
          for r in run["receivers"]}
    return str((rx, {k: run["sender"][k] for k in ("rate_msgs", "cuts", "naks_received",
                                                    "auth")}))


@inner
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "shared-key"])
def test_nak_over_epgm_one_slow_receiver_zero_loss(keyed: bool, key_file: str) -> None:
    specs = [ReceiverSpec("slow", consume_rate_msgs=5_000, capacity_msgs=2_000),
             ReceiverSpec("fast", capacity_msgs=2_000)]
    extra = ["--shared-key", key_file] if keyed else []
    run = run_mode("nak", specs, count=COUNT, data_uri=DATA_GROUP, feedback_uri=FEEDBACK_GROUP,
                   extra_send=extra, extra_receive=extra)
    print(brief(run))
    for r in run["receivers"]:
        assert (r["delivered"], r["dropped"], r["lost"]) == (COUNT, 0, 0), why_dropped(run, r)
        assert (r["auth"] is not None) == keyed and r["malformed"] == 0
    slow = next(r for r in run["receivers"] if r["receiver_id"] == "slow")
    assert sum(slow["naks_sent"].values()) > 0 and run["sender"]["cuts"] > 0


@inner
def test_nak_over_epgm_forced_loss_everything_repaired() -> None:
    """Each receiver drops 1 % of the DATA it reads (a test hook, as loss in flight
    would), one of them is slow: every message arrives, by repair from the history."""
    specs = [ReceiverSpec("slow", consume_rate_msgs=5_000, capacity_msgs=2_000),
             ReceiverSpec("fast", capacity_msgs=2_000)]
    run = run_mode("nak", specs, count=COUNT, data_uri=DATA_GROUP, feedback_uri=FEEDBACK_GROUP,
                   extra_receive=["--test-drop-data", "0.01"])
    print(brief(run), {r["receiver_id"]: (r["repaired"], r["test_dropped"], r["repair"])
                       for r in run["receivers"]}, run["sender"]["repair"])
    for r in run["receivers"]:
        assert r["test_dropped"] > 0 and r["repaired"] > 0
        assert (r["delivered"], r["lost"], r["dropped_unrepaired"],
                r["beyond_history"]) == (COUNT, 0, 0, 0), r["receiver_id"]


class GroupForger:
    """Publishes the given frames on a multicast group, in turn, until stopped."""

    def __init__(self, group: str, frames: list[bytes]) -> None:
        self.sock = zmq.Context.instance().socket(zmq.PUB)
        self.sock.setsockopt(zmq.MULTICAST_HOPS, 1)
        self.sock.connect(group)
        self.frames, self.sent = frames, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.sock.send(self.frames[self.sent % len(self.frames)])
            self.sent += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close(0)


@inner
def test_shared_key_over_epgm_forgers_on_both_groups_have_no_effect(key_file: str) -> None:
    key = load_shared_key(key_file)
    now = time.time()
    nak = encode(Nak("default", "mallory", 100, 100.0, now))
    data = encode(Data("default", "mallory", 1, 0, now, (b"forged",)))
    wrong = FrameAuth(SharedKey(b"m" * 32))
    # a genuine NAK as an eavesdropper records it: the first copy is a NAK, the rest replays
    genuine = FrameAuth(key).seal(encode(Nak("default", "r-real", 100, 100.0, now)), now=now)
    feedback = GroupForger(FEEDBACK_GROUP, [nak, wrong.seal(nak, now=now), genuine])
    intruder = GroupForger(DATA_GROUP, [data, wrong.seal(data, now=now), genuine])
    time.sleep(0.5)  # both forgers are on the groups before anyone listens
    try:
        specs = [ReceiverSpec("fast-1", capacity_msgs=20_000),
                 ReceiverSpec("fast-2", capacity_msgs=20_000)]
        extra = ["--shared-key", key_file]
        run = run_mode("nak", specs, count=COUNT, data_uri=DATA_GROUP,
                       feedback_uri=FEEDBACK_GROUP, extra_send=[*extra, "--max-rate", "20000"],
                       extra_receive=extra)
    finally:
        feedback.close()
        intruder.close()
    print(brief(run), feedback.sent, intruder.sent)
    sender = run["sender"]
    assert sender["auth"]["unsigned"] > 0 and sender["auth"]["unknown_key"] > 0
    assert sender["auth"]["replayed"] > 0
    assert sum(sender["naks_received"].values()) <= 1 and sender["cuts"] <= 1
    for r in run["receivers"]:
        assert (r["delivered"], r["dropped"], r["lost"]) == (COUNT, 0, 0), r["receiver_id"]
        assert "mallory" not in {s["sender"] for s in r["senders"]}
        assert r["auth"]["unsigned"] > 0 and r["auth"]["unknown_key"] > 0
        assert r["auth"]["replayed"] > 0 and r["malformed"] == 0


@inner
def test_a_group_openpgm_cannot_join_is_named_with_what_it_needs() -> None:
    """An interface that is not this machine's: libzmq's own error was ``Invalid argument``
    with nothing else, for a sender and a receiver alike."""
    from nakflow import Receiver, Sender
    from transports import EndpointError

    bad = "epgm://10.9.9.9;239.192.30.1:7101"
    for make in (Sender, Receiver):
        with pytest.raises(EndpointError, match=r"cannot join epgm://10\.9\.9\.9;239\.192"
                           r"\.30\.1:7101: OpenPGM refused it \(Invalid argument.*'10\.9\.9"
                           r"\.9' must be an interface of this machine, up, with multicast on"):
            make(bad, FEEDBACK_GROUP)


@pytest.mark.skipif(IN_NETNS, reason="already inside the namespace")
def test_multicast_scenarios_in_private_netns(require_multicast: None) -> None:
    argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__,
            "-k", "not private_netns"]
    proc = run_in_netns(argv, timeout_s=400, env={"NAKFLOW_IN_NETNS": "1"})
    out = proc.stdout + proc.stderr
    print(out[-3000:])
    failures = out.find("= FAILURES =")  # the inner failures whole (their why), not a tail
    assert proc.returncode == 0, out[failures:failures + 12_000] if failures >= 0 else out[-4000:]
    assert f"{INNER_TESTS} passed" in out, out[-2000:]
