"""The sender's adaptive send-rate limit (seed 001).

Cut by the strongest NAK heard within a window; raised stepwise while no NAK
arrives, along a CUBIC curve (RFC 8312): return quickly toward the rate at
which the last NAK came, then probe above it cautiously. Before the first NAK
the limit probes upward geometrically from ``initial_rate_msgs`` (slow start).
The sender never tracks who the receivers are. No clock: every call takes ``now``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..config import NakConfig
from .curve import cbrt, cubic, probe_rate, room_step


def cut_to(cfg: NakConfig, level: int, base: float, rate: float, *,
           taken: bool = False) -> float:
    """The limit a NAK of ``level`` asks for from ``base``: ``base * cut_factor``, but no
    lower than ``rate_shares`` of a reported ``rate`` (and never above ``base``).
    ``taken``: ``rate`` is what the receiver's consumer took from a backed-up queue (a
    queue NAK's); past the first level the cut goes to that share of it, lower than the
    factor's if need be: the first cut left the sender above what the consumer takes.
    A sender held at 20,000 msgs/s by its application, then bursting into a consumer of
    20,000 with a queue of 2,000, was cut 48,500 -> 43,700 -> 34,000 -> 24,300 through
    50, 75, 87 % while its consumer reported ~20,000, and the queue overflowed (266-406
    dropped, repaired) at 24,300."""
    cut = base * cfg.cut_factors[level]
    share = cfg.rate_shares.get(level)
    if rate > 0 and share is not None:
        floor = rate * share
        cut = min(base, floor if taken and level > cfg.levels[0] else max(cut, floor))
    return max(cut, cfg.min_rate_msgs)


#: A rate a consumer's queue NAK reported (W, ``_w_told``) holds the probe off: a probe
#: from it at once doubled the limit before that queue's next NAK at 50 % came. Where
#: the rate is below TOLD_FAR of what was sent when the episode began, only for TOLD_S
#: without a NAK, s: such a rate was measured while the consumer was short of CPU, not
#: its capacity. On two shared cores, a 1 -> 4 fan-out's receiver said 4,571 msgs/s (a
#: NAK at 87 %) where it took 150,000, and 14,218 in another run; the curve alone took
#: 5.8 s to climb back. Most such rates came from the drain meter, which counted only
#: the looks where the consumer could not run (``rates.DrainMeter``, fixed since). In
#: the core simulator, where a consumer's rate is exact, a probe 0.5 s after any
#: reported rate cost 0.15-0.9 % of the latency sweep's goodput (50-200 ms); a rate
#: near what was sent is the consumer's.
TOLD_S = 0.5
TOLD_FAR = 0.25


#: The limit grows to no more than this many times what was really sent lately
#: (``RateMeter.recent_peak``): a limit the application does not use is not known to be
#: safe, and one that grew unused let a burst through at once (RFC 7661; Linux grows its
#: congestion window only while the window limits the sender). A sender held at 20,000
#: msgs/s by its application for 1 s had a limit of 560,000; its next 20,000 messages
#: went at once into a queue of 2,000 whose consumer took 20,000 msgs/s, and 8,800-9,700
#: of them were dropped (repaired).
USED_GAIN = 2.0
#: ... lately: the complete meter periods that ended this many periods ago at most.
RECENT_PERIODS = 10


class RateMeter:
    """The send rate over fixed periods of ``period_s``: ``on_sent`` counts, ``rate``
    is the last complete period's figure, ``current`` that or the running period's once
    it is a quarter through, ``recent_peak`` the highest of the last RECENT_PERIODS."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._t0: float | None = None
        self._count = 0
        self.rate: float | None = None
        self.peak: float | None = None  # the highest complete period's rate
        self._recent: deque[tuple[float, float]] = deque()  # (ended at, rate)

    def on_sent(self, n: int, *, now: float) -> None:
        if self._t0 is None:
            self._t0 = now
        self._count += n
        span = now - self._t0
        if span >= self.period_s:
            self.rate = rate = self._count / span
            if self.peak is None or rate > self.peak:
                self.peak = rate
            recent = self._recent
            recent.append((now, rate))
            while now - recent[0][0] > RECENT_PERIODS * self.period_s:
                recent.popleft()
            self._t0 = now
            self._count = 0

    def unsend(self, n: int) -> None:
        self._count = max(0, self._count - n)

    def recent_peak(self, now: float) -> float | None:
        """The highest rate sent at over the periods that ended in the last RECENT_PERIODS
        periods, the running one too once it is a period long (an idle spell counts, at
        its rate); None before the first complete period."""
        if self.peak is None:
            return None
        best = 0.0
        horizon = now - RECENT_PERIODS * self.period_s
        for ended, rate in self._recent:
            if ended >= horizon and rate > best:
                best = rate
        t0 = self._t0
        if t0 is not None and now - t0 >= self.period_s:
            best = max(best, self._count / (now - t0))
        return best

    def current(self, now: float) -> float | None:
        if self.rate is not None:
            return self.rate
        t0 = self._t0
        if t0 is not None and now - t0 >= self.period_s / 4:
            return self._count / (now - t0)
        return None


