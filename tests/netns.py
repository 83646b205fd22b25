"""Run a command inside a private network namespace with multicast on loopback.

Multicast test traffic never touches the host's interfaces: the namespace has
only its own ``lo``, with multicast enabled and 224.0.0.0/4 routed to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import zmq

SETUP = "ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo && exec \"$@\""


def multicast_unavailable() -> str | None:
    """Why epgm tests cannot run here, or None if they can."""
    if not zmq.has("pgm"):
        return "pyzmq has no OpenPGM (zmq.has('pgm') is False): run scripts/setup.sh as root"
    if os.geteuid() != 0:
        return "private network namespaces need root"
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "unshare or ip (iproute2) not installed"
    probe = subprocess.run(["unshare", "-n", "sh", "-c", SETUP, "sh", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    return None


def run_in_netns(argv: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None,
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-n", "sh", "-c", SETUP, "sh", *argv],
                          capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})
