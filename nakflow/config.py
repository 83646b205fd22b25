"""Configuration dataclasses: one docstring line per field, the unit in the name.

Defaults cite their source. Every config is a frozen, picklable dataclass so it
can travel to Spark executors.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import ConfigError
from .wire.codec import DEFAULT_MAX_FRAME_BYTES, MAX_NAME_CHARS

#: Natural batching's defaults: a message waits at most this long for others to share its
#: DATA frame, s; a frame holds at most this many messages or payload bytes.
LINGER_S = 0.0005
FRAME_MSGS = 256
FRAME_BYTES = 64 * 1024

MODES = ("nak", "ack", "none")

#: The largest frame bound either side takes (``max_frame_bytes``), bytes: what ZeroMQ's
#: size option and a msgpack frame hold (a bigger one failed in the socket's setup with an
#: OverflowError's traceback).
MAX_FRAME_BYTES_LIMIT = 2**31 - 1
#: The largest queue bound (``capacity_msgs``): a receiver's HELLO answer says it, and a
#: bigger one (10**20) killed the receiver's I/O thread at the first HELLO it answered.
MAX_CAPACITY_MSGS = 2**32

#: NAK levels in percent of queue capacity (seed 001: "50%, 75%, 87%, 100%").
DEFAULT_LEVELS: tuple[int, ...] = (50, 75, 87, 100)

#: Multiplicative cut per NAK level, relative to the rate when the window opened.
#: Starting values from the foundation issue; see docs/design/history.md for how they were checked.
DEFAULT_CUT_FACTORS: Mapping[int, float] = {50: 0.9, 75: 0.7, 87: 0.5, 100: 0.25}
#: With the rate a NAK reports (what the receiver can take): the cut goes no lower than
#: this share of it per level, so a sender settles at or just under the receiver's
#: capacity and a backlog past the first mark drains at the difference (NORM-CC's and
#: BBR's use of a receiver's delivery rate). Deeper for higher levels: more backlog to
#: drain. At the first level, the consumer's rate itself: the queue holds at its first
#: mark (0.97 drained it below, and in ``nakflow eval`` the job ended with 10-17 of the
#: slow receiver's 39 queued against credit's 21-27, NAK/ACK median 0.983 of 5 runs;
#: with 1.0, 0.993 of 15, 0.969-1.003; the simulated latency sweep and gc-pauses within
#: 0.3 %).
DEFAULT_RATE_SHARES: Mapping[int, float] = {50: 1.0, 75: 0.93, 87: 0.87, 100: 0.75}


#: The field types ``check_values`` checks, as annotated (``X | None`` takes None too).
_KINDS: Mapping[str, tuple[tuple[type, ...], str]] = {
    "int": ((numbers.Integral,), "a whole number"),
    "float": ((numbers.Real,), "a number"),
    "bool": ((bool,), "True or False"),
    "str": ((str,), "a string"),
}


def check_values(config: Any) -> None:
    """Raise ConfigError for a field whose value is not of its annotated kind (an int, a
    number, a bool, a string; bool is no number here) or is NaN. ``capacity_msgs="100"``
    failed deep in the queue with ``'<' not supported between instances of 'str' and
    'int'``, ``capacity_msgs=float("inf")`` with an OverflowError, and 10.5 or True were
    taken as a capacity; every comparison with NaN is false, so no bound a config checks
    would refuse it (``linger_s=nan`` was taken). A number of another type (numpy's int64
    or float32) is stored as an int or a float."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and math.isnan(value):
            raise ConfigError(f"{type(config).__name__}.{f.name} is NaN; give a number")
        kind, _, rest = str(f.type).partition(" | ")
        if kind not in _KINDS or rest not in ("", "None") or (rest and value is None):
            continue
        types, said = _KINDS[kind]
        if not isinstance(value, types) or (kind != "bool" and isinstance(value, bool)):
            raise ConfigError(f"{type(config).__name__}.{f.name} must be {said}"
                              f"{' or None' if rest else ''}, not {value!r}")
        if kind == "int" and type(value) is not int:
            object.__setattr__(config, f.name, getattr(config, f.name).__index__())
        elif kind == "float" and not isinstance(value, (int, float)):  # numpy's float32
            object.__setattr__(config, f.name, float(getattr(config, f.name)))


def check_timeout(timeout: float | None, what: str) -> float | None:
    """Return ``timeout`` (s; None: no limit) if it is a number >= 0, else raise ValueError
    (as ``queue.Queue.get`` does): a negative one is no wait that was meant, and with NaN
    no deadline is ever reached (``messages(timeout=nan)`` waited for ever). Another kind
    (a string) is a TypeError saying so (Python's words were ``'>=' not supported``)."""
    kind = type(timeout)  # float, int and None first: every get_many checks it
    if (timeout is not None and kind is not float and kind is not int
            and (kind is bool or not isinstance(timeout, numbers.Real))):
        raise TypeError(f"{what}: timeout must be a number of seconds >= 0 (or None: no "
                        f"limit), not {timeout!r}")
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"{what}: timeout must be a number of seconds >= 0 (or None: no "
                         f"limit), not {timeout!r}")
    return timeout


