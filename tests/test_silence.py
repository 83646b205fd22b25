"""A sender that falls silent without END (killed, cut off) is taken to have left after
``ReceiverConfig.sender_gone_s``; a live one never is, however long it idles, and a
receiver that is not listening judges no one. The real cores over the simulator's link
(``SimLink``, virtual time); then a killed ``nakflow send`` and the receiver that waited
for it.

Before, a receiver learnt that a sender had left only from its BYE: a killed sender's
receiver, waiting for ``--senders 1``, waited for ever (``Receiver.messages`` until its
timeout).
"""

from __future__ import annotations

import logging
import random
import signal
import subprocess
import sys
import time
import urllib.request

from nakflow import ReceiverConfig, ReceiverCore, SenderConfig, SenderCore
from nakflow.core.silence import LOOK_S
from nakflow.events import SenderLeft
from nakflow.report import receiver_verdict
from nakflow.testing import free_port
from simulations.cores import SimLink

GONE_S = 3.0


class Pair:
    """One sender, one receiver (``gone_s``, ``overflow``) over SimLink in 1 ms steps."""

    def __init__(self, *, overflow: str = "drop-newest", capacity: int = 2_000) -> None:
        self.tx = SenderCore(SenderConfig(mode="nak", stream="s", sender_id="tx", epoch=1,
                                          frame_msgs=16), now=0.0)
        self.rx = ReceiverCore(ReceiverConfig(mode="nak", stream="s", receiver_id="rx",
                                              capacity_msgs=capacity, overflow=overflow,
                                              sender_gone_s=GONE_S),
                               now=0.0, rng=random.Random(1))
        self.link = SimLink([self.tx], [self.rx], rng=random.Random(2))
        self.queue = self.link.queues[0]
        self.events: list[object] = []
        self.delivered = 0

    @property
    def now(self) -> float:
        return self.link.now

    def run(self, seconds: float, *, send_per_ms: int = 0, consume: bool = True,
            stopped: bool = False) -> None:
        """``seconds`` of steps; the sender (while it is on the link) offers
        ``send_per_ms`` messages a step; the receiver consumes unless told not to, and
        neither reads nor consumes while ``stopped``."""
        for _ in range(round(seconds * 1000)):
            t = self.now
            if self.tx in self.link.senders and not self.tx.closed:
                for _ in range(send_per_ms):
                    if self.tx.offer(b"m", t):  # not admitted: the limit says wait
                        break
                self.tx.flush(t)
            self.link.stopped[0] = stopped
            if consume and not stopped:
                self.delivered += len(self.queue.take(1_000, 0))
            self.link.step()
            while (ev := self.rx.next_event()) is not None:
                self.events.append(ev)

    def left(self) -> list[SenderLeft]:
        return [e for e in self.events if isinstance(e, SenderLeft)]

    def kill_sender(self) -> None:
        self.link.senders.remove(self.tx)  # says nothing again; what it sent still arrives

    def revive_sender(self) -> None:
        self.link.senders.append(self.tx)

    def ends_whole(self) -> None:
        """END, then 2 s: no one was taken as gone, and the stream is complete here."""
        self.tx.close(self.now)
        self.run(2.0)
        assert self.left() == [] and self.rx.silence.gone_total == 0
        assert self.stream()["status"] == "complete" and self.delivered == self.tx.sent

    def stream(self) -> dict[str, object]:
        (row,) = [r for r in self.rx.tracker.per_sender() if r["sender"] == "tx"]
        return row


def test_a_killed_sender_is_gone_after_sender_gone_s_and_its_stream_ends_incomplete():
    p = Pair()
    p.run(1.0, send_per_ms=5)
    p.kill_sender()
    killed_at = p.now
    while not p.left() and p.now < killed_at + 30:
        p.run(0.01)
    (left,) = p.left()
    assert (left.sender, left.epoch, left.why) == ("tx", 1, "silent")
    # its last frames arrived a round trip after it died; a look every LOOK_S
    assert killed_at + GONE_S <= p.now <= killed_at + GONE_S + 2 * LOOK_S + 0.1
    assert p.queue.finished() == 1  # what --senders N and Receiver.messages count
    snap = p.rx.snapshot(p.now)
    assert snap["senders_silent"] == 1 and p.stream()["status"] == "incomplete"
    verdict = receiver_verdict(snap, expect_senders=1)
    assert any(f"fell silent, nothing heard for {GONE_S:g} s" in line
               for line in verdict.problems), verdict


