"""How a receiver's streams end (sans-I/O): the senders heard, the ENDs of their streams,
those that left without one, and the RECEIPT each END is owed once its stream is settled
here. ``ReceiverCore`` owns one and sends the receipts it hands out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from ..wire import SenderKey
from ..wire.codec import Receipt
from .roster import remember


class StreamEndings:
    """``ends``: final seq per ended stream; ``settled``: ended streams settled here (their
    RECEIPT made: nothing still asked for), whether complete and when, and
    ``complete_ids``: how many complete ones each sender id has; ``left``: streams whose
    sender left without END (aborted), and when; all bounded by ``max_streams``, like the
    sequence tracker."""

    def __init__(self, stream: str, receiver_id: str, max_streams: int) -> None:
        self.stream, self.receiver_id, self.max_streams = stream, receiver_id, max_streams
        self.ends: dict[SenderKey, int] = {}
        self.settled: dict[SenderKey, tuple[bool, float]] = {}
        self.complete_ids: dict[str, int] = {}
        self.left: dict[SenderKey, float] = {}
        self._hellos: dict[SenderKey, None] = {}  # senders heard saying HELLO
        #: streams whose END came and whose RECEIPT is due once they are settled here
        self._due: dict[SenderKey, None] = {}
        self.receipts_sent = 0
        self.changed = False  # ``ends`` or ``left`` changed since the driver's queue heard

    def on_hello(self, key: SenderKey) -> None:
        if key not in self._hellos:
            remember(self._hellos, key, self.max_streams)

    def on_end(self, key: SenderKey, final_seq: int, *, tracked: bool) -> bool:
        """END of ``key`` (``tracked``: the tracker had its stream before this END): True
        if it is news (``events.StreamEnded``). Every END of a stream heard here (a repeat
        too: the sender did not get the receipt) is answered once the stream is settled
        (``receipts``); a made-up sender's END gets nothing."""
        if not (key in self._hellos or tracked):
            return False
        remember(self._due, key, self.max_streams)
        if key in self.ends:
            return False
        self.ends[key] = final_seq
        if len(self.ends) > self.max_streams:
            del self.ends[next(iter(self.ends))]
        self.changed = True
        return True

    def on_bye(self, key: SenderKey, now: float, *, tracked: bool) -> bool:
        """The sender of ``key`` left at ``now``: True if it left without END
        (``events.SenderLeft``): its stream stays incomplete. After END this changes
        nothing."""
        if key in self.ends or key in self.left or not (key in self._hellos or tracked):
            return False
        self.left[key] = now
        if len(self.left) > self.max_streams:
            del self.left[next(iter(self.left))]
        self.changed = True
        return True

    def heard(self) -> Iterable[SenderKey]:
        """Streams heard saying HELLO (a sender before its first DATA too)."""
        return self._hellos

    def __contains__(self, key: object) -> bool:
        """``key`` ended, or its sender left: its stream is settled here."""
        return key in self.ends or key in self.left

    @property
    def receipts_due(self) -> bool:
        return bool(self._due)

    def receipts(self, streams: dict[SenderKey, Any], asking: Collection[SenderKey],
                 entering: Collection[SenderKey], now: float,
                 wall_now: float) -> list[Receipt]:
        """A RECEIPT for each ended stream that is settled here: nothing of it still asked
        for (not in ``asking``: streams with gaps), nothing of it still waiting to enter
        the queue (``entering``). It says what the stream lacks here for good (all zeros:
        complete). ``streams``: the tracker's, by key."""
        out, due = [], self._due
        for key in list(due):
            st = streams.get(key)
            if st is None or st.final_seq is None:  # forgotten meanwhile (max_streams)
                del due[key]
                continue
            if key in asking or key in entering:
                continue
            del due[key]
            lacks = (st.lost, st.dropped, st.beyond_history, st.missed_before_join)
            out.append(Receipt(self.stream, self.receiver_id, key[0], key[1], st.final_seq,
                               lacks, wall_now))
            if key not in self.settled:
                self._settle(key, not any(lacks), now)
        self.receipts_sent += len(out)
        return out

    def _settle(self, key: SenderKey, complete: bool, now: float) -> None:
        """``key`` ended and is settled here (``complete`` or for good without some of
        it): what a wait for N senders counts (``core.silence``)."""
        self.settled[key] = (complete, now)
        ids = self.complete_ids
        if complete:
            ids[key[0]] = ids.get(key[0], 0) + 1
        if len(self.settled) > self.max_streams:
            oldest = next(iter(self.settled))
            if self.settled.pop(oldest)[0]:
                if ids[oldest[0]] == 1:
                    del ids[oldest[0]]
                else:
                    ids[oldest[0]] -= 1
        self.changed = True