def check_count(n: int, what: str, name: str) -> int:
    """Return ``n`` if it is a whole number >= 0; else raise TypeError for another kind (a
    string failed with Python's ``'<' not supported``, and ``wait_for_receivers(1.5)``
    waited its whole timeout for "1.5 receivers") or ValueError for a negative one."""
    if type(n) is not int and (isinstance(n, bool) or not isinstance(n, numbers.Integral)):
        raise TypeError(f"{what}: {name} must be a whole number >= 0, not {n!r}")
    if n < 0:
        raise ValueError(f"{what}: {name} must be >= 0, not {n}")
    return n


def check_callable(value: Any, what: str) -> None:
    """Raise TypeError unless ``value`` is None or callable: a ``handler=`` or ``on_event=``
    given something else was taken and failed at each message or event (a sender's at its
    first event, then at its exit)."""
    if value is not None and not callable(value):
        raise TypeError(f"{what} must be a callable (or None), not {value!r}")


def check_name(value: str | None, what: str) -> None:
    """Raise ConfigError unless ``value`` is a name every frame can carry: 1..256
    characters, no NUL (None and "" stand for "not given"). A longer sender id made
    every frame malformed at its receivers (the sender sent on, and a wait for receivers
    timed out blaming the stream or a key); a longer receiver id left its HELLO answers
    unread; a NUL ends the topic of the repairs meant for one receiver alone."""
    if value and (len(value) > MAX_NAME_CHARS or "\0" in value):
        raise ConfigError(f"{what} must be a name of 1..{MAX_NAME_CHARS} characters without "
                          f"NUL, not {value[:40]!r}{'...' if len(value) > 40 else ''} "
                          f"({len(value):,} characters)")


def check_frame_bound(max_frame_bytes: int) -> None:
    """Raise ConfigError unless ``max_frame_bytes`` lies in 1..MAX_FRAME_BYTES_LIMIT."""
    if not 1 <= max_frame_bytes <= MAX_FRAME_BYTES_LIMIT:
        raise ConfigError(f"max_frame_bytes must lie in 1..{MAX_FRAME_BYTES_LIMIT:,}, not "
                          f"{max_frame_bytes:,}")


def check_levels(levels: tuple[int, ...]) -> tuple[int, ...]:
    """Return NAK fill ``levels`` if they are strictly increasing percents in (0, 100],
    else raise ConfigError."""
    if not levels or list(levels) != sorted(set(levels)):
        raise ConfigError("levels must be strictly increasing")
    if not all(0 < lv <= 100 for lv in levels):
        raise ConfigError("levels must lie in (0, 100]")
    return levels


def check_mode(mode: str) -> str:
    """Return ``mode`` if it names a flow-control policy, else raise ConfigError."""
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


