"""Natural batching: ``send(msg)`` in a loop coalesced into DATA frames behind the API.

The frame builder alone (sans-I/O, time passed in), then a live Sender and Receiver over
real ZeroMQ sockets: bounds, the linger timer, flush/close, ordering across send,
send_batch and try_send, the rate limit and credit still holding per message, and an
oversized payload refused without losing anything else.
"""

from __future__ import annotations

import re
import time

import pytest

from nakflow import ConfigError, LocalProtocolError, NakConfig, SenderConfig, SenderCore
from nakflow.core.batch import (
    ADDED,
    FIRST,
    FRAME_OVERHEAD,
    NO_ROOM,
    PER_PAYLOAD_OVERHEAD,
    SEND,
    FrameBatcher,
)
from nakflow.live.receiver import Receiver
from nakflow.live.sender import Sender
from nakflow.policy.bucket import TokenBucket


def batcher(**kw) -> FrameBatcher:
    args = {"linger_s": 0.001, "max_msgs": 4, "max_bytes": 1_000,
            "max_frame_bytes": 1 << 20, "names_bytes": 10} | kw
    return FrameBatcher(**args)


# -- the frame builder, sans-I/O ---------------------------------------------------------
def test_a_message_after_an_idle_spell_leaves_at_once_then_messages_coalesce():
    b = batcher()
    assert b.offer(b"a", 10.0) == SEND  # nothing left within the linger: no one to wait for
    b.take(10.0)
    assert b.offer(b"b", 10.0002) == FIRST  # the last frame left 0.2 ms ago: wait
    assert b.offer(b"c", 10.0005) == ADDED
    assert b.deadline() == pytest.approx(10.0012)
    assert b.offer(b"d", 10.0012) == SEND  # the first one has waited its linger
    assert b.take(10.0012) == ([b"b", b"c", b"d"], 10.0002)  # stamped with the first's time
    assert b.deadline() is None and len(b) == 0


def test_the_message_and_byte_bounds_close_a_frame():
    b = batcher(linger_s=10.0)
    b.take(0.0)
    assert [b.offer(bytes([i]), 1.0) for i in range(4)] == [FIRST, ADDED, ADDED, SEND]
    b.take(1.0)
    big = b"x" * (500 - PER_PAYLOAD_OVERHEAD)
    assert b.offer(big, 1.0) == FIRST
    assert b.offer(big, 1.0) == SEND  # 1,000 payload bytes: the byte bound
    b.take(1.0)
    b.offer(big, 1.0)
    assert b.offer(b"y" * 600, 1.0) == NO_ROOM  # would break the byte bound: send first
    assert b.payloads == [big]


def test_a_payload_no_frame_can_hold_is_refused_and_the_frame_is_kept():
    b = batcher(max_frame_bytes=FRAME_OVERHEAD + 10 + 100, max_bytes=10_000, linger_s=10.0)
    b.take(0.0)
    b.offer(b"kept", 1.0)
    assert b.max_payload == 100 - PER_PAYLOAD_OVERHEAD
    with pytest.raises(ValueError, match="exceeds max_frame_bytes"):
        b.offer(b"z" * 96, 1.0)
    assert b.payloads == [b"kept"] and b.max_bytes <= 100
    b.take(1.0)
    with pytest.raises(ValueError):
        b.offer(b"z" * 96, 1.0)  # nor as a frame's first
    assert b.payloads == []


@pytest.mark.parametrize("bad", ["text", 7, None, [b"a"]])
def test_a_payload_that_is_not_bytes_is_refused_whatever_its_place_in_the_frame(bad):
    """msgpack packs a str as it is: every receiver would drop the frame as malformed with
    the messages it shares, and every repair of it too."""
    b = batcher(linger_s=10.0)
    b.take(0.0)
    with pytest.raises(TypeError, match="must be bytes, bytearray or memoryview"):
        b.offer(bad, 1.0)  # as a frame's first
    assert b.offer(b"kept", 1.0) == FIRST
    with pytest.raises(TypeError, match=f"not {type(bad).__name__}"):
        b.offer(bad, 1.0)  # joining a frame
    assert b.offer(bytearray(b"ba"), 1.0) == ADDED
    assert b.offer(memoryview(b"mv"), 1.0) == ADDED
    assert len(b) == 3


