"""The receiver's NAK emitter: watches queue fill, speaks only under overload."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from ..config import NakConfig
from ..errors import ConfigError
from ..wire import SenderKey

#: Shape of the truncated-exponential hold-off: a handful of receivers speak first,
#: most draw late and hear them (good for N up to about e**10).
BACKOFF_LAMBDA = 10.0
_BACKOFF_SPAN = math.expm1(BACKOFF_LAMBDA)
#: The RTT-scaled hold-off stays below this many windows (a NAK due must still be sent
#: before the level is due again).
MAX_BACKOFF_WINDOWS = 0.9


class Uniform(Protocol):
    """An injected source of uniform draws in [0, 1) (random.Random, numpy Generator)."""

    def random(self) -> float: ...


def holdoff_s(cfg: NakConfig, rtt_s: float) -> float:
    """The most a due NAK waits before it goes (the FillMonitor's hold-off), s:
    ``backoff_s``, stretched to ``backoff_rtts`` x ``rtt_s``, short of ``window_s``."""
    if cfg.backoff_s <= 0:
        return 0.0
    return min(max(cfg.backoff_s, cfg.backoff_rtts * rtt_s), MAX_BACKOFF_WINDOWS * cfg.window_s)


def backoff_delay(u: float, backoff_s: float) -> float:
    """The hold-off for a uniform draw ``u``: inverse CDF of the truncated exponential."""
    return backoff_s / BACKOFF_LAMBDA * math.log1p(u * _BACKOFF_SPAN)


class FillMonitor:
    """Decides which NAK a receiver emits, if any.

    * Silent while the fill is below the lowest level: no overload, no feedback.
    * Emits when the fill first reaches a level (a rise is news: at once).
    * While the fill stays at or above a level, repeats the highest level held at
      most once per ``window_s`` (repeats make a lost NAK harmless).
    * Hysteresis: a level, once reached, is held until the fill drops
      ``hysteresis_pct`` points below it, so the fill cannot flap around a mark
      (seeds 002 and 004).
    * Suppression: NAKs are multicast, so every receiver hears the others'. A
      NAK due while one of equal or higher level was heard within the last
      window is not sent — the sender would ignore it anyway.
    * Hold-off (with an ``rng``): a due NAK first waits a random delay in
      [0, ``backoff_s``) drawn from a truncated exponential, so that when N
      receivers overload together a few speak and the rest overhear them
      (SRM-style timers, Nonnenmacher & Biersack). Feedback volume then stays
      roughly flat as receivers are added. ``next_deadline`` reports the timer.
    * RTT (``set_rtt``, the group RTT senders advertise in DATA): a NAK acts one RTT
      after the fill that caused it, so the monitor decides on the fill it expects one
      ``predict_rtts`` x RTT ahead (fill + its growth rate, smoothed over ``window_s``,
      x that time; never the top level, which stays for a queue really full), and the
      hold-off stretches to ``backoff_rtts`` x RTT (NORM scales its timers by GRTT),
      short of ``window_s``.
    """

    def __init__(self, capacity_msgs: int, config: NakConfig | None = None, *,
                 rng: Uniform | None = None) -> None:
        if capacity_msgs < 1:
            raise ConfigError("capacity_msgs must be >= 1")
        self.capacity_msgs = capacity_msgs
        self.config = cfg = config if config is not None else NakConfig()
        self._levels_desc = sorted(cfg.levels, reverse=True)
        self._held: int | None = None
        self._last_level: int | None = None
        self._last_t = 0.0
        self._heard_level = -1
        self._heard_t = 0.0
        self.naks_sent: dict[int, int] = {}
        self.suppressed = 0
        self._rng = rng if cfg.backoff_s > 0 else None
        self._pending_at: float | None = None
        self._pending_level = 0
        self._pending_from = (0.0, 0.0)  # (now, fill) when the pending NAK fell due
        self.hurried = 0  # NAKs sent before their hold-off ended (the queue would fill)
        self.rtt_s = 0.0
        self._backoff_s = cfg.backoff_s
        self._slope = 0.0  # fill growth, percent per s, smoothed
        self._prev: tuple[float, float] | None = None  # (now, fill) of the last update
        self.predicted = 0  # NAKs whose level only the prediction reached

    def set_rtt(self, rtt_s: float) -> None:
        """The group RTT is ``rtt_s`` (0: unknown): predict fill that far ahead, and
        stretch the hold-off with it."""
        cfg = self.config
        self.rtt_s = max(0.0, rtt_s)
        self._backoff_s = holdoff_s(cfg, self.rtt_s)

    @property
    def held_level(self) -> int | None:
        """The level currently held (None: below the lowest level)."""
        return self._held

    def fill_pct(self, depth: int) -> float:
        return 100.0 * depth / self.capacity_msgs

    def update(self, depth: int, *, now: float) -> int | None:
        """Queue holds ``depth`` messages at ``now``: return the NAK level to send, or None."""
        fill = self.fill_pct(depth)
        ahead = fill
        if self.config.predict_rtts > 0:
            ahead = self._ahead(fill, now)
        unpredicted = self._held_at(fill) if ahead != fill else None
        held = self._held_at(ahead)
        self._held = held
        if held is None:
            self._last_level = None
            self._pending_at = None
            return None
        last = self._last_level
        if last is not None and held <= last and now - self._last_t < self.config.window_s:
            return None
        if self._rng is not None:
            if self._pending_at is None or held > self._pending_level:
                self._pending_at = now + backoff_delay(self._rng.random(), self._backoff_s)
                self._pending_level = held
                self._pending_from = (now, fill)
            if now < self._pending_at:
                if not self._fills_before(fill, now, self._pending_at):
                    return None
                self.hurried += 1
            self._pending_at = None
        self._last_level = held
        self._last_t = now
        if self._heard_level >= held and now - self._heard_t < self.config.window_s:
            self.suppressed += 1
            return None
        self.naks_sent[held] = self.naks_sent.get(held, 0) + 1
        if ahead != fill and held > (unpredicted or 0):
            self.predicted += 1  # only the prediction reached this level
        return held

    def kept_back(self, level: int) -> None:
        """The NAK of ``level`` that ``update`` returned was not sent after all (the
        receiver is catching up, or its consumer paused and said so): not counted sent."""
        n = self.naks_sent.get(level, 0) - 1
        if n > 0:
            self.naks_sent[level] = n
        else:
            self.naks_sent.pop(level, None)

    def _fills_before(self, fill: float, now: float, until: float) -> bool:
        """At the growth since the pending NAK fell due, does the queue reach the top
        level after a NAK sent now could still act (one RTT) but before one sent at
        ``until`` could? Then the hold-off (there for suppression) is not worth waiting
        out (batched slow start on loopback filled the queue from 50 to 100 % within the
        10 ms hold-off, and only NAK(100) ever went out). When even a NAK sent now comes
        too late (a long RTT), hurrying only adds a weaker cut: the NAK waits."""
        t0, f0 = self._pending_from
        if now <= t0 or fill <= f0:
            return False
        full_at = now + (self._levels_desc[0] - fill) * (now - t0) / (fill - f0)
        return now + self.rtt_s < full_at <= until + self.rtt_s

    def on_heard(self, level: int, *, now: float) -> None:
        """Another receiver's NAK of ``level`` for this stream was overheard at ``now``."""
        if level >= self._heard_level or now - self._heard_t >= self.config.window_s:
            self._heard_level = level
            self._heard_t = now

    def next_deadline(self) -> float | None:
        """When a held level is next due for repeat (None: nothing held)."""
        if self._held is None:
            return None
        if self._pending_at is not None:
            return self._pending_at
        return self._last_t + self.config.window_s

    def _ahead(self, fill: float, now: float) -> float:
        """The fill expected ``predict_rtts`` RTTs from now, below the top level."""
        prev = self._prev
        self._prev = (now, fill)
        if prev is None or now <= prev[0]:
            return fill
        dt = now - prev[0]
        a = -math.expm1(-dt / self.config.window_s)
        self._slope += a * ((fill - prev[1]) / dt - self._slope)
        if self.rtt_s <= 0 or self._slope <= 0:
            return fill
        top = self._levels_desc[0]
        return max(fill, min(fill + self._slope * self.config.predict_rtts * self.rtt_s,
                             top - 1e-9))

    def _held_at(self, fill: float) -> int | None:
        held = self._held
        hyst = self.config.hysteresis_pct
        for level in self._levels_desc:
            if fill >= level:
                return level
            if held is not None and level <= held and fill >= level - hyst:
                return level
        return None

    def snapshot(self) -> dict[str, Any]:
        return {
            "held_level": self._held,
            "naks_sent": {str(k): v for k, v in sorted(self.naks_sent.items())},
            "naks_suppressed": self.suppressed,
            "naks_predicted": self.predicted,
            "naks_hurried": self.hurried,
            "grtt_ms": round(self.rtt_s * 1000, 3),
        }


class LossMonitor:
    """Loss in flight as a fill: the share of messages found missing among those that
    arrived or went missing, mapped by ``loss_fill`` (see NakConfig). A share is judged
    over a span of at least ``window_s`` that saw at least ``min_frames`` frames (arrived,
    plus gaps) and ``min_msgs`` messages; a short span carries on into the next. The
    fill holds for ``window_s`` after it was judged. Counters come in cumulative; time
    as ``now``.

    Why frames: loss comes by the frame, and a frame carries up to hundreds of messages,
    so a handful of frames is no evidence. The worst of N receivers' random loss is what
    the sender hears: over 100 frames, 1 % random loss reaches a 10 % share once in 1.3e7
    spans (once in about two minutes among 10,000 receivers at 1,000 frames/s; 2 % loss:
    3 times a second), over 16 frames once in 91 (all the time among 300 receivers: the
    rate collapsed, simulated).
    """

    def __init__(self, loss_fill: Sequence[tuple[float, float]], window_s: float,
                 min_msgs: int, min_frames: int = 1) -> None:
        self.loss_fill, self.window_s = tuple(loss_fill), window_s
        self.min_msgs, self.min_frames = min_msgs, min_frames
        self._start: tuple[float, int, int, int, int] | None = None
        self.fill = 0.0
        self._fill_until = -math.inf
        self.windows = 0  # spans whose loss counted as a fill

    def observe(self, gaps: int, arrived: int, *, now: float, gap_events: int = 0,
                frames: int = 0) -> float:
        """The fill that the loss of the last judged span stands for (0: none).
        ``gaps``/``arrived``: messages; ``gap_events``/``frames``: gaps and DATA frames."""
        if not self.loss_fill:
            return 0.0
        if self._start is None:
            self._start = (now, gaps, arrived, gap_events, frames)
            return 0.0
        t0, g0, a0, e0, f0 = self._start
        lost, total = gaps - g0, gaps - g0 + arrived - a0
        if (now - t0 >= self.window_s and total >= self.min_msgs
                and gap_events - e0 + frames - f0 >= self.min_frames):
            share = lost / total
            self.fill = next((fill for at, fill in self.loss_fill if share >= at), 0.0)
            self._fill_until = now + self.window_s
            self.windows += self.fill > 0
            self._start = (now, gaps, arrived, gap_events, frames)
        elif now - t0 >= 10 * self.window_s and total < self.min_msgs:
            self._start = (now, gaps, arrived, gap_events, frames)  # a trickle: start over
        if now >= self._fill_until:
            self.fill = 0.0
        return self.fill


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """The fill ``x`` stands for on the piecewise-linear curve through ``points`` ((at,
    fill), ``at`` decreasing): 0 below the lowest point, the highest fill above the
    highest, in between proportional. A standing queue that shrinks then shows as a fill
    that falls, which the sender reads as draining (no re-cut), where fixed steps would
    repeat the same level until it drops below a threshold."""
    hi_at, hi_fill = points[0]
    if x >= hi_at:
        return hi_fill
    for at, fill in points[1:]:
        if x >= at:
            return fill + (hi_fill - fill) * (x - at) / (hi_at - at)
        hi_at, hi_fill = at, fill
    return 0.0


DELAY_BASE_S = 60.0  # the base delay is the lowest of this long (in 6 buckets)
DELAY_SENDERS = 1024  # senders whose delay is followed at once, at most (least recent out)
#: A sender whose frames were queueing and then stopped coming (a multicast repair
#: holding everything behind a lost packet, a link that drops all) counts as queueing
#: more for every second of silence, for this long at most, s.
DELAY_SILENCE_S = 5.0


class DelayMonitor:
    """Queueing delay on the path as a fill: per sender, one-way delay minus its lowest
    of the last DELAY_BASE_S (so clock offsets cancel); per window, the lowest of that
    (a standing queue, not jitter), the largest over senders, mapped by ``delay_fill``
    (see NakConfig) and held until the next window closes. A sender that was queueing
    (at least the first level) and falls silent without END counts as queueing its last
    delay plus the silence, for up to DELAY_SILENCE_S: no frames is no evidence of an
    empty path, and from a congested one it is evidence of worse."""

    def __init__(self, delay_fill: Sequence[tuple[float, float]], window_s: float) -> None:
        self.delay_fill, self.window_s = tuple(delay_fill), window_s
        #: stream -> [lowest delay in this window, lowest with the reader's lateness off];
        #: a stream is (sender, epoch): two incarnations of one id (a Spark task and its
        #: speculative copy) may run at once, on hosts whose clocks differ
        self._win: dict[SenderKey, list[float]] = {}
        self._last: dict[SenderKey, list[float]] = {}  # ... in the last window
        self._base: dict[SenderKey, list[list[float]]] = {}  # stream -> [[bucket start, min]]
        self._congested: dict[SenderKey, tuple[float, float]] = {}  # stream -> (queueing, at)
        self._t: float | None = None
        self.fill = 0.0
        self.queueing_s = 0.0
        self.windows = 0  # windows whose delay counted as a fill
        self.silent_windows = 0  # ... of those, on a congested sender's silence
        self.silent = False  # the last window's fill came from a silence

    def on_delay(self, sender: SenderKey, delay_s: float, late_s: float = 0.0) -> None:
        """A frame of ``sender`` took ``delay_s`` (its stamp to now), of which up to
        ``late_s`` the reading process was late (not the path's): the path's queueing is
        judged on ``delay_s - late_s``, the base on ``delay_s`` alone (a frame that waited
        less than the lateness must not pull the base down)."""
        if not self.delay_fill:
            return  # off (ack, none, or switched off): observe() never clears the window
        win = self._win
        row = win.get(sender)
        if row is None:
            if len(win) < DELAY_SENDERS:  # bounded whatever ids arrive
                win[sender] = [delay_s, delay_s - late_s]
            return
        if delay_s < row[0]:
            row[0] = delay_s
        if delay_s - late_s < row[1]:
            row[1] = delay_s - late_s

    def forget(self, sender: SenderKey) -> None:
        """The stream ended or its sender left: its silence means nothing (and this window's frames
        of it must not make it congested again: a receiver back from a stop read a
        stream's END at the end of its backlog, and the silence that followed held its
        fill at 100 % for DELAY_SILENCE_S, with its queue empty)."""
        self._congested.pop(sender, None)
        self._win.pop(sender, None)
        self._last.pop(sender, None)

    def observe(self, *, now: float) -> float:
        if not self.delay_fill:
            return 0.0
        if self._t is None or now - self._t >= self.window_s:
            self._t, win, last, self._win = now, self._win, self._last, {}
            self._last = win
            first = self.delay_fill[-1][0]
            worst = 0.0
            for sender, (lowest, lowest_path) in win.items():
                before = last.get(sender)
                if before is None:
                    continue  # followed from its second window on: a stream, not a stray
                # ... but its first window counts for the base: its first frames are the
                # least queued a stream starting into a slow link will ever be (by the
                # second window the lab's link was already 200 ms behind a 5,000 msgs/s
                # start, and that queue counted as none)
                q = self._queueing(sender, min(lowest, before[0]), lowest_path, now)
                if q >= first:
                    self._congested[sender] = (q, now)
                else:
                    self._congested.pop(sender, None)
                worst = max(worst, q)
            silent = 0.0
            for sender, (q, at) in list(self._congested.items()):
                if sender in win:
                    continue
                if now - at > DELAY_SILENCE_S:
                    del self._congested[sender]
                else:
                    silent = max(silent, q + now - at)
            self.queueing_s = max(worst, silent)
            self.fill = interpolate(self.delay_fill, self.queueing_s)
            self.windows += self.fill > 0
            self.silent = silent > worst
            self.silent_windows += self.silent
        return self.fill

    def _queueing(self, sender: SenderKey, lowest: float, lowest_path: float,
                  now: float) -> float:
        """The path's queueing of ``sender`` this window (``lowest_path`` over the base);
        ``lowest`` goes into the base."""
        buckets = self._base.pop(sender, None) or []
        self._base[sender] = buckets  # (re)inserted last: the most recently heard
        if len(self._base) > DELAY_SENDERS:
            del self._base[next(iter(self._base))]
        if not buckets or now - buckets[-1][0] >= DELAY_BASE_S / 6:
            buckets.append([now, lowest])
            while now - buckets[0][0] > DELAY_BASE_S:
                del buckets[0]
        elif lowest < buckets[-1][1]:
            buckets[-1][1] = lowest
        return max(0.0, lowest_path - min(b[1] for b in buckets))


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