def test_a_silent_stream_counts_as_finished_only_once_no_other_stream_is_live():
    """A made-up DATA frame is a stream that never speaks again: counted as finished at
    once, it ended a receiver's wait for ``--senders 1`` while the real sender still sent
    (the memory test's flood). A stranger's frame goes silent beside the real stream; the
    real one's END then finishes it, and only then does the silent one count too."""
    from nakflow.wire.codec import Data, encode

    p = Pair()
    p.run(0.2, send_per_ms=1)
    stranger = encode(Data("s", "mallory", 7, 0, 0.0, (b"junk",)))
    p.link.inject(0, stranger)
    p.run(GONE_S + 2 * LOOK_S + 0.2, send_per_ms=1)
    assert [(e.sender, e.why) for e in p.left()] == [("mallory", "silent")]
    assert p.queue.finished() == 0  # the real sender still sends
    p.tx.close(p.now)
    p.run(2.0)
    assert p.queue.finished() == 2 and p.rx.snapshot(p.now)["senders_silent"] == 1


def test_a_flood_of_silent_strangers_is_counted_not_logged_line_by_line(caplog):
    """Each made-up DATA frame is a stream that falls silent. A warning each filled the
    stderr pipe of the memory test's receiver (74,035 bytes, 257 lines) and its I/O
    thread blocked on the write for 5 s: the sender took it for gone. The first
    SILENCE_WARNINGS are named, then one line says the rest are counted."""
    from nakflow.core.receiver_core import SILENCE_WARNINGS
    from nakflow.wire.codec import Data, encode

    p = Pair()
    p.run(0.2, send_per_ms=1)
    for i in range(100):
        p.link.inject(0, encode(Data("s", f"mallory-{i}", 7, 0, 0.0, (b"junk",))))
    with caplog.at_level(logging.WARNING):
        p.run(GONE_S + 2 * LOOK_S + 0.2, send_per_ms=1)
    said = [r.getMessage() for r in caplog.records if "silent" in r.getMessage()]
    assert len(p.left()) == 100 and p.rx.snapshot(p.now)["senders_silent"] == 100
    assert len(said) == SILENCE_WARNINGS + 1 and "no longer logged" in said[-1]


def test_a_live_sender_is_never_gone_however_long_it_idles():
    """Idle for 5x sender_gone_s between two bursts (its timer announces the last seq at
    least every second), then END: complete, and no one left."""
    p = Pair()
    p.run(0.5, send_per_ms=5)
    p.run(5 * GONE_S)
    p.run(0.5, send_per_ms=5)
    p.ends_whole()


def test_a_receiver_that_is_not_listening_judges_no_one():
    """A receiver stopped for 3x sender_gone_s (the sender sends on, its frames wait on
    the link), then one whose consumer stalls as long under ``block`` (its full queue
    reads nothing while the sender waits): what it did not read was not the sender's
    silence. Both end complete, no one left."""
    p = Pair()
    p.run(0.5, send_per_ms=2)
    p.run(3 * GONE_S, send_per_ms=2, stopped=True)
    p.run(2.0, send_per_ms=2)
    p.ends_whole()
    p = Pair(overflow="block", capacity=500)
    p.run(0.5, send_per_ms=5)
    p.run(3 * GONE_S, send_per_ms=5, consume=False)
    p.run(3.0, send_per_ms=5)
    p.ends_whole()