def _held_at(rate: float, n: int, gather_s: float) -> tuple[int, float]:
    """A blocking sender's loop over a SenderCore at a fixed limit of ``rate`` (no
    start): (DATA frames for ``n`` messages of 1 KB, the time they took)."""
    core = SenderCore(SenderConfig(
        stream="s", sender_id="tx", epoch=1,
        nak=NakConfig(initial_rate_msgs=rate, max_rate_msgs=rate, start_window_msgs=None,
                      gather_s=gather_s)), now=0.0)
    now, msg = 0.0, b"m" * 1000
    for _ in range(n):
        while wait := core.offer(msg, now):
            now += wait
    core.flush(now)
    return core.snapshot(now)["frames"], now


def test_a_sender_the_limit_holds_back_sends_what_then_may_go_as_one_frame():
    """At a slow link's rate (900 msgs/s) a sender held by the limit sent one message a
    frame, each paying a frame's headers (6 % of a 1 KB message on the lab's link): it
    now waits until gather_s of the rate may go (3 messages), which leave together. The
    limit holds all the same."""
    frames, took = _held_at(900.0, 900, 0.004)
    alone, took_alone = _held_at(900.0, 900, 0.0)
    assert alone >= 880  # one a frame (the burst's first few aside)
    assert frames <= 900 // 3 + 5
    cfg = NakConfig()
    burst = TokenBucket(900.0, burst_s=cfg.burst_s, gather_s=cfg.gather_s).capacity
    assert took >= (900 - burst) / 900 and took_alone >= (900 - burst) / 900


def test_bad_bounds_are_config_errors():
    for kw in ({"linger_s": -1.0}, {"max_msgs": 0}, {"max_bytes": 0},
               {"max_frame_bytes": FRAME_OVERHEAD + 10}):
        with pytest.raises(ConfigError):
            batcher(**kw)


# -- live --------------------------------------------------------------------------------
def pair(mode: str = "nak", *, rx_kw: dict | None = None, **tx_kw) -> tuple[Receiver, Sender]:
    if mode == "nak":  # the batcher's own bounds: NAK's start holds a frame to an eighth
        tx_kw.setdefault("nak", NakConfig(start_window_msgs=None))  # of its window
    rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode=mode, **(rx_kw or {}))
    tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode=mode, **tx_kw)
    tx.wait_for_receivers(1)
    return rx, tx


def take(rx: Receiver, n: int, timeout_s: float = 30.0) -> list:
    got: list = []
    end = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < end:
        got += rx.get_many(n - len(got), timeout=0.1)
    return got


def test_per_message_sends_are_coalesced_in_order_and_bounded():
    # no rate limit (seed 001's start): the batcher alone makes the frames. Under a limit
    # the sender flushes before each wait; with nobody reading during the sends (the
    # queue's consumer "takes" nothing) the start hands over at a low rate, and pure
    # Python made 533 frames of 5,000 one run
    rx, tx = pair(linger_s=0.05, frame_msgs=100,
                  nak=NakConfig(initial_rate_msgs=None, start_window_msgs=None))
    try:
        for i in range(5_000):
            tx.send(i.to_bytes(4, "big"))
        tx.flush()
        got = take(rx, 5_000)
        assert [int.from_bytes(m.payload, "big") for m in got] == list(range(5_000))
        assert [m.seq for m in got] == list(range(5_000))
        assert 5_000 / 100 <= tx.frames < 5_000 / 10  # coalesced, never past frame_msgs
        assert tx.snapshot()["sent"] == 5_000
    finally:
        tx.close()
        rx.close()