@dataclass(frozen=True)
class NakConfig:
    """Sender-side NAK rate control and receiver-side NAK emission."""

    #: Lowest send rate a NAK can force, msgs/s. > 0: NAKs slow a sender, never stop it.
    min_rate_msgs: float = 50.0
    #: Highest send rate, msgs/s. The default is far above what one Python sender reaches.
    max_rate_msgs: float = 2_000_000.0
    #: Rate at first use, msgs/s; None means max_rate_msgs (seed 001's non-limiting start).
    #: The default probes upward instead (see ramp_factor): a non-limiting start fills the
    #: socket buffers, which no receiver can see, faster than any NAK can come back.
    initial_rate_msgs: float | None = 5_000.0
    #: Until the first NAK, the limit grows by this factor every step_s (slow start, as in
    #: TCP): 1.25 per 50 ms is x87 per second, and at most x1.6 past a receiver's rate
    #: before its NAK (100 ms later) takes effect. After a start (the RTT and the rooms
    #: known), a step adds at most ``policy.curve.room_step``, as the probe's growth.
    ramp_factor: float = 1.25
    #: The start (``policy.startup``): the sender's first window, msgs. While it lasts,
    #: DATA asks receivers for their PROGRESS and the sender keeps no more in flight than
    #: its window, which grows by what the slowest receiver confirms (doubling a round
    #: trip) until their delay rises, the rate stops growing, or a NAK comes; the limit
    #: then starts at the rate reached. None: no start, the ramp below from
    #: initial_rate_msgs (the start needs revision 5 receivers; older ones leave it after
    #: its first window and a stall, ``startup.STALL_S``).
    start_window_msgs: int | None = 16
    #: ... or, where every receiver that answered the sender's HELLO said its queue's
    #: room (wire revision 6), up to this many bytes of the first message's size (its
    #: payload and ``first_window.MSG_OVERHEAD_BYTES``) and half the least room, if that is
    #: more: 16 KB is ~140 messages of 100 B and the same 16 of 1 KB (TCP's first window
    #: is ten segments, 14.6 KB, RFC 6928). None: ``start_window_msgs`` always.
    start_window_bytes: int | None = 16_384
    #: ... or every this many round trips once the sender has measured the RTT, if that
    #: is shorter than step_s (None, the default: always step_s). 10 on loopback or a LAN
    #: (RTT <= 1 ms) grows every 10 ms instead of every 50 ms: from 5,000 to 500,000
    #: msgs/s in 0.2 s instead of 1 s, but a small queue overflows before the first NAK
    #: (docs/design/history.md, "Slow start on a short path").
    ramp_rtts: float | None = None
    #: ... but never more often than this, s.
    ramp_min_step_s: float = 0.01
    #: The sender acts on the strongest NAK within this window, s (seed 001: "e.g. 50ms").
    window_s: float = 0.05
    #: Cut factor per NAK level (percent -> multiplier in (0, 1)).
    cut_factors: Mapping[int, float] = field(default_factory=lambda: dict(DEFAULT_CUT_FACTORS))
    #: A NAK that reports the receiver's rate cuts no lower than this share of it per
    #: level (percent -> share in (0, 1]); {} ignores reported rates.
    rate_shares: Mapping[int, float] = field(default_factory=lambda: dict(DEFAULT_RATE_SHARES))
    #: After a cut, NAKs no stronger than it only block increases for this long, s.
    hold_s: float = 0.2
    #: The hold after a cut at the top level (a full queue drops data while it waits), s.
    top_hold_s: float = 0.1
    #: Increases start after this long without any NAK, s. Receivers repeat a held level
    #: every window_s, so a quiet gap must be clearly longer than that (default 2 windows).
    quiet_s: float = 0.1
    #: The increase is applied in steps of this length while no NAK arrives, s.
    step_s: float = 0.05
    #: CUBIC growth constant, relative to the rate at the last NAK, per s^3 (RFC 8312 shape).
    cubic_c: float = 0.3
    #: After this long without any NAK, s, and probe_rtts round trips, the limit also
    #: grows by probe_factor once per step_s or per RTT (whichever is longer) from where it
    #: stands then (the higher of that and CUBIC counts), so capacity that frees up (a
    #: sender finished, a receiver left) or that the start measured short (a start on two
    #: shared cores: 140,000 msgs/s, and the limit then held the sender 0.5-1.4 s below
    #: the 280,000 its receivers took) is found in a few steps instead of after CUBIC's
    #: plateau. Each growth is at most what half the smallest room the receivers reported
    #: in the start takes in while a NAK comes back (``policy.curve.probe_step``; unbounded,
    #: it overshot where a queue holds less than an RTT: simulated, 50 ms, 12x the drops),
    #: and it does not grow past a rate a consumer's queue NAK reported. Needs the RTT
    #: (the receivers' HELLO answers) and that room (their PROGRESS in the start): a
    #: sender without them does not probe. None: CUBIC alone (docs/design/history.md).
    probe_after_s: float | None = 0.1
    #: ... and the probe waits this many RTTs without a NAK.
    probe_rtts: float = 4.0
    #: ... growth per step_s of that probe.
    probe_factor: float = 1.25
    #: Token-bucket burst, as seconds' worth of the current rate.
    burst_s: float = 0.005
    #: A sender the limit holds back waits until this long's worth of the rate may go
    #: (at most ``policy.bucket.GATHER_MSGS``, held on top of the burst), s, so what then
    #: goes leaves as one DATA frame: at a slow link's rate a held sender otherwise sends
    #: one message a frame, and a frame's headers cost a 1 KB message 6 % of the link
    #: (the lab's 8 Mbit/s link: 1,119 bytes a message, 893 msgs/s, where ACK's frames of
    #: 49 took 1,052 and 955). 4 ms there gathered 3.6 a frame (1,074 bytes on the link,
    #: 935 msgs/s); 10 ms gathers 8.5 (1,061 bytes, 946). A message waits at most this
    #: much longer. 0: each goes as soon as it may.
    gather_s: float = 0.01
    #: Receiver: fill levels that trigger a NAK, percent of capacity.
    levels: tuple[int, ...] = DEFAULT_LEVELS
    #: Receiver: a held level is released only when fill drops this far below it, points.
    hysteresis_pct: float = 10.0
    #: Receiver: a due NAK waits a random hold-off in [0, backoff_s), truncated-exponential
    #: (Nonnenmacher & Biersack), and is dropped if an equal or stronger one is overheard
    #: meanwhile: with N receivers overloaded at once, about a constant number speak,
    #: whatever N. 0 disables it; it needs an rng, so without one it is off too. s.
    backoff_s: float = 0.01
    #: Receiver: with a group RTT advertised, the hold-off is at least this many RTTs
    #: (below 0.9 x window_s). Off by default: a longer hold-off halves the NAKs but
    #: delays the cut (simulated, 10 receivers, 100 ms: 62% more drops at 0.5 RTT;
    #: benchmarks/rtt_feedback.py, docs/design/history.md). For very many receivers.
    backoff_rtts: float = 0.0
    #: Receiver: decide on the fill expected this many RTTs ahead (fill + its growth
    #: rate x that time; 0: today's fill only). Simulated, 10 receivers, 50/100/200 ms:
    #: 61/65/41 % fewer drops than today's fill, goodput 0-6 % higher.
    predict_rtts: float = 1.0
    #: Receiver: loss in flight as congestion. Over each window_s with at least
    #: loss_min_msgs arrivals or gaps, the share of messages found missing (a gap in the
    #: sequence: a network queue or a ZeroMQ high-water mark dropped them) counts as this
    #: fill, the strongest row that applies: (share >=, fill). So a receiver behind a slow
    #: link, whose queue never fills, still slows the senders to what its link carries;
    #: random loss below the first row's share only asks for repair. () disables it.
    loss_fill: tuple[tuple[float, float], ...] = ((0.5, 1.0), (0.3, 0.87), (0.2, 0.75),
                                                  (0.1, 0.5))
    loss_min_msgs: int = 64
    #: ... and at least this many frames (arrived, plus gaps): a share is judged over as
    #: long a span as that takes. Loss comes by the frame; 100 frames keep 1 % random loss
    #: at 10,000 receivers from reading as congestion (_fill.LossMonitor; simulated, 300
    #: receivers at 1 %: with 16 frames a span the rate collapsed, 2,421 msgs sent
    #: against 17,571).
    loss_min_frames: int = 100
    #: Receiver: queueing delay on the path as congestion (LEDBAT's measure). Each DATA
    #: frame's one-way delay (arrival - its send stamp) minus the lowest seen from that
    #: sender over the last minute is the time it waited in queues on the way (socket
    #: buffers, a slow link's queue, a multicast repair); the lowest of it over each
    #: window_s, from any sender, counts as this fill: (queueing delay >= s, fill). Clock
    #: offsets between hosts cancel out. () disables it.
    delay_fill: tuple[tuple[float, float], ...] = ((0.4, 1.0), (0.2, 0.87), (0.1, 0.75),
                                                   (0.05, 0.5))

    def __post_init__(self) -> None:
        check_values(self)
        if not (self.min_rate_msgs > 0 and math.isfinite(self.min_rate_msgs)):
            raise ConfigError("min_rate_msgs must be a finite number > 0")
        if not (self.max_rate_msgs >= self.min_rate_msgs and math.isfinite(self.max_rate_msgs)):
            raise ConfigError(f"max_rate_msgs must be finite and >= min_rate_msgs "
                              f"({self.min_rate_msgs:g}), not {self.max_rate_msgs!r}")
        init = self.initial_rate_msgs
        if init is not None and not (self.min_rate_msgs <= init and math.isfinite(init)):
            raise ConfigError(f"initial_rate_msgs must be finite and >= min_rate_msgs "
                              f"({self.min_rate_msgs:g}), not {init!r}")
        if not (self.ramp_factor > 1 and math.isfinite(self.ramp_factor)):
            raise ConfigError("ramp_factor must be a finite number > 1")
        if not (self.probe_factor > 1 and math.isfinite(self.probe_factor)):
            raise ConfigError("probe_factor must be a finite number > 1")
        if not self.probe_rtts >= 1:
            raise ConfigError("probe_rtts must be >= 1")
        if self.ramp_rtts is not None and not (self.ramp_rtts > 0
                                               and math.isfinite(self.ramp_rtts)):
            raise ConfigError("ramp_rtts must be None or a finite number > 0")
        if not 0 < self.ramp_min_step_s <= self.step_s:
            raise ConfigError("ramp_min_step_s must be > 0 and <= step_s")
        if self.start_window_msgs is not None and not 1 <= self.start_window_msgs <= 1 << 20:
            raise ConfigError("start_window_msgs must be None or 1..1048576")
        if self.start_window_bytes is not None and not 1 <= self.start_window_bytes <= 1 << 30:
            raise ConfigError("start_window_bytes must be None or 1..1073741824")
        if self.probe_after_s is not None and not self.probe_after_s >= self.quiet_s:
            raise ConfigError("probe_after_s must be None or >= quiet_s")
        for name in ("window_s", "step_s", "cubic_c", "burst_s", "quiet_s"):
            if not 0 < getattr(self, name) < math.inf:  # burst_s inf: an OverflowError
                raise ConfigError(f"{name} must be a finite number > 0")
        if not 0 <= self.gather_s < math.inf:
            raise ConfigError("gather_s must be finite and >= 0")
        if min(self.hold_s, self.top_hold_s, self.hysteresis_pct, self.backoff_s) < 0:
            raise ConfigError("hold_s, top_hold_s, hysteresis_pct and backoff_s must be >= 0")
        if not (0 <= self.backoff_rtts < math.inf and 0 <= self.predict_rtts < math.inf):
            raise ConfigError("backoff_rtts and predict_rtts must be finite and >= 0")
        if self.backoff_s >= self.window_s:
            raise ConfigError("backoff_s must be shorter than window_s")
        check_levels(self.levels)
        shares = [share for share, _fill in self.loss_fill]
        if shares != sorted(shares, reverse=True) or not all(
                0 < share <= 1 and 0 < fill <= 1 for share, fill in self.loss_fill):
            raise ConfigError("loss_fill must be (share, fill) pairs in (0, 1], shares "
                              "decreasing")
        delays = [at for at, _fill in self.delay_fill]
        if delays != sorted(delays, reverse=True) or not all(
                0 < at < math.inf and 0 < fill <= 1 for at, fill in self.delay_fill):
            raise ConfigError("delay_fill must be (seconds > 0, fill in (0, 1]) pairs, "
                              "seconds decreasing")
        if self.loss_min_msgs < 1:
            raise ConfigError("loss_min_msgs must be >= 1")
        if self.loss_min_frames < 1:
            raise ConfigError("loss_min_frames must be >= 1")
        for lv in self.levels:
            f = self.cut_factors.get(lv)
            if f is None or not 0 < f < 1:
                raise ConfigError(f"cut_factors needs a factor in (0, 1) for level {lv}")
        if not all(0 < v <= 1 for v in self.rate_shares.values()):
            raise ConfigError("rate_shares must lie in (0, 1]")

    @property
    def start_rate_msgs(self) -> float:
        """The rate at first use, msgs/s (initial_rate_msgs, at most max_rate_msgs)."""
        init = self.initial_rate_msgs
        return self.max_rate_msgs if init is None else min(init, self.max_rate_msgs)


