"""Issue 3, scenario 3: real IP multicast (epgm) in a private network namespace.

One sender and two receiver processes on the same two multicast groups (data and
feedback), NAK mode, one receiver slow: nothing may be lost or dropped. The test
re-runs itself inside ``unshare -n`` (see tests/netns.py); multicast never leaves it.
"""

from __future__ import annotations

import os
import sys

import pytest

from nakflow._local import ReceiverSpec, run_mode
from tests.netns import run_in_netns

IN_NETNS = os.environ.get("NAKFLOW_IN_NETNS") == "1"
COUNT = 20_000
pytestmark = [pytest.mark.multicast, pytest.mark.slow]


@pytest.mark.skipif(not IN_NETNS, reason="runs inside a private netns (see test below)")
def test_nak_over_epgm_one_slow_receiver_zero_loss() -> None:
    specs = [ReceiverSpec("slow", consume_rate_msgs=5_000, capacity_msgs=2_000),
             ReceiverSpec("fast", capacity_msgs=2_000)]
    run = run_mode("nak", specs, count=COUNT, data_uri="epgm://127.0.0.1;239.192.30.1:7101",
                   feedback_uri="epgm://127.0.0.1;239.192.30.2:7102")
    print({r["receiver_id"]: {k: r[k] for k in ("delivered", "dropped", "lost", "queue_peak",
                                                 "naks_sent")} for r in run["receivers"]},
          {k: run["sender"][k] for k in ("rate_msgs", "cuts", "naks_received")})
    for r in run["receivers"]:
        assert (r["delivered"], r["dropped"], r["lost"]) == (COUNT, 0, 0), r["receiver_id"]
    slow = next(r for r in run["receivers"] if r["receiver_id"] == "slow")
    assert sum(slow["naks_sent"].values()) > 0 and run["sender"]["cuts"] > 0


@pytest.mark.skipif(IN_NETNS, reason="already inside the namespace")
def test_multicast_scenario_in_private_netns(require_multicast: None) -> None:
    argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__,
            "-k", "epgm_one_slow"]
    proc = run_in_netns(argv, timeout_s=300, env={"NAKFLOW_IN_NETNS": "1"})
    out = proc.stdout + proc.stderr
    print(out[-1500:])
    assert proc.returncode == 0, out[-4000:]
    assert "1 passed" in out, out[-2000:]