def test_the_linger_timer_sends_a_frame_the_application_left_behind():
    rx, tx = pair(linger_s=1.0)
    try:
        tx.send(b"first")  # after an idle spell: at once
        tx.send(b"second")  # within the linger of the last frame: waits for company
        tx.send(b"third")
        assert (tx.frames, tx.sent, tx.seq) == (1, 3, 3)
        got = take(rx, 3)  # nobody calls the sender: its timer sends the frame
        assert [m.payload for m in got] == [b"first", b"second", b"third"]
        assert tx.frames == 2
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize("how", ["flush", "close", "poll", "abort"])
def test_flush_close_poll_and_abort_send_the_frame_being_built(how):
    rx, tx = pair(linger_s=600.0)
    try:
        for i in range(5):
            tx.send(bytes([i]))
        assert tx.frames == 1  # the first left at once, four wait for the linger
        getattr(tx, how)()
        got = take(rx, 5)
        assert [m.payload for m in got] == [bytes([i]) for i in range(5)]
        assert tx.frames == 2
        if how in ("flush", "close"):
            assert rx.wait_for_ends(1, timeout=10)
        if how == "abort":
            assert rx.ends() == {}
    finally:
        tx.close()
        rx.close()


def test_send_send_batch_and_try_send_keep_one_order():
    rx, tx = pair(linger_s=0.5)
    try:
        expected = []
        for i in range(300):
            p = i.to_bytes(2, "big")
            if i % 3 == 0:
                tx.send(p)
            elif i % 3 == 1:
                tx.send_batch([p])
            else:
                while not tx.try_send(p):
                    tx.poll(0.001)
            expected.append(p)
        tx.flush()
        got = take(rx, 300)
        assert [m.payload for m in got] == expected
        assert [m.seq for m in got] == list(range(300))
    finally:
        tx.close()
        rx.close()


def test_the_rate_limit_holds_per_message_with_batching():
    rate, n = 2_000.0, 1_000
    rx, tx = pair(linger_s=0.005, max_rate_msgs=rate)
    try:
        t0 = time.monotonic()
        for _ in range(n):
            tx.send(b"r")
        tx.flush()
        elapsed = time.monotonic() - t0
        cfg = NakConfig()  # the token bucket's burst (and what a held sender gathers)
        burst = TokenBucket(rate, burst_s=cfg.burst_s, gather_s=cfg.gather_s).capacity
        assert elapsed >= (n - burst - 256) / rate  # never faster than the limit allows
        assert len(take(rx, n)) == n
    finally:
        tx.close()
        rx.close()


class WatchedPoller:
    """A sender's poller that notes, each time the driver waits on it, how many frames its
    core had handed out and the driver had not sent yet."""

    def __init__(self, tx: Sender) -> None:
        self.poller, self.core, self.unsent = tx._poller, tx.core, []

    def poll(self, timeout=None):
        self.unsent.append(len(self.core.outbox))
        return self.poller.poll(timeout)


def test_what_the_sender_flushed_before_a_wait_leaves_before_the_wait():
    """Held by its limit (20 msgs/s), a message admitted after a wait lingers for
    company; the next send, about to wait, flushes it. It must leave then: the driver
    waited first and sent it after, with the next message, so every message of a sender
    held by its rate arrived one interval late (a Spark task at 78 msgs/s: 12-13 ms at
    fast receivers, where credit's took ~1 ms). The driver's core timers (50 ms and
    more here) cut such a wait short, so the time alone did not show it."""
    slow = NakConfig(min_rate_msgs=20.0, max_rate_msgs=20.0, start_window_msgs=None)
    rx, tx = pair(linger_s=0.5, nak=slow)
    try:
        watch = WatchedPoller(tx)
        tx._poller = watch
        for i in range(6):
            tx.send(bytes([i]))
        assert watch.unsent and set(watch.unsent) == {0}, watch.unsent
        tx.flush()
        assert [m.payload for m in take(rx, 6)] == [bytes([i]) for i in range(6)]
    finally:
        tx.close()
        rx.close()


