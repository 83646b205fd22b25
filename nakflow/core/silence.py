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

What counts as finished (``counted``, for ``--senders N`` and ``Receiver.messages``): the
silent streams only once no other stream is live. Made-up DATA frames (an open channel
without a shared key) are streams that never speak again; counted at once, a flood of
them ended a receiver's wait while the real sender was still sending (the memory test's
flood, CI).
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from typing import Any

from ..wire import SenderKey

#: How often the streams are looked at, s (at most; the core's HELLO timer sets the pace).
LOOK_S = 0.5


class SenderSilence:
    """Which streams' senders fell silent. ``gone_s`` None: never judged."""

    def __init__(self, gone_s: float | None, now: float) -> None:
        self.gone_s = gone_s
        self.next_look = now + LOOK_S if gone_s is not None else math.inf
        #: per stream: the tracker's frame count at the last look, when it last moved
        self._heard: dict[SenderKey, tuple[int, float]] = {}
        self.silent: set[SenderKey] = set()  # streams taken as gone
        self.live = 0  # at the last look: streams with DATA, not settled, not silent
        self.gone_total = self.back_total = 0
        self.changed = False  # ``counted`` changed since the core last told its queue

    @property
    def counted(self) -> int:
        """Silent streams that count as finished: all of them once no stream is live."""
        return 0 if self.live else len(self.silent)

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
        self.back_total += 1
        self.changed = True
        return True

    def look(self, streams: Mapping[SenderKey, Any], settled: Container[SenderKey],
             now: float) -> tuple[list[SenderKey], list[SenderKey]]:
        """(streams whose sender fell silent, streams taken as gone whose sender is heard
        again). ``streams``: the tracker's (``frames``, ``final_seq``); ``settled``:
        streams that ended or whose sender left (BYE): never judged."""
        gone: list[SenderKey] = []
        back: list[SenderKey] = []
        if self.gone_s is None or now < self.next_look:
            return gone, back
        self.next_look = now + LOOK_S
        heard, limit, silent = self._heard, self.gone_s, self.silent
        counted = self.counted
        for key in [k for k in heard if k not in streams]:  # forgotten (max_streams)
            del heard[key]
            silent.discard(key)
        live = 0
        for key, st in streams.items():
            if not st.frames or st.final_seq is not None or key in settled:
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
        if self.counted != counted:
            self.changed = True
        return gone, back