@dataclass(frozen=True)
class AckConfig:
    """Credit-based (Reactive Streams request(n)) flow control."""

    #: A receiver silent this long is evicted from the ledger, s (Aeron, JGroups: 5 s).
    receiver_timeout_s: float = 5.0
    #: A receiver re-sends its grant at least this often as liveness, s (Aeron status: 0.2 s).
    heartbeat_s: float = 0.2
    #: When the transport says a receiver's connection closed (ZeroMQ's socket monitor,
    #: tcp/ipc), every receiver that is not heard (grant or HELLO) within this long is
    #: evicted as ``disconnected``, s: a killed receiver stops stalling the others in
    #: about this long instead of receiver_timeout_s (JGroups' FD_SOCK: a closed TCP
    #: connection). Three heartbeats: a live receiver always answers. None: wait for
    #: receiver_timeout_s as before (a hung receiver always waits for it).
    disconnect_probe_s: float | None = 0.6
    #: Nothing is sendable until this many receivers have granted credit.
    min_receivers: int = 0
    #: No sender is granted more than this share of a receiver's queue. Grants cannot be
    #: taken back: at 1.0 (seed 004's initial demand = capacity) the first sender heard
    #: takes the whole queue, and two senders that start together, heard in opposite
    #: orders by two receivers, each hold one queue while waiting for credit at the other
    #: until idle_credit_s (found in `nakflow eval`: 4 of 31 ACK runs stalled 5 s, two of
    #: them then overflowed when the lent credit came back). At 0.5 two concurrent
    #: newcomers always find room, but a lone sender's window is half the queue, which
    #: halves ACK's window / RTT throughput on long round trips (simulated, 100 ms:
    #: 7.6k instead of 15k msgs/s). `nakflow eval` (concurrent Spark tasks) uses 0.5.
    max_share: float = 1.0
    #: Re-grant once the consumer freed this fraction of the window (seed 004: a quarter).
    regrant_fraction: float = 0.25
    #: A grant further ahead of the sender than this is clamped, msgs (bounded influence).
    max_credit_ahead: int = 1 << 20
    #: Unused credit of a sender that sent nothing for this long while saying it waits for
    #: credit (elsewhere, then) stops reserving queue room, s. Grants cannot be taken
    #: back, so without this two senders can deadlock: each holding unused credit at one
    #: receiver while waiting for credit at another. If such a sender comes back, what
    #: does not fit the queue waits in the receiver's socket (an ack receiver's full
    #: queue reads no further). As long as receiver_timeout_s: a deadlock
    #: then costs what a dead receiver costs, and a merely slow or CPU-starved receiver
    #: elsewhere (1 s was seen under load) does not trigger it.
    idle_credit_s: float = 5.0
    #: A sender not heard for this long is forgotten by a receiver, and the queue room its
    #: credit reserved is free again, s. (Until then a sender that is merely quiet keeps
    #: it: so does a forged one, on a channel without CURVE or a shared key.)
    sender_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        check_values(self)
        if not self.sender_timeout_s > 0:
            raise ConfigError("sender_timeout_s must be > 0")
        if not self.receiver_timeout_s > 0 or not self.heartbeat_s > 0:
            raise ConfigError("receiver_timeout_s and heartbeat_s must be > 0")
        if self.disconnect_probe_s is not None and not self.disconnect_probe_s > 0:
            raise ConfigError("disconnect_probe_s must be > 0 (or None: off)")
        if self.min_receivers < 0:
            raise ConfigError("min_receivers must be >= 0")
        if not self.idle_credit_s > 0:
            raise ConfigError("idle_credit_s must be > 0")
        if not 0 < self.max_share <= 1:
            raise ConfigError("max_share must lie in (0, 1]")
        if not 0 < self.regrant_fraction <= 1:
            raise ConfigError("regrant_fraction must lie in (0, 1]")
        if self.max_credit_ahead < 1:
            raise ConfigError("max_credit_ahead must be >= 1")