def test_try_send_says_not_now_honestly_under_a_rate_limit():
    rx, tx = pair(linger_s=0.002, max_rate_msgs=1_000.0)
    try:
        accepted = refused = 0
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            if tx.try_send(accepted.to_bytes(4, "big")):
                accepted += 1
            else:
                refused += 1
        tx.flush()
        assert refused > 0 and 0 < accepted <= 1_000 * 0.5 + 300
        got = take(rx, accepted)
        assert [int.from_bytes(m.payload, "big") for m in got] == list(range(accepted))
        assert tx.snapshot()["try_refused"] == refused
    finally:
        tx.close()
        rx.close()


def test_ack_frames_larger_than_the_credit_never_overrun_a_small_queue():
    """frame_msgs (256) is far above the queue (50): credit is taken per message, so a
    frame never carries more than was granted."""
    got: list = []

    def slow(m) -> None:
        got.append(m)
        if len(got) % 100 == 0:
            time.sleep(0.005)

    rx, tx = pair("ack", rx_kw={"capacity_msgs": 50, "handler": slow}, linger_s=0.01,
                  frame_msgs=256)
    try:
        for i in range(3_000):
            tx.send(i.to_bytes(2, "big"), timeout=30)
        tx.flush()
        end = time.monotonic() + 30
        while len(got) < 3_000 and time.monotonic() < end:
            time.sleep(0.01)
        snap = rx.snapshot()
        assert [int.from_bytes(m.payload, "big") for m in got] == list(range(3_000))
        assert snap["dropped"] == 0 and snap["lost"] == 0 and snap["queue_peak"] <= 50
        assert tx.frames < 3_000  # and it did batch
    finally:
        tx.close()
        rx.close()


def test_an_oversized_payload_is_refused_and_nothing_else_is_lost():
    rx, tx = pair(linger_s=0.5, max_frame_bytes=4_096)
    try:
        tx.send(b"a")
        tx.send(b"b")
        with pytest.raises(ValueError, match="exceeds max_frame_bytes"):
            tx.send(b"x" * 5_000)
        with pytest.raises(ValueError):
            tx.try_send(b"x" * 5_000)
        tx.send(b"c")
        tx.flush()
        got = take(rx, 3)
        assert [(m.seq, m.payload) for m in got] == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert rx.snapshot()["lost"] == 0
    finally:
        tx.close()
        rx.close()


def test_a_payload_that_is_not_bytes_is_refused_and_nothing_else_is_lost():
    """A str sent among bytes: refused by send, try_send and send_batch (the whole batch,
    before any of it goes), with a hint; the stream stays whole. It was sent: one str
    among 2,000 sends cost the receiver 231 messages (its frame, malformed, and its
    repairs), counted beyond_history."""
    rx, tx = pair(linger_s=0.5)
    try:
        tx.send(b"a")
        with pytest.raises(TypeError, match=re.escape("not str: encode it first")):
            tx.send("text")
        with pytest.raises(TypeError):
            tx.try_send("text")
        tx.send(b"b")
        with pytest.raises(TypeError):
            tx.send_batch([b"never"] * 3_000 + ["text"])
        tx.send_batch([b"c", bytearray(b"d")])
        tx.flush()
        got = take(rx, 4)
        assert [(m.seq, m.payload) for m in got] == [(0, b"a"), (1, b"b"), (2, b"c"),
                                                     (3, b"d")]
        assert tx.snapshot()["sent"] == 4
        snap = rx.snapshot()
        assert snap["lost"] == 0 and snap["malformed"] == 0
        tx.close()
        with pytest.raises(LocalProtocolError, match="poll after close"):
            tx.poll(0.0)  # it raised ZeroMQ's "Socket operation on non-socket"
    finally:
        tx.close()
        rx.close()


