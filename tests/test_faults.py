"""Crashes with real processes: a sender killed and restarted (a new epoch), and a
receiver killed and restarted on the same endpoints mid-stream (in ``ack`` mode the
dead one is evicted once its connection closed and it stayed silent)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from nakflow.testing import free_port, nakflow_cmd

pytestmark = pytest.mark.slow


def receiver(data: str, feedback: str, name: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(nakflow_cmd("receive", "--data", data, "--feedback", feedback,
                                        "--id", name, "--json", "--capacity", "20000",
                                        "--allow-loss", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report(proc: subprocess.Popen[str], timeout: float = 60.0, status: int = 0) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == status, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_sender_killed_and_restarted_is_a_new_epoch():
    data, fb = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    rx = receiver(data, fb, "r", "--senders", "1", "--duration", "60")
    time.sleep(0.5)
    first = subprocess.Popen(nakflow_cmd("send", "--data", data, "--feedback", fb, "--id", "S",
                                         "--duration", "30", "--max-rate", "5000",
                                         "--wait-receivers", "1"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # about 5,000 messages in
    first.send_signal(signal.SIGKILL)
    first.communicate()
    second = subprocess.run(nakflow_cmd("send", "--data", data, "--feedback", fb, "--id", "S",
                                        "--count", "3000", "--wait-receivers", "1", "--json"),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    rep = report(rx)
    streams = sorted((s for s in rep["senders"] if s["sender"] == "S"), key=lambda s: s["epoch"])
    assert len(streams) == 2 and streams[0]["epoch"] < streams[1]["epoch"]
    killed, restarted = streams
    assert killed["status"] == "incomplete" and killed["final_seq"] is None
    assert rep["problems"] == ["1 sender(s) sent no END (stopped, or still sending)"]
    assert killed["received"] > 1_000 and killed["lost"] == 0
    assert restarted["status"] == "complete" and restarted["received"] == 3_000
    assert restarted["duplicates"] == 0 and restarted["lost"] == 0  # seqs not confused
    assert rep["delivered"] == killed["received"] + 3_000


@pytest.mark.parametrize("mode", ["nak", "ack"])
def test_receiver_killed_and_restarted_resynchronises_others_unaffected(mode: str):
    """Three receivers; one is stopped 1.5 s in, killed 0.2 s later and restarted on the
    same endpoints. (Stopped first, so that what its socket held is lost for certain: a
    kill alone loses only what was in flight at that moment, and ZeroMQ's pipe to the
    endpoint keeps the rest for the next process there. Two test runs sharing the two
    cores once killed it with nothing in flight, and it got everything without a repair.)

    ``nak``: restarted 1 s later; the sender never waits for it, and the restarted one
    asks the sender's history for what it missed (late join): it ends with everything.
    ``ack``: the sender stalls on the dead receiver's credit until the ledger evicts it:
    ZeroMQ's socket monitor says a connection closed, and the one receiver that then
    stays silent for ``disconnect_probe_s`` is evicted as disconnected (not after the
    5 s ``receiver_timeout_s``); the receiver is restarted 3 s after the kill and is
    granting again; what was sent before it came back is reported as missed before it
    joined (no history in ack), and nothing lost after. Either way the others lose
    nothing, and the sender's close knows what each receiver holds: in ack the restarted
    one's receipt says what it missed, and the sender exits 1 (missing data).
    """
    ends = [(f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")
            for _ in range(3)]
    opts = ("--mode", mode, "--capacity", "2000", "--senders", "1", "--duration", "90")
    rxs = [receiver(d, f, f"r{i}", *opts) for i, (d, f) in enumerate(ends)]
    time.sleep(0.5)
    count, rate = 40_000, 5_000
    sender = subprocess.Popen(nakflow_cmd("send", "--data", ",".join(d for d, _ in ends),
                                          "--feedback", ",".join(f for _, f in ends),
                                          "--mode", mode, "--id", "S", "--count", str(count),
                                          "--max-rate", str(rate), "--wait-receivers", "3",
                                          "--json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    rxs[2].send_signal(signal.SIGSTOP)
    time.sleep(0.2)  # its socket fills: that is lost with it
    rxs[2].send_signal(signal.SIGKILL)
    rxs[2].communicate()
    time.sleep(1.0 if mode == "nak" else 3.0)
    rxs[2] = receiver(*ends[2], "r2", *opts)
    s = report(sender, timeout=90, status=0 if mode == "nak" else 1)
    assert s["sent"] == count
    r0, r1, r2 = (report(p, timeout=90) for p in rxs)
    at_close = {c["receiver"]: c for c in s["at_close"]}
    assert at_close["r0"]["status"] == at_close["r1"]["status"] == "complete"
    if mode == "nak":
        assert at_close["r2"]["status"] == "complete"
    else:  # the restarted one's receipt: what it missed while it was down
        assert at_close["r2"]["status"] == "incomplete"
        assert at_close["r2"]["missing_by_reason"] == {
            "missed_before_join": r2["missed_before_join"]}
    print({"sender": {k: s[k] for k in ("rate_msgs", "blocked_s", "credit_stalled_s")},
           "policy": s["policy"], "restarted": {k: r2[k] for k in ("delivered", "lost",
                                                                   "missed_before_join")}})
    for r in (r0, r1):
        assert (r["delivered"], r["dropped"], r["lost"]) == (count, 0, 0)
    assert r2["lost"] == 0 and r2["dropped_unrepaired"] == 0
    assert r2["delivered"] + r2["missed_before_join"] == count
    if mode == "nak":  # late join: the history held all it missed (5 s, 100,000 msgs)
        assert r2["delivered"] == count and r2["repaired"] > 0 and r2["problems"] == []
    else:
        assert r2["missed_before_join"] > 0
    if mode == "ack":
        policy = s["policy"]
        assert (policy["disconnected"], policy["evicted"], policy["joined"]) == (1, 0, 4)
        assert r2["credits_sent"] > 0
