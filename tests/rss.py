"""Resident set size of live processes, read from /proc (Linux)."""

from __future__ import annotations

import statistics
import threading
import time


def rss_kib(pid: int) -> int | None:
    """VmRSS of ``pid`` in KiB; None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class RssSampler:
    """Samples the RSS of some processes every ``interval_s`` in a thread, until stopped."""

    def __init__(self, pids: dict[str, int], interval_s: float = 1.0) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self.t0 = time.monotonic()
        self.samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            for name, pid in self.pids.items():
                kib = rss_kib(pid)
                if kib is not None:
                    self.samples[name].append((t, kib))
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def median_between(self, name: str, t_from: float, t_to: float) -> float:
        values = [kib for t, kib in self.samples[name] if t_from <= t <= t_to]
        if not values:
            raise ValueError(f"no RSS samples of {name} between {t_from} and {t_to} s")
        return statistics.median(values)

    def last(self, name: str, n: int) -> list[int]:
        return [kib for _, kib in self.samples[name][-n:]]
