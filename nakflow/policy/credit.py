"""Credit-based flow control (ACK mode): Reactive Streams request(n), made cumulative.

A receiver's grant is an absolute limit: the sender may send every sequence
number below it. Grants only ever raise a limit, so a lost or reordered credit
frame is harmless (seed 004: initial demand = queue capacity; seed 000: the
slowest branch of a fan-out governs).
"""

from __future__ import annotations

import math
from typing import Any

from ..config import AckConfig
from ..errors import ConfigError, CreditViolation
from ..wire import SenderKey

#: Peers a ledger (receivers) or a granter (senders) keeps at once. Past it a newcomer
#: is refused and counted: memory stays bounded whatever ids arrive, and the peers
#: already known keep their credit.
MAX_PEERS = 4096


class CreditLedger:
    """The sender side: each receiver's cumulative limit, and what may be sent now.

    Sendable = min over live receivers of ``limit - next_seq``, never negative.
    A receiver joins on its first credit, leaves on goodbye, and is evicted after
    ``receiver_timeout_s`` without a credit. Until then a dead receiver stalls the
    sender: that is what ACK mode exists to show.
    """

    def __init__(self, config: AckConfig | None = None, *, next_seq: int = 0,
                 max_receivers: int = MAX_PEERS) -> None:
        self.config = config if config is not None else AckConfig()
        self.max_receivers = max_receivers
        self.refused = 0
        if next_seq < 0:
            raise ConfigError("next_seq must be >= 0")
        self.next_seq = next_seq
        self._limits: dict[str, int] = {}
        self._seen: dict[str, float] = {}
        # evicted or left -> whether it had granted: a HELLO re-joins only those that had
        self._departed: dict[str, bool] = {}
        self._granted: set[str] = set()  # live receivers that have sent a credit
        self._min_limit: int | None = None
        self._next_expiry = math.inf
        self.joined = 0
        self.left = 0
        self.evicted = 0
        self.disconnected = 0
        self._probe_until: float | None = None  # a connection closed: who answers by then
        self._answered: set[str] = set()
        self.credits = 0
        self.clamped = 0

    @property
    def receivers(self) -> list[str]:
        return sorted(self._limits)

    def has_granted(self, receiver: str) -> bool:
        """``receiver`` is live and has sent a credit."""
        return receiver in self._granted

    def on_credit(self, receiver: str, limit: int, *, now: float) -> None:
        """``receiver`` allows every seq below ``limit``, heard at ``now``."""
        self.credits += 1
        ceiling = self.next_seq + self.config.max_credit_ahead
        if limit > ceiling:
            self.clamped += 1
            limit = ceiling
        old = self._limits.get(receiver)
        if old is None:
            if len(self._limits) >= self.max_receivers:
                self.refused += 1
                return
            self.joined += 1
            self._limits[receiver] = limit
            self._min_limit = None
            self._departed.pop(receiver, None)
        elif limit > old:
            self._limits[receiver] = limit
            if self._min_limit is not None and old == self._min_limit:
                self._min_limit = None
        self._seen[receiver] = now
        self._granted.add(receiver)
        if self._probe_until is not None:
            self._answered.add(receiver)
        if old is None:  # a refresh only moves an expiry later: expire() rescans then
            self._next_expiry = min(self._next_expiry, now + self.config.receiver_timeout_s)

    def on_presence(self, receiver: str, *, now: float) -> None:
        """``receiver`` announced itself (HELLO) and has granted nothing yet: it joins with
        no credit, so nothing more is sent until its first grant arrives, or until it is
        evicted after ``receiver_timeout_s`` without one. Without this a sender starts on
        the first receiver's grant and overruns one whose grant is late or was lost (seen
        in the chaos run: 917 drops at the slow receiver in 10 s with 10 % of credit
        frames lost).

        A receiver evicted or gone that had granted before (a receiver restarted under
        its id) re-joins by HELLO the same way: until its first grant it gets nothing,
        as a new one would (data reaches it as soon as ZeroMQ reconnects, its first
        credit may be lost to a feedback subscription not yet made: 248 drops at a
        restarted receiver, test_faults). One that never granted re-joins only by a
        credit: its HELLOs must not stall the sender again and again."""
        if receiver in self._limits or not self._departed.get(receiver, True):
            return
        self._departed.pop(receiver, None)
        if len(self._limits) >= self.max_receivers:
            self.refused += 1
            return
        self.joined += 1
        self._limits[receiver] = self.next_seq
        self._seen[receiver] = now
        self._min_limit = None
        self._next_expiry = min(self._next_expiry, now + self.config.receiver_timeout_s)

    def suspect(self, *, now: float, within: float) -> None:
        """A receiver's connection closed (which one the transport does not say): every
        receiver not heard (``on_credit``, ``on_alive``) by ``now + within`` is evicted
        then as disconnected (``expire``)."""
        if self._probe_until is None:
            self._answered.clear()
            self._probe_until = now + within
            self._next_expiry = min(self._next_expiry, self._probe_until)

    def on_alive(self, receiver: str) -> None:
        """``receiver`` was heard (a HELLO): it answers a probe, nothing else changes."""
        if self._probe_until is not None:
            self._answered.add(receiver)

    def _depart(self, receiver: str) -> None:
        self._departed[receiver] = receiver in self._granted
        self._granted.discard(receiver)
        if len(self._departed) > MAX_PEERS:
            del self._departed[next(iter(self._departed))]

    def on_bye(self, receiver: str) -> None:
        """``receiver`` left on purpose."""
        if self._limits.pop(receiver, None) is not None:
            self._seen.pop(receiver, None)
            self._depart(receiver)
            self.left += 1
            self._min_limit = None

    def expire(self, *, now: float) -> list[tuple[str, str]]:
        """Evict receivers silent for longer than the timeout (``evicted``), and those a
        probe after a closed connection did not hear (``disconnected``); return
        ``(id, reason)`` of each."""
        if now < self._next_expiry:
            return []
        timeout = self.config.receiver_timeout_s
        gone = [(r, "evicted") for r, t in self._seen.items() if now - t >= timeout]
        self.evicted += len(gone)
        probe = self._probe_until
        if probe is not None and now >= probe:
            self._probe_until = None
            cut = [r for r, t in self._seen.items()
                   if now - t < timeout and r not in self._answered]
            self.disconnected += len(cut)
            gone += [(r, "disconnected") for r in cut]
        for r, _why in gone:
            del self._limits[r]
            del self._seen[r]
            self._depart(r)
        if gone:
            self._min_limit = None
        self._next_expiry = min(self._seen.values(), default=math.inf) + timeout
        if self._probe_until is not None:
            self._next_expiry = min(self._next_expiry, self._probe_until)
        return gone

    def sendable(self, *, now: float) -> int:
        """How many messages may be sent at ``now`` (0 until min_receivers have joined).
        Evictions due happen only in ``expire`` (the timer), which reports each: an
        eviction found here was once applied and never reported (the sender went on
        past a killed receiver, and its ReceiverLeft never came: 3 runs in 30)."""
        if not self._limits or len(self._limits) < self.config.min_receivers:
            return 0
        low = self._min_limit
        if low is None:
            low = self._min_limit = min(self._limits.values())
        return max(0, low - self.next_seq)

    def holders(self, *, now: float) -> list[tuple[str, int, float]]:
        """The receivers whose credit holds the sender at ``now`` (none left to send):
        (id, the seq their credit ends at, seconds since it came), the longest silent
        first; [] while credit is left."""
        if not self._limits:
            return []
        low = min(self._limits.values())
        if low > self.next_seq:
            return []
        held = [(r, lim, now - self._seen[r]) for r, lim in self._limits.items() if lim == low]
        return sorted(held, key=lambda h: -h[2])

    def on_sent(self, n: int, *, now: float) -> None:
        """Record ``n`` messages sent. Raises CreditViolation if not granted."""
        if n > self.sendable(now=now):
            raise CreditViolation(f"{n} messages exceed the credit granted")
        self.next_seq += n

    def unsend(self, n: int) -> None:
        """Take back ``n`` messages counted by ``on_sent`` but never sent."""
        if not 0 <= n <= self.next_seq:
            raise ValueError("cannot take back more than was counted")
        self.next_seq -= n
        self._min_limit = None

    def next_deadline(self) -> float | None:
        """The earliest eviction (None: no receivers)."""
        return None if math.isinf(self._next_expiry) else self._next_expiry

    def snapshot(self) -> dict[str, Any]:
        return {
            "receivers": len(self._limits),
            "next_seq": self.next_seq,
            "credits_received": self.credits,
            "credits_clamped": self.clamped,
            "joined": self.joined,
            "left": self.left,
            "evicted": self.evicted,
            "disconnected": self.disconnected,
            "refused": self.refused,
        }