def test_a_batch_stopped_part_way_says_how_many_went_and_the_rest_can_follow():
    """A ``send_batch`` that timed out (or, asyncio, was cancelled) left its caller
    unable to tell how much of it went: sending the batch again duplicated that part,
    dropping it lost the rest. The error now says (``exc.sent``, and in its words); the
    rest, sent after it, arrives once and in order. An ack receiver that nobody reads
    grants its 200 messages of room and no more, so the batch stops there whatever the
    timing."""
    import asyncio
    import threading

    from nakflow.aio import AsyncReceiver, AsyncSender

    payloads = [b"m%d" % i for i in range(1_000)]
    rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="ack", capacity_msgs=200)
    tx = Sender(rx.data_endpoints, rx.feedback_endpoints, mode="ack")
    try:
        tx.wait_for_receivers(1, timeout=10)
        with pytest.raises(TimeoutError) as info:
            tx.send_batch(iter(payloads), timeout=0.3)
        sent = info.value.sent  # type: ignore[attr-defined]
        assert 0 < sent < 1_000, sent
        assert f"send_batch: the first {sent:,} of its 1,000 messages were sent" in str(
            info.value)
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(rx.messages(senders=1,
                                                                       timeout=30)))
        reader.start()
        tx.send_batch(payloads[sent:], timeout=10)
        tx.close()
        reader.join(60)
        assert [m.payload for m in got] == payloads
        assert rx.snapshot()["senders"][0]["status"] == "complete"
    finally:
        tx.close()
        rx.close()

    async def cancelled() -> None:
        arx = AsyncReceiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", mode="ack",
                            capacity_msgs=200)
        arx.start()
        atx = AsyncSender(arx.data_endpoints, arx.feedback_endpoints, mode="ack")
        try:
            await atx.wait_for_receivers(1, timeout=10)
            with pytest.raises(TimeoutError) as info:  # wait_for cancels it, then says so
                await asyncio.wait_for(atx.send_batch(payloads), 0.3)
            sent = info.value.__cause__.sent  # type: ignore[union-attr]
            assert 0 < sent < 1_000, sent
            reader = asyncio.ensure_future(_take(arx))
            await atx.send_batch(payloads[sent:], timeout=10)
            await atx.close()
            assert [m.payload for m in await reader] == payloads
        finally:
            await atx.close()
            await arx.close()

    async def _take(arx: AsyncReceiver) -> list:
        return [m async for m in arx.messages(senders=1, timeout=30)]

    asyncio.run(cancelled())


def test_a_batch_whose_source_breaks_sends_none_of_it_and_says_so():
    """A generator that raised at its 700th item: the exception came out of send_batch
    without ``sent``, so the caller, whose 700 items were taken, could not tell whether
    none of them, or all, had gone (a batch is taken whole first: none had). A payload
    refused while the batch is taken says so too. What is sent after goes as usual."""

    def source():
        for i in range(1_000):
            if i == 700:
                raise KeyError("the source broke")
            yield b"m%d" % i

    rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    tx = Sender(rx.data_endpoints, rx.feedback_endpoints)
    try:
        tx.wait_for_receivers(1, timeout=10)
        with pytest.raises(KeyError) as broke:
            tx.send_batch(source())
        assert broke.value.sent == 0 and broke.value.args == ("the source broke",)  # type: ignore[attr-defined]
        with pytest.raises(TypeError) as refused:
            tx.send_batch([b"a", "not bytes", b"c"])
        assert refused.value.sent == 0  # type: ignore[attr-defined]
        tx.send_batch([b"after"])
        tx.close()
        assert [m.payload for m in rx.messages(senders=1, timeout=30)] == [b"after"]
        assert rx.snapshot()["senders"][0]["status"] == "complete"
    finally:
        tx.close()
        rx.close()
