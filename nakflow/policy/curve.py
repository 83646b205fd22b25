"""How the NAK sender's limit grows between NAKs (``policy.rate``): CUBIC's curve
(RFC 8312) back toward the rate where the last NAK came and past it, and the probe that
looks for freed capacity sooner, each growth bounded by the room the receivers reported.
Pure functions of the configuration; no clock, no state.
"""

from __future__ import annotations

import math

from ..config import NakConfig
from .fill import holdoff_s

__all__ = ["PROBE_ROOM_SHARE", "cbrt", "cubic", "probe_rate", "probe_step",
           "recovery_bound_s", "room_step"]


def cbrt(x: float) -> float:
    return math.copysign(abs(x) ** (1.0 / 3.0), x)


def recovery_bound_s(cfg: NakConfig) -> float:
    """Upper bound on the time from a NAK back to max_rate under ``cfg``, s: the CUBIC
    curve from min_rate, or slow start from start_rate, whichever is longer."""
    w = cfg.min_rate_msgs
    k_max = cbrt(1.0 / cfg.cubic_c)
    rise = cbrt((cfg.max_rate_msgs / w - 1.0) / cfg.cubic_c)
    cubic = cfg.quiet_s + k_max + rise + cfg.step_s
    ramp_steps = math.ceil(math.log(cfg.max_rate_msgs / cfg.start_rate_msgs)
                           / math.log(cfg.ramp_factor)) + 1
    return max(cubic, cfg.quiet_s + ramp_steps * cfg.step_s)


#: A probe's growth is at most what this share of the smallest room the receivers
#: reported in the start (``room``: 40 % of a queue, ``receiver_core.ROOM_SHARE``)
#: takes in while a NAK comes back: what the probe adds to the rate while a receiver's
#: NAK (sent at 50 % of its queue) is on its way fills a fifth of that queue at most.
#: What it added before the queue reached 50 % is not bounded so: a probe from a
#: consumer's own rate overflowed its queue (``_w_told``: it no longer probes there).
PROBE_ROOM_SHARE = 0.5


def probe_step(cfg: NakConfig, rtt_s: float, per: int, room: float) -> float:
    """The most a probe grows the limit by at once, msgs/s: ``PROBE_ROOM_SHARE`` of
    ``room`` (msgs) over the time a NAK takes to act (``react``: a round trip and the
    receiver's hold-off; a queue NAKs as soon as it reaches a level, ``FillMonitor``),
    divided among the growths that time holds too (``per`` steps apart). On loopback
    (queues of 10,000: room 4,000) 163,000 msgs/s a step at 0.2 ms, 48,000 at 17 ms;
    over 50 ms to queues of 2,000 (room 800) 3,000 a step, where ``probe_factor`` alone
    grew a 20,000 msgs/s limit by 5,000 and overflowed them (simulated, 12x the drops).
    Until 2026-11-28 ``react`` held the NAK window too (50 ms): 10,000-15,000 msgs/s a
    step on loopback, and a start that measured 170,000 msgs/s on two shared cores took
    0.5 s to probe up to the 300,000 its receivers took."""
    return room_step(cfg, rtt_s, per * cfg.step_s, room)


def room_step(cfg: NakConfig, rtt_s: float, grow_s: float, room: float) -> float:
    """The most a growth every ``grow_s`` may add, msgs/s: PROBE_ROOM_SHARE of ``room``
    over the time a NAK takes to act, divided among the growths in that time."""
    react = rtt_s + holdoff_s(cfg, rtt_s)
    return PROBE_ROOM_SHARE * max(room, 1.0) / (react * (1.0 + react / grow_s))


def probe_rate(cfg: NakConfig, rtt_s: float | None, steps: int, w: float, k: float,
               r0: float, room: float | None, after_s: float = 0.0) -> float | None:
    """The probe's rate ``steps`` steps into a quiet spell (None: not probing) on the
    curve of plateau ``w``, K ``k`` and origin ``r0``. It starts once no NAK came for
    probe_after_s, probe_rtts RTTs and ``after_s``, and grows by probe_factor once per
    step or per RTT, whichever is longer (an overshoot shows within an RTT), by
    ``probe_step`` at most each time. Needs the RTT and ``room`` (the smallest queue's
    room the receivers reported in the start, msgs): without either it does not probe."""
    if cfg.probe_after_s is None or rtt_s is None or room is None:
        return None
    wait = max(cfg.probe_after_s, cfg.probe_rtts * rtt_s, after_s) - cfg.quiet_s
    probe_from = max(0, math.ceil(wait / cfg.step_s - 1e-9))
    if steps <= probe_from:
        return None
    per = max(1, math.ceil(rtt_s / cfg.step_s - 1e-9))  # steps per growth
    base = max(cubic(cfg, w, k, probe_from), r0)
    n = min((steps - probe_from + per - 1) // per, 10_000)  # growths so far
    f = cfg.probe_factor
    most = probe_step(cfg, rtt_s, per, room)
    # geometric while a growth, base * f^i * (f - 1), is below ``most``; then by ``most``
    top = most / (f - 1.0) if f > 1.0 else math.inf
    geo = 0 if base >= top else min(n, int(math.log(top / base) / math.log(f)) + 1)
    return float(base * f ** geo + (n - geo) * most)


def cubic(cfg: NakConfig, w: float, k: float, steps: int) -> float:
    """CUBIC's curve ``steps`` steps into a quiet spell: W + c*W*(t-K)^3."""
    t = steps * cfg.step_s
    return w + cfg.cubic_c * w * (t - k) ** 3


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