def test_a_sender_taken_as_gone_and_heard_again_is_back_and_counted_once():
    """Paused (SIGSTOP) for longer than sender_gone_s: gone, then back when it sends again,
    and its END counts it finished once."""
    p = Pair()
    p.run(0.5, send_per_ms=5)
    p.kill_sender()
    p.run(GONE_S + 2 * LOOK_S + 0.5)
    assert [e.why for e in p.left()] == ["silent"] and p.queue.finished() == 1
    p.revive_sender()
    p.run(1.0, send_per_ms=5)
    assert p.queue.finished() == 0 and p.rx.silence.back_total == 1
    p.tx.close(p.now)
    p.run(2.0)
    assert p.queue.finished() == 1 and p.rx.snapshot(p.now)["senders_silent"] == 0
    assert p.stream()["status"] == "complete" and p.delivered == p.tx.sent


def _delivered(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=5) as page:
        text = page.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("nakflow_messages_delivered"))


def test_a_receiver_waiting_for_a_killed_sender_ends_with_a_verdict():
    """``nakflow receive --senders 1`` and a ``nakflow send`` killed by SIGKILL once the
    receiver has its first messages: the receiver exits 1 about --sender-gone later,
    saying the sender fell silent. Before, it waited for ever."""
    data, fb, metrics = (free_port() for _ in range(3))
    cmd = [sys.executable, "-m", "nakflow"]
    rx = subprocess.Popen([*cmd, "receive", "--data", f"tcp://127.0.0.1:{data}", "--feedback",
                           f"tcp://127.0.0.1:{fb}", "--senders", "1", "--sender-gone", "1",
                           "--metrics-port", str(metrics)], stderr=subprocess.PIPE, text=True)
    tx = None
    try:
        assert rx.stderr is not None and "ready" in rx.stderr.readline()
        tx = subprocess.Popen([*cmd, "send", "--data", f"tcp://127.0.0.1:{data}", "--feedback",
                               f"tcp://127.0.0.1:{fb}", "--count", "10000000", "--max-rate",
                               "2000"], stderr=subprocess.DEVNULL)
        url, end = f"http://127.0.0.1:{metrics}/metrics", time.monotonic() + 60
        while _delivered(url) == 0:  # a stream with no DATA yet is not judged
            assert tx.poll() is None and time.monotonic() < end, "nothing delivered"
            time.sleep(0.05)
        tx.send_signal(signal.SIGKILL)
        tx.wait(30)
        err = rx.communicate(timeout=60)[1]
    finally:
        for proc in (tx, rx):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert rx.returncode == 1, err
    assert "fell silent without END: nothing heard for 1 s" in err
    assert "(all fell silent, nothing heard for 1 s: killed, or cut off)" in err


def test_live_senders_away_from_their_application_are_never_taken_as_gone():
    """The threaded and the asyncio sender, their application away for 3x sender_gone_s
    between two bursts: their timers announce the last seq, so a receiver that takes a
    sender as gone after 1 s of silence never does. Both streams complete."""
    import asyncio

    from nakflow import AsyncSender, Receiver, Sender

    events: list[object] = []
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", sender_gone_s=1.0,
                  on_event=events.append) as rx:
        eps = rx.data_endpoints, rx.feedback_endpoints
        with Sender(*eps) as tx:
            tx.wait_for_receivers(1)
            for i in range(100):
                tx.send(b"%d" % i)
            time.sleep(3.0)  # the application is away: the state under test, not a sync
            for i in range(100):
                tx.send(b"%d" % i)

        async def aio() -> None:
            async with AsyncSender(*eps) as atx:
                await atx.wait_for_receivers(1)
                for i in range(100):
                    await atx.send(b"%d" % i)
                await asyncio.sleep(3.0)  # the application awaits something else
                for i in range(100):
                    await atx.send(b"%d" % i)

        asyncio.run(aio())
        got = list(rx.messages(senders=2, timeout=30))
        snap = rx.snapshot()
    assert [e for e in events if isinstance(e, SenderLeft)] == []
    assert len(got) == 400 and snap["senders_silent"] == 0
    assert [s["status"] for s in snap["senders"]] == ["complete", "complete"]
