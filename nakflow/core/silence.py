"""Senders that fell silent (sans-I/O): a stream whose sender has said nothing for
``sender_gone_s`` is taken to have left without END, as if it had said BYE.

A live sender is never silent for long once it has sent data: DATA while it sends, and
while it is idle (the application away, or waiting for rate or credit) its timer
announces the last seq at least every ``tail.ANNOUNCE_MAX_S`` (1 s); while it closes it
repeats END. A killed one (SIGKILL, a lost host, a cut cable) says nothing again, and a
receiver waiting for ``--senders N`` to finish waited for it for ever. A stream of which
no DATA came yet is not judged: a sender between its HELLO and its first message (a Spark
task waiting for its first rows) has nothing to announce.

``ReceiverCore`` looks every ``LOOK_S`` (with its HELLO): per stream it keeps how many
frames the tracker had counted and when that count last moved (DATA and repairs), and
the last HELLO or announcement heard (``on_sign``). Silence counts only while the
receiver listens: at a look where it is not reading its data channel (a full queue, a
consumer stalled), has not emptied it, or woke late (the process stopped), every
stream's silence starts again (``deaf``): what it did not read is not the senders'
silence. A stream taken as gone whose sender is heard again is back: it was paused, not
killed.

What counts as finished, for ``--senders N`` and ``Receiver.messages`` (``finished``):
sender ids, not streams. An id is finished once one of its epochs ended complete here
(END, every message delivered or queued: a Spark task and its speculative copy may both
get there), or once its newest epoch is over without that and no stream is live: one
that fell silent at once then; one whose sender said BYE without END (an aborted
attempt, a stopped ``nakflow send``), or that ended without some of its messages for
good, once nothing was live for RETRY_WAIT_S since (in ``none`` an incomplete END at
once: nothing retries it), so that a failed Spark task's retry, a newer epoch of the
same id, takes its place. A task fails for both: an exception aborts it, and a close
that finds a live receiver short of rows fails it (``IncompleteDelivery``) so that the
retry brings them. Once counted an id stays counted until a newer epoch of it is heard.
Counted as a stream at once, such an attempt ended a ``--senders 2`` receiver's
wait with the other task's END, before the retry began. Made-up DATA frames (an open
channel without a shared key) are streams that never speak again; counted at once, a
flood of them ended a receiver's wait while the real sender was still sending (the
memory test's flood, CI). A sender that left by BYE before it sent anything is not
over at all (``began``): a ``nakflow send`` that gave up waiting for receivers (one of
its endpoints mistyped) ended a ``--senders 1`` receiver's wait 3 s later, before the
corrected one was started.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..wire import SenderKey
from .endings import StreamEndings

#: How often the streams are looked at, s (at most; the core's HELLO timer sets the pace).
LOOK_S = 0.5
#: A sender that left without END counts as finished once no stream was live for this
#: long since it left, s, unless a newer epoch of its id was heard meanwhile: a failed
#: Spark task's retry. The retry's first message came 0.29-0.71 s after the failed
#: attempt's BYE on ``local[2,4]`` and 0.61-1.39 s on ``local-cluster[2,1,1024]`` (three
#: runs each of ``tests/test_spark_adapter.py``'s failed task, 2026-12-06): about twice
#: the longest.
RETRY_WAIT_S = 3.0


class SenderSilence:
    """Which streams' senders fell silent. ``gone_s`` None: never judged."""

    def __init__(self, gone_s: float | None, now: float, *, retried: bool = True) -> None:
        self.gone_s = gone_s
        self.retried = retried  # an incomplete END may be retried (nak, ack; not none)
        self.next_look = now + LOOK_S
        #: per stream: the tracker's frame count at the last look, when it last moved
        self._heard: dict[SenderKey, tuple[int, float]] = {}
        self.silent: set[SenderKey] = set()  # streams taken as gone
        self.live = 0  # at the last look: streams with DATA, not settled, not silent
        self.live_at = now  # the last look at which a stream was live
        self.left_ids: set[str] = set()  # ids finished without END (module docstring)
        self.gone_total = self.back_total = 0
        self.changed = False  # ``left_ids`` changed since the core last told its queue

    def finished(self, complete_ids: Collection[str]) -> int:
        """Sender ids finished: those with a complete epoch, and those counted without
        one (``left_ids``)."""
        return len(complete_ids) + sum(1 for sid in self.left_ids if sid not in complete_ids)

    def on_sign(self, key: SenderKey, now: float) -> None:
        """A HELLO or an announcement of ``key``'s sender: it is there."""
        if self.gone_s is not None and key in self._heard:
            self._heard[key] = (-1, now)  # -1: the next look sees the count moved

    def deaf(self, now: float) -> None:
        """The receiver is not listening now: every stream's silence starts again."""
        heard = self._heard
        for key, (count, _) in heard.items():
            heard[key] = (count, now)

    def heard_again(self, key: SenderKey) -> bool:
        """``key``'s sender spoke (DATA, END): True if it had been taken as gone."""
        if key not in self.silent:
            return False
        self.silent.discard(key)
        self.left_ids.discard(key[0])  # live again: not finished
        self.back_total += 1
        self.changed = True
        return True

    def look(self, streams: Mapping[SenderKey, Any], endings: StreamEndings,
             now: float) -> tuple[list[SenderKey], list[SenderKey]]:
        """(streams whose sender fell silent, streams taken as gone whose sender is heard
        again). ``streams``: the tracker's (``frames``, ``final_seq``); streams that ended
        or whose sender left (BYE, ``endings``) are never judged."""
        gone: list[SenderKey] = []
        back: list[SenderKey] = []
        if now < self.next_look:
            return gone, back
        self.next_look = now + LOOK_S
        heard, silent = self._heard, self.silent
        limit = math.inf if self.gone_s is None else self.gone_s
        for key in [k for k in heard if k not in streams]:  # forgotten (max_streams)
            del heard[key]
            silent.discard(key)
        live = 0
        for key, st in streams.items():
            if not st.frames or st.final_seq is not None or key in endings:
                silent.discard(key)  # its BYE came after all: counted as left there
                continue
            seen = heard.get(key)
            if seen is None or seen[0] != st.frames:
                heard[key] = (st.frames, now if seen is None or seen[0] != -1 else seen[1])
                if self.heard_again(key):
                    back.append(key)
                live += 1
                continue
            if key in silent:
                continue
            if now - seen[1] >= limit:
                silent.add(key)
                self.gone_total += 1
                gone.append(key)
            else:
                live += 1
        self.live = live
        if live:
            self.live_at = now
        self._count_left(streams, endings, now)
        return gone, back

    def _count_left(self, streams: Mapping[SenderKey, Any], endings: StreamEndings,
                    now: float) -> None:
        """The ids that count as finished without a complete epoch (module docstring). Once
        counted an id stays counted (a stream that starts later does not undo it) until a
        newer epoch of it is heard, or its silent one speaks again (``heard_again``)."""
        over = {key: at for key, (complete, at) in endings.settled.items() if not complete}
        over.update((key, at) for key, at in endings.left.items() if began(streams.get(key)))
        left_ids: set[str] = set()
        if over or self.silent:
            newest = newest_epochs(streams, endings.heard(), over, self.silent)
            left_ids = {sid for sid in self.left_ids if sid in newest
                        and ((sid, newest[sid]) in over or (sid, newest[sid]) in self.silent)}
            if not self.live:
                quiet_since = self.live_at
                for (sid, epoch), at in over.items():
                    wait = RETRY_WAIT_S if self.retried or (sid, epoch) in endings.left else 0.0
                    if newest[sid] == epoch and now - max(at, quiet_since) >= wait:
                        left_ids.add(sid)
                left_ids.update(sid for sid, epoch in self.silent if newest[sid] == epoch)
        if left_ids != self.left_ids:
            self.left_ids = left_ids
            self.changed = True


    def live_streams(self, streams: Mapping[SenderKey, Any],
                     endings: StreamEndings) -> list[SenderKey]:
        """Streams still going: DATA heard, no END, their sender neither left nor taken as
        silent, and no newer epoch of its id heard (a restart or a retry replaced it: a
        killed one says nothing more). One before its first message is not counted: it
        may have been killed. ``streams``: the tracker's."""
        newest = newest_epochs(streams, endings.heard())
        return [key for key, st in streams.items()
                if st.frames and st.final_seq is None and key not in endings
                and key not in self.silent and newest[key[0]] == key[1]]


def newest_epochs(*keys: Iterable[SenderKey]) -> dict[str, int]:
    """The newest epoch of each sender id in ``keys``."""
    newest: dict[str, int] = {}
    for some in keys:
        for sid, epoch in some:
            if newest.get(sid, -1) < epoch:
                newest[sid] = epoch
    return newest


def began(st: Any) -> bool:
    """The tracker's stream ``st`` (None: not tracked) got a message, or its sender said
    it had sent some. One that left by BYE before that (a ``nakflow send`` whose wait for
    receivers ran out: a mistyped endpoint) is not over: a finished sender is one that
    sent, and the one started after it with the right endpoints is still to come."""
    return st is not None and (st.frames > 0 or st.next_seq > 0)