@dataclass(frozen=True)
class RepairConfig:
    """Repair of lost messages from a bounded sender history (``nak`` mode; PGM, NORM).

    The history bounds are sized for a few seconds at the rates one Python sender reaches
    (20-50k msgs/s of 100 bytes): messages older than any bound cannot be repaired and are
    reported as ``beyond_history``, never silently.
    """

    #: Repair on (senders keep a history, receivers ask for what they miss).
    enabled: bool = True
    #: Sender: history bound in messages.
    history_msgs: int = 100_000
    #: Sender: history bound in payload bytes.
    history_bytes: int = 64 * 1024 * 1024
    #: Sender: history bound in age, s.
    history_age_s: float = 5.0
    #: Sender: a range is re-sent at most once per this window, s (the NAK window).
    resend_window_s: float = 0.05
    #: Sender: repairs leave at most this share of the rate limit, on top of new data (a
    #: receiver catching up after a pause never starves the others' new data). Repairs of
    #: what one receiver alone misses go to it alone where the transport can (tcp, ipc:
    #: a ZeroMQ topic of its own; over epgm the others' SUB sockets filter them out).
    share: float = 0.25
    #: Sender: the same bound for repairs that reach their receiver alone (tcp, ipc: no
    #: other receiver reads them, so they cost the others only sender CPU), a share of the
    #: rate limit on top of new data. A late joiner or a receiver back from a pause asks
    #: only for what its queue has room for; at ``share`` (0.25) one that joined 3 s late
    #: at 5,000 msgs/s could not catch up within the 5 s history (1,981 beyond history).
    share_alone: float = 1.0
    #: Sender: after END, close() keeps serving repairs until none came for this long
    #: (three retry_s if receivers asked within the last second), s; only for receivers
    #: that send no receipts (older ones): the others say when they are done.
    linger_quiet_s: float = 0.1
    #: Sender, every mode: close() waits for receivers' receipts (and serves their repairs)
    #: at most this long after END, s; who has not answered by then is ``unconfirmed``.
    linger_max_s: float = 10.0
    #: Receiver: a new gap waits a random hold-off in [0, backoff_s) (truncated exponential,
    #: as NAKs) and is not asked for if another receiver asked for it meanwhile, s. Longer
    #: than the round trips between receivers, or nobody hears anybody in time: at 10 ms
    #: RTT and 1 % loss shared by all, 0.01 gave 127 / 380 / 1,266 requests/s for 10 / 30
    #: / 100 receivers, 0.05 gave 74 / 102 / 83 (docs/design/history.md).
    backoff_s: float = 0.05
    #: Receiver: a gap still missing this long after it was asked for is asked again, s.
    retry_s: float = 0.1
    #: Receiver: after this many requests with nothing of the stream arriving, and its
    #: sender silent for ``repair.SENDER_SILENT_S`` (2.5 s), a gap is given up (reported
    #: lost or dropped).
    max_requests: int = 10
    #: Receiver: messages its own full queue dropped are asked for once the fill is below
    #: this fraction of capacity (room is back), as many as there is room for. At 0.5 a
    #: consumer only a little faster than the senders (20,000 against 18,400 msgs/s) stayed
    #: above half full for seconds after each pause, asked once, and was paused again when
    #: the senders' linger ran out: 1,720 of its 4,311 drops never repaired (simulated
    #: gc-pauses on the cores); at 0.8, all of them.
    refill_below: float = 0.8
    #: Receiver: a stream first heard after its start (a receiver that joined late, or
    #: restarted) asks the sender's history for what came before, as its queue has room
    #: (PGM's and NORM's late join). What the history no longer holds stays
    #: ``missed_before_join``. False: start at the first message heard.
    late_join: bool = True

    def __post_init__(self) -> None:
        check_values(self)
        if min(self.history_msgs, self.history_bytes, self.max_requests) < 1:
            raise ConfigError("history_msgs, history_bytes and max_requests must be >= 1")
        for name in ("history_age_s", "resend_window_s", "retry_s", "linger_max_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0")
        if min(self.backoff_s, self.linger_quiet_s) < 0:
            raise ConfigError("backoff_s and linger_quiet_s must be >= 0")
        if not 0 < self.refill_below <= 1:
            raise ConfigError("refill_below must lie in (0, 1]")
        if not 0 < self.share <= 1 or not 0 < self.share_alone <= 1:
            raise ConfigError("share and share_alone must lie in (0, 1]")


