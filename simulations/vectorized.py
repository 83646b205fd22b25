"""The receiver-side policies of nakflow, vectorised across receivers with numpy.

``VecFillMonitor`` makes, for N receivers at once, exactly the decisions N scalar
``nakflow.FillMonitor`` objects make; ``VecCreditGranter`` does the same for
``nakflow.CreditGranter`` over S senders x N receivers. tests/test_simulations.py
runs both against the scalar objects on the same inputs and checks every decision.
Level 0 stands for "no level" (the scalar None).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from nakflow import AckConfig, NakConfig
from nakflow.policy.registry import BACKOFF_LAMBDA, MAX_BACKOFF_WINDOWS, WAITING_FRESH_S

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class VecFillMonitor:
    """N FillMonitors: levels, repeats, hysteresis and suppression, vectorised."""

    def __init__(self, capacity_msgs: npt.ArrayLike, config: NakConfig | None = None, *,
                 rng: np.random.Generator | None = None) -> None:
        self.capacity = np.asarray(capacity_msgs, dtype=np.float64)
        if self.capacity.ndim != 1 or (self.capacity < 1).any():
            raise ValueError("capacity_msgs must be a 1-D array of values >= 1")
        self.config = cfg = config if config is not None else NakConfig()
        n = self.capacity.shape[0]
        self.levels_desc = sorted(cfg.levels, reverse=True)
        self.held = np.zeros(n, np.int64)
        self.last_level = np.zeros(n, np.int64)
        self.last_t = np.zeros(n)
        self.heard_level = np.full(n, -1, np.int64)
        self.heard_t = np.zeros(n)
        self.sent_by_level = {lv: 0 for lv in cfg.levels}
        self.suppressed = 0
        self._any_held = False
        self._any_last = False
        self._zeros = np.zeros(n, np.int64)
        self._rng = rng if cfg.backoff_s > 0 else None
        self.pending_at = np.full(n, np.inf)
        self.pending_level = np.zeros(n, np.int64)
        self.pending_t0 = np.zeros(n)
        self.pending_f0 = np.zeros(n)
        self.hurried = 0
        self._zeros.setflags(write=False)  # returned when nobody speaks: read-only
        self.rtt_s = 0.0
        self._backoff_s = cfg.backoff_s
        self.slope = np.zeros(n)  # fill growth, percent per s, smoothed
        self.prev_t = np.full(n, np.nan)
        self.prev_fill = np.zeros(n)
        self.predicted = 0

    def set_rtt(self, rtt_s: float) -> None:
        """As ``FillMonitor.set_rtt``, for every receiver."""
        cfg = self.config
        self.rtt_s = max(0.0, rtt_s)
        self._backoff_s = (min(max(cfg.backoff_s, cfg.backoff_rtts * self.rtt_s),
                               MAX_BACKOFF_WINDOWS * cfg.window_s)
                           if cfg.backoff_s > 0 else 0.0)

    def _ahead(self, fill: FloatArray, now: float, run: BoolArray) -> FloatArray:
        """As ``FillMonitor._ahead``: the fill expected predict_rtts RTTs ahead."""
        cfg = self.config
        had = run & ~np.isnan(self.prev_t) & (now > self.prev_t)
        with np.errstate(invalid="ignore", divide="ignore"):
            dt = now - self.prev_t
            a = -np.expm1(-dt / cfg.window_s)
            new = self.slope + a * ((fill - self.prev_fill) / dt - self.slope)
        self.slope = np.where(had, new, self.slope)
        self.prev_t = np.where(run, now, self.prev_t)
        self.prev_fill = np.where(run, fill, self.prev_fill)
        if self.rtt_s <= 0:
            return fill
        top = self.levels_desc[0]
        ahead = np.maximum(fill, np.minimum(fill + self.slope * cfg.predict_rtts * self.rtt_s,
                                            top - 1e-9))
        out: FloatArray = np.where(had & (self.slope > 0), ahead, fill)
        return out

    def update(self, depth: npt.ArrayLike, now: float,
               active: BoolArray | None = None) -> IntArray:
        """Depths at ``now``: the NAK level each receiver sends (0: none).

        ``active``: receivers that run this step (a paused or dead one does not).
        """
        fill = 100.0 * np.asarray(depth, dtype=np.float64) / self.capacity
        hyst = self.config.hysteresis_pct
        old = self.held
        run = np.ones_like(old, np.bool_) if active is None else active
        real = fill
        if self.config.predict_rtts > 0:
            fill = self._ahead(real, now, run)
        if not self._any_held and fill.max(initial=0.0) < self.levels_desc[-1]:
            if self._any_last:  # everyone below every level: the scalar clears last_level
                self.last_level = np.where(run, 0, self.last_level)
                self._any_last = bool(self.last_level.any())
            return self._zeros
        held = np.zeros_like(old)
        unpredicted = np.zeros_like(old)
        for lv in self.levels_desc:
            hit = (fill >= lv) | ((old >= lv) & (fill >= lv - hyst))
            held = np.where((held == 0) & hit, lv, held)
            hit = (real >= lv) | ((old >= lv) & (real >= lv - hyst))
            unpredicted = np.where((unpredicted == 0) & hit, lv, unpredicted)
        held = np.where(run, held, old)
        self.held = held
        self._any_held = bool(held.any())
        last = self.last_level
        fresh = run & (held > 0) & ~((last > 0) & (held <= last)
                                     & (now - self.last_t < self.config.window_s))
        if self._rng is not None:
            # hold-off timers, drawn in receiver order (the scalar monitors draw in turn)
            self.pending_at = np.where(run & (held == 0), np.inf, self.pending_at)
            start = fresh & (np.isinf(self.pending_at) | (held > self.pending_level))
            if start.any():
                u = self._rng.random(int(start.sum()))
                delay = self._backoff_s / BACKOFF_LAMBDA * np.log1p(u * math.expm1(BACKOFF_LAMBDA))
                self.pending_at[start] = now + delay
                self.pending_level[start] = held[start]
                self.pending_t0[start] = now
                self.pending_f0[start] = real[start]
            # as FillMonitor._fills_before: no waiting out a hold-off the queue fills in
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                full_at = now + ((self.levels_desc[0] - real) * (now - self.pending_t0)
                                 / (real - self.pending_f0))
                hurry = (fresh & (now < self.pending_at) & (now > self.pending_t0)
                         & (real > self.pending_f0) & (now + self.rtt_s < full_at)
                         & (full_at <= self.pending_at + self.rtt_s))
            self.hurried += int(hurry.sum())
            fresh = fresh & ((now >= self.pending_at) | hurry)
            self.pending_at[fresh] = np.inf
        self.last_level = np.where(run & (held == 0), 0, np.where(fresh, held, last))
        self._any_last = bool(self.last_level.any())
        if not fresh.any():
            return self._zeros
        self.last_t = np.where(fresh, now, self.last_t)
        supp = fresh & (self.heard_level >= held) & (now - self.heard_t < self.config.window_s)
        self.suppressed += int(supp.sum())
        out = np.where(fresh & ~supp, held, 0)
        self.predicted += int(((out > 0) & (fill != real) & (out > unpredicted)).sum())
        for lv in self.levels_desc:
            self.sent_by_level[lv] += int((out == lv).sum())
        return out

    def on_heard(self, level: IntArray, now: float) -> None:
        """Receiver i overheard a NAK of ``level[i]`` at ``now`` (0: nothing heard)."""
        take = (level > 0) & ((level >= self.heard_level)
                              | (now - self.heard_t >= self.config.window_s))
        self.heard_level = np.where(take, level, self.heard_level)
        self.heard_t = np.where(take, now, self.heard_t)


class VecCreditGranter:
    """S x N CreditGranters (sender s at receiver i), vectorised.

    Mirrors ``nakflow.CreditGranter``: window = capacity // senders known (at most
    ``max_share`` of the capacity), the
    limit aims at ``position - queued + window`` but hands out only capacity no
    sender is committed to (senders in index order, as the scalar granter's),
    re-granted after ``regrant_fraction`` of the window was freed and at least
    every ``heartbeat_s``.
    """

    def __init__(self, senders: int, capacity_msgs: npt.ArrayLike,
                 config: AckConfig | None = None, *, sender_timeout_s: float | None = None) -> None:
        cap = np.asarray(capacity_msgs, dtype=np.int64)
        if cap.ndim != 1 or (cap < 1).any():
            raise ValueError("capacity_msgs must be a 1-D array of values >= 1")
        self.capacity = cap
        self.config = config if config is not None else AckConfig()
        self.sender_timeout_s = (self.config.sender_timeout_s if sender_timeout_s is None
                                 else sender_timeout_s)
        shape = (senders, cap.shape[0])
        self.known = np.zeros(shape, np.bool_)
        self.position = np.zeros(shape, np.int64)
        self.queued = np.zeros(shape, np.int64)
        self.granted = np.full(shape, -1, np.int64)
        self.granted_t = np.full(shape, -np.inf)
        self.seen_t = np.zeros(shape)
        self.active_t = np.zeros(shape)  # when the position last moved
        self.waiting_t = np.full(shape, -np.inf)  # last "waiting for credit"
        self.orphaned = np.zeros(cap.shape[0], np.int64)  # queued msgs of forgotten senders
        self.credits_sent = 0

    def window(self) -> IntArray:
        n_known = np.maximum(1, self.known.sum(axis=0))
        cap_share = (self.capacity * self.config.max_share).astype(np.int64)
        out: IntArray = np.maximum(1, np.minimum(self.capacity // n_known, cap_share))
        return out

    def on_sender(self, heard: BoolArray, next_seq: IntArray, now: float) -> None:
        """Sender s was heard at receiver i (``heard[s, i]``), about to send ``next_seq``."""
        new = heard & ~self.known
        old = heard & self.known
        moved = (old & (next_seq > self.position)) | new
        self.active_t = np.where(moved, now, self.active_t)
        self.position = np.where(new, next_seq,
                                 np.where(old, np.maximum(self.position, next_seq),
                                          self.position))
        self.queued = np.where(new, 0, self.queued)
        self.granted = np.where(new, -1, self.granted)
        self.granted_t = np.where(new, -np.inf, self.granted_t)
        self.seen_t = np.where(heard, now, self.seen_t)
        self.waiting_t = np.where(new, -np.inf, self.waiting_t)
        self.known |= heard

    def on_enqueued(self, n: IntArray) -> None:
        self.queued = np.where(self.known, self.queued + n, self.queued)
        self.orphaned += np.where(self.known, 0, n).sum(axis=0)

    def on_released(self, n: IntArray) -> None:
        self.queued = np.where(self.known, np.maximum(0, self.queued - n), self.queued)
        for s in range(n.shape[0]):  # in sender order, as the scalar granter sees them
            self.orphaned = np.where(self.known[s], self.orphaned,
                                     np.maximum(0, self.orphaned - n[s]))

    def poll(self, now: float, active: BoolArray | None = None) -> tuple[BoolArray, IntArray]:
        """Credits due at ``now``: (due[s, i], limit[s, i]); only active receivers poll."""
        stale = self.known & (now - self.seen_t > self.sender_timeout_s)
        if active is not None:
            stale &= active
        if stale.any():
            self.orphaned += np.where(stale, self.queued, 0).sum(axis=0)
            self.known &= ~stale
        window = self.window()
        step = np.maximum(1, (window * self.config.regrant_fraction).astype(np.int64))
        known = self.known
        lent = ((now - self.active_t >= self.config.idle_credit_s)
                & (now - self.waiting_t < WAITING_FRESH_S))
        unused = np.where(lent, 0, np.maximum(0, self.granted - self.position))
        commit = np.where(known, unused + self.queued, 0)
        free = self.capacity - self.orphaned - commit.sum(axis=0)
        due = np.zeros_like(known)
        limit = np.zeros_like(self.position)
        for s in range(known.shape[0]):  # in sender order, as the scalar granter's dict
            granted, position = self.granted[s], self.position[s]
            base = np.maximum(granted, position)
            extra = np.minimum(position - self.queued[s] + window - base, free)
            lim = np.where(extra > 0, base + extra, base)
            d = known[s] & ((lim - granted >= step) | (granted < 0)
                            | (now - self.granted_t[s] >= self.config.heartbeat_s))
            if active is not None:
                d &= active
            free = np.where(d, free - (lim - base), free)
            due[s], limit[s] = d, lim
        if due.any():
            self.granted = np.where(due, limit, self.granted)
            self.granted_t = np.where(due, now, self.granted_t)
            self.credits_sent += int(due.sum())
        return due, limit