#: A sender counts as waiting for credit while its last "I am waiting" (HELLO) is this
#: recent, s. Senders repeat HELLO every 0.1 s while they wait.
WAITING_FRESH_S = 0.5


class _SenderState:
    __slots__ = ("active_t", "granted", "granted_t", "position", "queued", "seen_t",
                 "waiting_t")

    def __init__(self, position: int, now: float) -> None:
        self.position = position
        self.queued = 0
        self.granted = -1
        self.granted_t = -math.inf
        self.seen_t = now
        self.active_t = now  # when its position last moved
        self.waiting_t = -math.inf  # when it last said it waits for credit (HELLO)


class CreditGranter:
    """The receiver side: decides the credit frames to send.

    Each sender heard gets a window of ``capacity // senders`` (seed 004: initial
    demand equals the queue capacity), at most ``max_share`` of the queue, so a sender
    that starts together with another always finds room. The limit it aims for is
    ``position - queued + window``: arrivals do not move it, releases (consumed
    or dropped) raise it, losses in flight raise it. Grants never exceed the
    queue: a sender's commitment is its unused credit plus its queued messages,
    and a grant only hands out capacity no sender is committed to. (Unused
    credit of a sender that has not sent for ``idle_credit_s`` while it says it
    waits for credit stops counting: grants cannot be revoked, and two senders
    could otherwise deadlock, each holding credit at one receiver while waiting
    at another. A sender that is merely quiet, e.g. still computing its data,
    keeps its reservation.) So when a
    second sender joins while the first holds the whole queue, the newcomer
    gets a zero grant (it must wait, and it knows this receiver exists) and its
    share as the first one's messages are consumed. A new sender is answered at
    once; after that a grant goes out once ``regrant_fraction`` of the window
    was freed, and at least every ``heartbeat_s`` as liveness. A new epoch of a sender
    id retires the older ones at once (their messages still queued keep their room): an
    id restarts only after its last incarnation died, and a crashed sender, which sends
    no END, would otherwise hold its reservation for ``sender_timeout_s`` (the chaos
    run: ACK senders stalled almost throughout a 150 s run in which senders were killed
    and restarted every few seconds).
    """

    def __init__(self, capacity_msgs: int, config: AckConfig | None = None,
                 *, sender_timeout_s: float | None = None, max_senders: int = MAX_PEERS) -> None:
        if capacity_msgs < 1:
            raise ConfigError("capacity_msgs must be >= 1")
        self.capacity_msgs = capacity_msgs
        self.config = config if config is not None else AckConfig()
        self.sender_timeout_s = (self.config.sender_timeout_s if sender_timeout_s is None
                                 else sender_timeout_s)
        self._senders: dict[SenderKey, _SenderState] = {}
        self._orphaned = 0  # queued messages of senders since forgotten
        self.max_senders = max_senders
        self.refused = 0
        self.credits_sent = 0
        self.retired = 0  # older epochs of a sender id given up when a newer one spoke

    @property
    def senders(self) -> list[SenderKey]:
        return sorted(self._senders)

    def window(self) -> int:
        """Messages each sender may have outstanding here: an even share of the queue, at
        most ``max_share`` of it."""
        even = self.capacity_msgs // max(1, len(self._senders))
        return max(1, min(even, int(self.capacity_msgs * self.config.max_share)))

    def on_sender(self, sender: SenderKey, next_seq: int, *, now: float,
                  waiting: bool = False) -> None:
        """``sender`` is heard at ``now``, about to send ``next_seq`` (HELLO or DATA);
        ``waiting``: it said it is waiting for credit (a sender repeats HELLO then)."""
        st = self._senders.get(sender)
        if st is None:
            older = [k for k in self._senders if k[0] == sender[0] and k[1] < sender[1]]
            for key in older:  # a sender id restarts only once its last incarnation died
                self.on_sender_gone(key)
                self.retired += 1
            if len(self._senders) >= self.max_senders:
                self.refused += 1  # it gets no credit until others leave or time out
                return
            st = self._senders[sender] = _SenderState(next_seq, now)
            if waiting:
                st.waiting_t = now
            return
        st.seen_t = now
        if waiting:
            st.waiting_t = now
        if next_seq > st.position:
            st.position = next_seq
            st.active_t = now

    def on_enqueued(self, sender: SenderKey, n: int) -> None:
        st = self._senders.get(sender)
        if st is not None:
            st.queued += n
        else:  # read before its END but queued after: it takes room all the same
            self._orphaned += n

    def on_released(self, sender: SenderKey, n: int) -> None:
        """``n`` of ``sender``'s messages left the queue (consumed or dropped)."""
        st = self._senders.get(sender)
        if st is not None:
            st.queued = max(0, st.queued - n)
        else:
            self._orphaned = max(0, self._orphaned - n)

    def on_sender_gone(self, sender: SenderKey) -> None:
        """``sender`` ended; its messages still queued keep their room until released."""
        st = self._senders.pop(sender, None)
        if st is not None:
            self._orphaned += st.queued

    def limit_for(self, sender: SenderKey) -> int | None:
        """The limit ``sender`` aims for (its fair window), before the capacity check."""
        st = self._senders.get(sender)
        return None if st is None else st.position - st.queued + self.window()

    def poll(self, *, now: float) -> list[tuple[SenderKey, int]]:
        """Credits due at ``now``: (sender, cumulative limit) pairs to send."""
        stale = [k for k, st in self._senders.items() if now - st.seen_t > self.sender_timeout_s]
        for key in stale:
            self._orphaned += self._senders.pop(key).queued
        window = self.window()
        step = max(1, int(window * self.config.regrant_fraction))
        heartbeat = self.config.heartbeat_s
        idle = self.config.idle_credit_s
        committed = sum(st.queued + (0 if (now - st.active_t >= idle
                                           and now - st.waiting_t < WAITING_FRESH_S)
                                     else max(0, st.granted - st.position))
                        for st in self._senders.values())
        free = self.capacity_msgs - self._orphaned - committed
        due: list[tuple[SenderKey, int]] = []
        for key, st in self._senders.items():
            base = max(st.granted, st.position)  # already promised
            extra = min(st.position - st.queued + window - base, free)
            limit = base + extra if extra > 0 else base
            if (limit - st.granted >= step or st.granted < 0
                    or now - st.granted_t >= heartbeat):
                free -= limit - base
                st.granted = limit
                st.granted_t = now
                due.append((key, limit))
        self.credits_sent += len(due)
        return due

    def next_deadline(self) -> float | None:
        """The next heartbeat grant (None: no senders)."""
        if not self._senders:
            return None
        return min(st.granted_t for st in self._senders.values()) + self.config.heartbeat_s

    def snapshot(self) -> dict[str, Any]:
        return {"senders": len(self._senders), "credits_sent": self.credits_sent,
                "window": self.window(), "senders_refused": self.refused,
                "epochs_retired": self.retired}


from .._speedups import use_compiled  # noqa: E402

use_compiled(globals())