class NakRateController:
    """Adaptive send-rate limit in msgs/s, driven by NAK levels.

    * ``on_nak(level, now=)`` — the first NAK of a window cuts at once, relative to
      the rate actually reached (the lower of the limit and the measured send
      rate). A stronger NAK later in the same window deepens the cut to that
      level's factor, relative to the same base; weaker or equal NAKs change
      nothing. After a cut, NAKs no stronger than it only block increases for
      ``hold_s``: a queue takes time to drain, and repeats of the same level
      during that time are not news: the backlog the cut was meant for is still
      draining through socket buffers and the queue, so re-cutting every window
      would compound into a collapse.
    * Before the first NAK (slow start) the limit grows by ``ramp_factor`` every
      ``step_s`` from ``initial_rate_msgs``.
    * While no NAK arrives for ``quiet_s``, the limit rises in steps of
      ``step_s`` along ``W + c*W*(t-K)^3``, W being the rate at the last cut.
    * While none arrives for ``probe_after_s``, it also grows by ``probe_factor`` a
      step from where it stood then (the higher of the two counts): freed capacity is
      found in a few steps rather than after CUBIC's plateau. Not past a rate a
      consumer's queue NAK reported (W then is what it takes), and by ``probe_step``
      at most a growth.
    * ``on_sent(n, now=)`` feeds the send-rate meter.
    """

    def __init__(self, config: NakConfig | None = None) -> None:
        self.config = cfg = config if config is not None else NakConfig()
        self._levels_desc = sorted(cfg.levels, reverse=True)
        #: after a drain, the limit resumes at this share of a reported plateau (the
        #: lowest level's rate share: what a receiver just past that level is cut to)
        self._resume_share = cfg.rate_shares.get(self._levels_desc[-1], 0.0)
        start = cfg.start_rate_msgs
        self._w = start  # rate at which the last cut came
        self._resume = False  # W is a path's reported rate: resume near it once quiet
        #: W is what a consumer takes, its queue's NAK said so: the probe waits TOLD_S
        #: before it grows past it (a probe from there at once doubled the limit before
        #: its queue's NAK at 50 % came, and NAK levels' cuts from twice its rate
        #: overflowed it: 1,034 of 40,000 dropped, against 50-182)
        self._w_told = False
        self._told_far = False  # ... and far below what was sent: the probe waits TOLD_S
        self._r0 = start  # rate right after the last cut (the curve's origin)
        self._k = 0.0  # CUBIC K: time from origin to W, s
        self._quiet_from: float | None = None  # last NAK (or first use), s
        self._slow_start = start < cfg.max_rate_msgs
        self._window_start = -math.inf
        self._window_base = start
        self._window_level = 0
        self._cut_level = 0
        self._cut_fill: float | None = None
        self._cut_source: str | None = None  # the receiver whose NAK made the last cut
        self._episode = False  # between a cut and the next increase
        self._episode_base = start
        self._episode_level = 0
        self._hold_until = -math.inf
        self._last_now = -math.inf
        # cached step evaluation: the rate only changes at step ticks
        self._rate = start
        self._next_tick = math.inf if start >= cfg.max_rate_msgs else -math.inf
        self._meter = RateMeter(cfg.window_s)
        self.rtt_s: float | None = None  # the group's round-trip time, once measured
        #: the smallest queue's room the receivers reported (the start's PROGRESS), msgs:
        #: what bounds the probe's growth (None: not known, no probe)
        self.probe_room: float | None = None
        # metrics
        self.naks_received: dict[int, int] = {}
        self.cuts = 0
        self.holds = 0
        self.ignored = 0
        self.unused_holds = 0  # growths held back: the limit stood unused (``_used``)

    # -- queries -------------------------------------------------------------
    def rate(self, *, now: float) -> float:
        """The current limit, msgs/s."""
        if now < self._next_tick:
            return self._rate
        if self._quiet_from is None:  # initial_rate below max: ramp from first use
            self._anchor(now)
        self._evaluate(now)
        return self._rate

    def next_deadline(self) -> float | None:
        """When the limit next steps up (None: at max_rate, nothing pending)."""
        if self._quiet_from is None or math.isinf(self._next_tick):
            return None
        return self._next_tick

    def set_rtt(self, rtt_s: float) -> None:
        """The group's round-trip time (the largest measured), s. The probe waits for
        ``probe_rtts`` of it without a NAK, and then grows at most once per RTT."""
        self.rtt_s = max(0.0, rtt_s)

    def set_probe_room(self, msgs: float) -> None:
        """The smallest queue room a receiver reported, msgs (the start's PROGRESS): the
        probe grows the limit by no more than ``probe_step`` of it at once."""
        self.probe_room = max(0.0, msgs)

    def measured_rate(self) -> float | None:
        """Send rate over the last complete meter period, msgs/s (None before one)."""
        return self._meter.rate

    def send_rate(self, *, now: float) -> float | None:
        """What was sent over the last meter period (or the running one), msgs/s."""
        return self._meter.current(now)

    @property
    def sent_peak(self) -> float | None:
        """The highest rate really sent at over a meter period (None before one)."""
        return self._meter.peak

    def validated_rate(self, *, now: float) -> float | None:
        """The limit, but no higher than the highest rate really sent at over a meter
        period (a limit never used is not known to be safe); None before one period."""
        peak = self._meter.peak
        return None if peak is None else min(self.rate(now=now), peak)

    # -- events --------------------------------------------------------------
    def on_sent(self, n: int, *, now: float) -> None:
        """Count ``n`` messages sent at ``now`` (feeds the measured send rate)."""
        self._meter.on_sent(n, now=now)

    def unsend(self, n: int) -> None:
        """Take back ``n`` messages counted by ``on_sent`` but never sent."""
        self._meter.unsend(n)

    def count_nak(self, level: int) -> int | None:
        """Count a NAK of ``level`` as received (``naks_received``, by the level it counts
        as); None (and counted as ignored): below every level."""
        factor_level = next((lv for lv in self._levels_desc if level >= lv), None)
        if factor_level is None:
            self.ignored += 1
        else:
            self.naks_received[factor_level] = self.naks_received.get(factor_level, 0) + 1
        return factor_level

    def on_nak(self, level: int, *, now: float, fill: float | None = None,
               rate: float = 0.0, source: str | None = None, path: bool = False,
               taken: bool = False) -> bool:
        """Apply a NAK of ``level`` percent heard at ``now``. True if it cut the limit.

        ``fill`` (the exact percent the NAK reports) lets a repeat tell a draining
        queue from a growing one: after the hold, a NAK no stronger than the last
        cut cuts again only if its fill is at least the fill that caused that cut.
        ``rate`` (what the receiver reports it can take, msgs/s; 0: not said) bounds the
        cut from below at ``rate_shares[level]`` of it, and the curve's plateau W from
        above: the limit settles just under the receiver's capacity. ``source`` (the
        receiver that sent it, if known): only the receiver of the last cut moves the
        plateau with a NAK that holds the limit. ``path``: the NAK is about the path
        (queueing delay, loss, silence), whose quiet afterwards means its queue drained,
        so the limit may resume just under a reported rate at once. ``taken``: ``rate``
        is what the receiver's consumer took from its backed-up queue (``cut_to``).
        """
        now = max(now, self._last_now)
        self._last_now = now
        factor_level = self.count_nak(level)
        if factor_level is None:
            return False
        current = self.rate(now=now)
        cfg = self.config
        in_window = now < self._window_start + cfg.window_s
        if in_window:
            if cut_to(cfg, factor_level, self._window_base, rate, taken=taken) >= current:
                return self._hold(now, current, rate, source, path)  # no deeper than the cut
            # a stronger NAK in the same window: deepen the cut, same base
            self._cut(max(factor_level, self._window_level), self._window_base, now, rate,
                      path, fill, source, taken)
            return True
        if factor_level <= self._cut_level and (
                now < self._hold_until
                or (self._episode and fill is not None and self._cut_fill is not None
                    and fill < self._cut_fill)):
            return self._hold(now, current, rate, source, path)  # held, or draining
        base = current
        measured = self._meter.current(now)
        if measured is not None and measured < base:
            base = measured
        share = cfg.rate_shares.get(factor_level)
        takes_more = rate > 0 and share is not None and rate * share >= base
        base = max(base, cfg.min_rate_msgs)
        target = cut_to(cfg, factor_level, base, rate, taken=taken)
        if target >= current or takes_more:
            # the receiver takes more than is sent now (the floor of its reported rate):
            # a queue that is still draining, not news; cutting "to the base" would only
            # shave the meter's error off the limit each time (a slow spiral). Compared
            # before the floor: less than min_rate_msgs sent is no sign that the receiver
            # takes more (a target and a base both at the floor looked like it: the limit
            # held at 5,000 msgs/s under a forged NAK(100), rate 1, that ended the start
            # before much was sent, and later at 2,000 with 1,137 NAKs and no cut).
            return self._hold(now, current, rate, source, path)
        self._window_start = now
        self._window_base = base
        self._cut(factor_level, base, now, rate, path, fill, source, taken)
        return True

    def restore(self, rate: float, *, now: float) -> None:
        """Back to ``rate`` (the limit before cuts now known to have been for nothing: a
        receiver whose consumer paused), if it is above the limit now; the episode ends."""
        cfg = self.config
        rate = min(max(rate, cfg.min_rate_msgs), cfg.max_rate_msgs)
        if rate > self.rate(now=now):
            self._episode = False
            self._hold_until = -math.inf
            self._w = rate
            self._w_told = False
            self._set_origin(rate, now)

    def begin(self, rate: float, plateau: float, *, now: float, ramp: bool) -> None:
        """Take over from a start (``policy.startup``) at ``rate``: ramping on from it
        (``ramp``: nothing limited the sender yet), or along the curve toward ``plateau``
        (the delivery rate the start measured)."""
        cfg = self.config
        lo, hi = cfg.min_rate_msgs, cfg.max_rate_msgs
        rate = min(max(rate, lo), hi)
        self._w = min(max(plateau, rate), hi)
        self._w_told = False  # what the start measured: a sender on shared cores too
        self._slow_start = ramp and rate < hi
        self._rate = rate
        self._last_now = max(self._last_now, now)
        if self._slow_start:
            self._set_origin(rate, now - cfg.quiet_s + self.ramp_step_s())
        else:
            self._set_origin(rate, now)

    # -- internals -----------------------------------------------------------
    def _cut(self, level: int, base: float, now: float, rate: float, path: bool,
             fill: float | None, source: str | None, taken: bool = False) -> None:
        cfg = self.config
        self.cuts += 1
        self._cut_fill, self._cut_source = fill, source
        self._slow_start = False
        self._window_level = level
        self._cut_level = level
        self._hold_until = now + (cfg.top_hold_s if level == self._levels_desc[0] else cfg.hold_s)
        if not self._episode:
            self._episode = True
            self._episode_base = base
            self._episode_level = level
        self._episode_level = max(self._episode_level, level)
        # W, where the curve flattens, is set by the episode: the rate where it began,
        # lowered by how strong it got (a NAK(100) means the rate was far above what
        # the receiver takes; a NAK(50) that it was barely above): halfway to the cut
        # the strongest level asks for, like CUBIC's fast convergence (RFC 8312 4.6).
        # Repeats within the episode do not drag W down with them.
        deepest = cfg.cut_factors[self._episode_level]
        w = self._episode_base * (1.0 + deepest) / 2.0
        self._resume = rate > 0 and path
        self._w_told = rate > 0 and not path
        self._told_far = self._w_told and rate < TOLD_FAR * self._episode_base
        if rate > 0:  # the receiver said what it takes: the plateau is there (a rate
            w = rate  # below it returns to it: at once after the path's drain, see
            # _evaluate, along the curve after a queue's)
        new_rate = cut_to(cfg, level, base, rate, taken=taken)
        self._w = min(max(w, new_rate, cfg.min_rate_msgs), cfg.max_rate_msgs)
        self._set_origin(min(new_rate, self._w), now)

    def _hold(self, now: float, current: float, rate: float, source: str | None,
              path: bool) -> bool:
        """A NAK that only keeps the limit where it is. A rate that the receiver of the
        last cut reports is the plateau from now on: while its backlog drains, its later
        reports (a path that delivers its full rate again after a stall, a consumer
        measured longer) are better than the one at the cut. Another receiver's rate says
        nothing of what this one takes (a fast one's would lift the plateau above it)."""
        self.holds += 1
        if rate > 0 and source == self._cut_source:
            cfg = self.config
            self._w = min(max(rate, cfg.min_rate_msgs), cfg.max_rate_msgs)
            self._resume = path
            self._w_told = not path
            self._told_far = not path and rate < TOLD_FAR * self._episode_base
        self._set_origin(current, now)  # no increase for now
        return False

    def ramp_step_s(self) -> float:
        """How often slow start grows the limit, s: ``step_s``, or ``ramp_rtts`` round
        trips once the RTT is known, if shorter (at least ``ramp_min_step_s``). A NAK
        can come back within a round trip, so on a short path slow start need not wait
        a whole step_s per growth."""
        cfg = self.config
        if cfg.ramp_rtts is None or self.rtt_s is None:
            return cfg.step_s
        return min(cfg.step_s, max(cfg.ramp_min_step_s, cfg.ramp_rtts * self.rtt_s))

    def _anchor(self, now: float) -> None:
        if self._slow_start:  # the ramp needs no quiet gap: first step one step from now
            cfg = self.config
            self._set_origin(self._rate, now - cfg.quiet_s + self.ramp_step_s())
        else:
            self._set_origin(self._rate, now)

    def _set_origin(self, rate: float, now: float) -> None:
        cfg = self.config
        self._r0 = self._rate = rate
        self._quiet_from = now
        self._k = cbrt((self._w - rate) / (cfg.cubic_c * self._w))
        self._next_tick = now + cfg.quiet_s if rate < cfg.max_rate_msgs else math.inf

    def _ramp(self, now: float) -> None:
        """Slow start: ``ramp_factor`` per step due by ``now``, the step as long as
        ``ramp_step_s`` says at each step (it shortens once the RTT is known). Once the
        RTT and the receivers' room are known (a ramp on from a start), a step grows the
        limit by ``room_step`` at most, the probe's bound with a growth every step (a ramp
        does not wait a round trip): on a long path over queues that hold less than a
        round trip, x1.25 a step past their consumers overflowed them before the NAK came
        back (simulated, 50 ms, queues of 2,000: 5,110 dropped)."""
        cfg = self.config
        rate, tick, step, n = self._rate, self._next_tick, self.ramp_step_s(), 0
        most = math.inf
        if self.rtt_s is not None and self.probe_room is not None:
            most = room_step(cfg, self.rtt_s, step, self.probe_room)
        while now >= tick - 1e-9 and rate < cfg.max_rate_msgs and n < 10_000:
            rate = min(rate * cfg.ramp_factor, rate + most)
            tick += step
            n += 1
        self._episode = False
        self._rate = self._used(min(rate, cfg.max_rate_msgs), now)
        self._next_tick = math.inf if self._rate >= cfg.max_rate_msgs else tick

    def _used(self, rate: float, now: float) -> float:
        """``rate``, the limit grown to, but no higher than USED_GAIN times the most that
        was sent lately, unless the limit already stood higher (an unused limit does not
        grow; it does not fall either). Counted in ``unused_holds``."""
        peak = self._meter.recent_peak(now)
        if peak is None:
            return rate
        most = max(USED_GAIN * peak, self._rate, self.config.min_rate_msgs)
        if rate > most:
            self.unused_holds += 1
            return most
        return rate

    def _evaluate(self, now: float) -> None:
        cfg = self.config
        assert self._quiet_from is not None
        if self._slow_start:
            self._ramp(now)
            return
        elapsed = now - self._quiet_from - cfg.quiet_s + 1e-9  # a tick is a tick
        if elapsed < 0:
            return
        steps = math.floor(elapsed / cfg.step_s) + 1
        self._episode = False  # quiet long enough: the next NAK begins a new episode
        if self._resume and (resume := self._resume_share * self._w) > self._r0:
            # the path's queue drained (no NAK for quiet_s) and it carries W: resume just
            # under W at once, the curve's plateau near, rather than climb from the
            # drain's rate (the lab's bottleneck receiver got 440-500 of its link's 950
            # msgs/s for 2.5 s after each drain). Not after a queue's NAKs: quiet there
            # only means the queue is below its first level, and a consumer back from a
            # pause needs the curve's spare rate to catch up within the history
            # (simulated gc-pauses, 10 receivers: 490 beyond history with the resume)
            self._r0 = resume
            self._k = cbrt((self._w - resume) / (cfg.cubic_c * self._w))
        rate = cubic(cfg, self._w, self._k, steps)
        after = 0.0 if not self._w_told else TOLD_S if self._told_far else None
        probe = None if after is None else probe_rate(cfg, self.rtt_s, steps, self._w,
                                                      self._k, self._r0, self.probe_room,
                                                      after)
        if probe is not None:
            rate = max(rate, probe)
        rate = min(max(rate, self._r0, cfg.min_rate_msgs), cfg.max_rate_msgs)
        self._rate = rate = self._used(rate, now)
        if rate >= cfg.max_rate_msgs:
            self._next_tick = math.inf
        else:
            self._next_tick = self._quiet_from + cfg.quiet_s + steps * cfg.step_s

    def snapshot(self) -> dict[str, Any]:
        """Metrics and state, JSON-ready."""
        return {
            "rate_limit": self._rate,
            "last_cut_base": self._w,
            "measured_rate": self._meter.rate,
            "naks_received": {str(k): v for k, v in sorted(self.naks_received.items())},
            "cuts": self.cuts,
            "holds": self.holds,
            "naks_ignored": self.ignored,
            "unused_holds": self.unused_holds,
        }


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