@dataclass(frozen=True)
class SenderConfig:
    """Everything a sender's protocol core needs; ``Sender(..., config=)`` and the asyncio
    and simulated drivers take it (their keyword arguments override its fields)."""

    #: Flow control: "nak", "ack" or "none".
    mode: str = "nak"
    #: Stream name; feedback for other streams is ignored.
    stream: str = "default"
    #: Unique id of this sender, 1..256 characters without NUL (None: a random one when the
    #: driver starts).
    sender_id: str | None = None
    #: Incarnation number; a restarted sender must use a new one (None: ms since 1970).
    epoch: int | None = None
    #: NAK rate control.
    nak: NakConfig = field(default_factory=NakConfig)
    #: Credit (ACK) flow control.
    ack: AckConfig = field(default_factory=AckConfig)
    #: History and repair (nak).
    repair: RepairConfig = field(default_factory=lambda: RepairConfig())
    #: A cap in every mode (nak: its ceiling), msgs/s (None: no cap).
    max_rate_msgs: float | None = None
    #: How often a sender that waits (for receivers, for credit) says HELLO, s.
    hello_interval_s: float = 0.1
    #: Natural batching: a message waits at most this long for company, s (0: none).
    linger_s: float = LINGER_S
    #: ... and a DATA frame holds at most this many messages ...
    frame_msgs: int = FRAME_MSGS
    #: ... or payload bytes.
    frame_bytes: int = FRAME_BYTES
    #: Largest frame this sender builds, bytes; a smaller bound a receiver's HELLO answer
    #: says binds it too (raise the receivers', ReceiverConfig's, with it).
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: Sampling interval of the snapshot's timeline, s.
    timeline_interval_s: float = 0.05
    #: Seal every frame and accept only sealed feedback (nakflow.SharedKey; None: off).
    shared_key: Any = None
    #: (nak) Start from the rate the last sender on the same path in this process
    #: validated (a series of short-lived senders, as Spark tasks are).
    remember_rate: bool = False
    #: (nak) The data path stays on this host: its receivers are processes here, and no
    #: network link lies between (None: judged from the data endpoints, loopback tcp, ipc
    #: and inproc; ``transports.is_host_local``). Its start then sends a first window of
    #: what the receivers' queues said they can take, and a queueing delay in the start
    #: is taken for the receivers' processes, not a link (docs/design/fast-start.md, "A
    #: path on one host"). Say False for a tunnel or proxy on loopback that leads to
    #: another host.
    host_local: bool | None = None
    #: At close, a receiver not heard (any frame) for this long is taken as gone and its
    #: receipt is not awaited, s. A receiver stopped for less than this resumes, catches up
    #: and confirms; as long as the history's age bound (RepairConfig.history_age_s), the
    #: longest stop it could catch up from. A receiver whose connection closed (ZeroMQ's
    #: socket monitor, tcp/ipc) is taken as gone after 1.5 s of silence instead.
    receiver_gone_s: float = 5.0

    def __post_init__(self) -> None:
        check_values(self)
        check_mode(self.mode)
        if not self.stream or len(self.stream) > MAX_NAME_CHARS:
            raise ConfigError("stream must be a name of 1..256 characters")
        check_name(self.sender_id, "sender_id")
        if self.epoch is not None and not 0 <= self.epoch < 1 << 64:  # a frame's uint64
            raise ConfigError(f"epoch must lie in 0..2**64-1, not {self.epoch:,}")
        if self.max_rate_msgs is not None and not 0 < self.max_rate_msgs < math.inf:
            raise ConfigError("max_rate_msgs must be a finite number > 0, or None (no "
                              f"limit), not {self.max_rate_msgs!r}")
        if not self.hello_interval_s > 0 or not self.timeline_interval_s > 0:
            raise ConfigError("hello_interval_s and timeline_interval_s must be > 0")
        if not self.receiver_gone_s > 0:
            raise ConfigError("receiver_gone_s must be > 0")
        if self.linger_s < 0 or self.frame_msgs < 1 or self.frame_bytes < 1:
            raise ConfigError("linger_s must be >= 0, frame_msgs and frame_bytes >= 1")
        check_frame_bound(self.max_frame_bytes)

    def named(self, sender_id: str, epoch: int) -> SenderConfig:
        """This config with its id and epoch filled in (where they were None)."""
        return replace(self, sender_id=self.sender_id or sender_id,
                       epoch=epoch if self.epoch is None else self.epoch)


