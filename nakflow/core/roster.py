"""The receivers a sender has heard, sans-I/O: present now, answered its HELLO, ever
seen; and the group round-trip time from their answers. Never used for flow control in
``nak`` (the sender does not track its receivers there); it feeds readiness, the
verdict ("nobody answered") and the RTT that DATA frames advertise."""

from __future__ import annotations

from typing import Any

#: Receivers remembered by id; past it the least recently heard is forgotten, so made-up
#: ids cannot grow memory.
MAX_PEERS = 4096
MAX_RTT_S = 10.0  # a longer "round trip" is a wrong or forged echo
RTT_PEERS = 64  # the group RTT is the largest sample of this many receivers, at most


def remember(peers: dict[Any, None], key: Any, cap: int = MAX_PEERS) -> None:
    """Insert ``key`` as the most recent; past ``cap`` forget the least recent."""
    peers.pop(key, None)
    peers[key] = None
    if len(peers) > cap:
        del peers[next(iter(peers))]


class ReceiverRoster:
    """``present``: heard, not gone (BYE); ``answered``: echoed our HELLO; ``seen``: how
    many distinct ones were ever heard; ``rtt_s``: the group RTT (None: not measured);
    ``last_heard``: when each was last heard, by any frame (least recently heard first);
    ``receipts``: those that said they answer END with a RECEIPT; ``left``: those that
    said BYE (and were not heard since)."""

    def __init__(self) -> None:
        #: ids that answered one HELLO from two receivers (two incarnations): receivers
        #: started with one id, which this sender counts as one (``on_answer``)
        self.clashes: dict[str, None] = {}
        self._answers: dict[tuple[str, float], int] = {}  # (id, stamp) -> incarnation
        self.present: dict[str, None] = {}
        self.answered: dict[str, None] = {}
        self._ever: dict[str, None] = {}
        self.seen = 0
        self._rtt_of: dict[str, float] = {}  # receiver -> latest RTT sample, oldest first
        self.rtt_s: float | None = None
        self.last_heard: dict[str, float] = {}
        self.receipts: dict[str, None] = {}
        self.left: dict[str, None] = {}

    def heard(self, node: str, now: float) -> None:
        """A frame from receiver ``node`` arrived at ``now`` (it is alive)."""
        heard = self.last_heard
        heard.pop(node, None)
        heard[node] = now
        if len(heard) > MAX_PEERS:
            del heard[next(iter(heard))]

    def on_hello(self, node: str, *, echoes_us: bool, rtt_s: float,
                 receipts: bool = False) -> bool:
        """A receiver's HELLO; ``echoes_us``: it answers ours, after ``rtt_s``;
        ``receipts``: it says it sends receipts. True if it is the first answer from
        ``node``."""
        remember(self.present, node)
        self.left.pop(node, None)
        if receipts:
            remember(self.receipts, node)
        if node not in self._ever:
            remember(self._ever, node)
            self.seen += 1
        if not echoes_us:
            return False
        first = node not in self.answered
        remember(self.answered, node)
        self._sample(node, rtt_s)
        return first

    def on_answer(self, node: str, stamp: float, incarnation: int) -> bool:
        """Receiver ``node`` in ``incarnation`` answered this sender's HELLO of ``stamp``.
        True if another incarnation answered that same HELLO under the same id: two
        receivers share it (one receiver reached twice answers twice in one incarnation;
        one restarted answers later HELLOs in its new one). 0: not said (older receiver)."""
        if not incarnation:
            return False
        key = (node, stamp)
        other = self._answers.get(key)
        if other is None:
            self._answers[key] = incarnation
            if len(self._answers) > MAX_PEERS:
                del self._answers[next(iter(self._answers))]
            return False
        if other == incarnation or node in self.clashes:
            return False
        remember(self.clashes, node, RTT_PEERS)
        return True

    def on_bye(self, node: str) -> bool:
        """True if ``node`` was present (then it counts as ``left``)."""
        if self.present.pop(node, 0) is None:
            remember(self.left, node)
            return True
        return False

    def _sample(self, node: str, rtt_s: float) -> None:
        """The group RTT is the largest of the latest samples of the RTT_PEERS receivers
        heard last (implausible ones, e.g. a forged echo, are left out)."""
        if not 0.0 <= rtt_s <= MAX_RTT_S:
            return
        rtts = self._rtt_of
        rtts.pop(node, None)
        rtts[node] = rtt_s
        if len(rtts) > RTT_PEERS:
            del rtts[next(iter(rtts))]
        self.rtt_s = max(rtts.values())