@dataclass(frozen=True)
class ReceiverConfig:
    """Everything a receiver's protocol core needs (``Receiver(..., config=)``)."""

    #: Flow control: "nak", "ack" or "none".
    mode: str = "nak"
    #: Stream name; frames of other streams are ignored.
    stream: str = "default"
    #: Unique id of this receiver, 1..256 characters without NUL (None: a random one when
    #: the driver starts).
    receiver_id: str | None = None
    #: Queue bound, msgs.
    capacity_msgs: int = 10_000
    #: What a full queue does: "drop-newest", "drop-oldest" or "block".
    overflow: str = "drop-newest"
    #: Deliver each (sender id, seq) once across epochs (a retried Spark task).
    drop_duplicates: bool = False
    #: NAK emission.
    nak: NakConfig = field(default_factory=NakConfig)
    #: Credit granting.
    ack: AckConfig = field(default_factory=AckConfig)
    #: Repair requests (nak).
    repair: RepairConfig = field(default_factory=lambda: RepairConfig())
    #: How often a receiver says HELLO on the feedback channel, s.
    hello_interval_s: float = 0.5
    #: Largest frame accepted, bytes (up to 1 KiB bigger ones are dropped unparsed and
    #: counted; ZeroMQ drops the connection at a bigger one, docs/known-limits.md); said
    #: in the HELLO answers, so that the senders build no bigger frame.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: Sampling interval of the snapshot's timeline, s.
    timeline_interval_s: float = 0.05
    #: Accept only frames sealed with this key and seal feedback (None: off).
    shared_key: Any = None
    #: (sender, epoch) streams accounted at once; past it the oldest ended is forgotten.
    max_streams: int = 10_000
    #: A sender of which nothing was heard this long while the receiver listened (no DATA,
    #: no announcement: a live one announces at least every second) is taken to have left
    #: without END (``SenderLeft`` with ``why="silent"``; heard again, it is back), s.
    #: None: wait for its END or BYE for ever. Streams with no DATA yet are not judged.
    sender_gone_s: float | None = 10.0
    #: Tests only: drop this fraction of DATA frames after reading them (needs an rng).
    #: Repairs (RDATA) are not dropped: each lost message then takes one repair round,
    #: where a repair lost again and again (30 % each time) outlasted a 1 s history on a
    #: loaded host by chance (the simulator's link, ``simulations.cores``, loses repairs
    #: too, in virtual time).
    test_data_loss: float = 0.0

    def __post_init__(self) -> None:
        check_values(self)
        check_mode(self.mode)
        if self.overflow not in OVERFLOW_POLICIES:
            raise ConfigError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}")
        if not 1 <= self.capacity_msgs <= MAX_CAPACITY_MSGS:
            raise ConfigError(f"capacity_msgs must lie in 1..{MAX_CAPACITY_MSGS:,}, not "
                              f"{self.capacity_msgs:,}")
        check_frame_bound(self.max_frame_bytes)
        if self.max_streams < 1:
            raise ConfigError("max_streams must be >= 1")
        if not self.stream or len(self.stream) > MAX_NAME_CHARS:
            raise ConfigError("stream must be a name of 1..256 characters")
        check_name(self.receiver_id, "receiver_id")
        if not 0 <= self.test_data_loss < 1:
            raise ConfigError("test_data_loss must lie in [0, 1)")
        if self.sender_gone_s is not None and not self.sender_gone_s > 0:
            raise ConfigError("sender_gone_s must be > 0 (None: never)")

    def named(self, receiver_id: str) -> ReceiverConfig:
        return replace(self, receiver_id=self.receiver_id or receiver_id)


OVERFLOW_POLICIES = ("drop-newest", "drop-oldest", "block")


def with_overrides(config: Any, cls: type, overrides: dict[str, Any]) -> Any:
    """``config`` (or the default of ``cls``) with ``overrides`` (keyword arguments of the
    old constructors) applied; TypeError names an unknown one, as Python would, and a
    ``config`` of another class."""
    if config is not None and not isinstance(config, cls):  # it failed: 'dict' ... 'named'
        raise TypeError(f"config must be a {cls.__name__} (or None), not "
                        f"{type(config).__name__}: its fields may be given as keyword "
                        "arguments too")
    base: Any = config if config is not None else cls()
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}{hint}")
    given = {k: v for k, v in overrides.items() if v is not _UNSET}
    return replace(base, **given) if given else base


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


#: A keyword argument not given (None can be a real value).
_UNSET: Any = _Unset()
