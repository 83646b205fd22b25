"""One suite, every driver: the threaded Sender/Receiver, the asyncio ones and the
simulator's SimLink run the same protocol cores and must behave alike: ordering, the
accounting identity, natural batching's linger, close and abort, the lifecycle, repair,
bad frames and the mode mismatch (tests/conformance.py has the three drivers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from nakflow import LocalProtocolError, NakConfig, PeerMismatch
from tests.conformance import DRIVERS

pytestmark = pytest.mark.parametrize("driver", sorted(DRIVERS))


def run(driver: str, scenario: Callable[[Any], Awaitable[None]], tx: dict[str, Any] | None = None,
        rx: dict[str, Any] | None = None) -> None:
    async def main() -> None:
        pair = DRIVERS[driver]({"mode": "nak", **(tx or {})},
                               {"mode": "nak", "capacity_msgs": 20_000, **(rx or {})})
        try:
            await pair.ready()
            await scenario(pair)
        finally:
            await pair.shutdown()

    asyncio.run(main())


def test_messages_arrive_in_order_complete_and_accounted(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        for i in range(3_000):
            await pair.send(b"m%d" % i)
        await pair.close()
        got = await pair.collect()
        assert [m.seq for m in got] == list(range(3_000))
        assert [m.payload for m in got[:2]] == [b"m0", b"m1"]
        tx, rx = pair.snapshots()
        (stream,) = rx["senders"]
        assert (stream["status"], stream["missing"], stream["final_seq"]) == ("complete", 0,
                                                                              3_000)
        assert rx["received"] == rx["delivered"] == tx["sent"] == 3_000
        assert tx["frames"] < 3_000  # natural batching coalesced them
        assert tx["state"] == "closed"

    run(driver, scenario)


def test_send_batch_goes_in_few_frames(driver: str) -> None:
    """About the framing, so without the start and the rate limit: the start's window
    doubles a round trip from 16 messages, 9 rounds for 5,000, and a receiver slow to
    confirm (3 pytest workers on 2 cores) took more rounds, and more frames (11, 14)."""
    async def scenario(pair: Any) -> None:
        await pair.send_batch([b"x" * 50] * 5_000)
        await pair.close()
        assert len(await pair.collect()) == 5_000
        tx, _ = pair.snapshots()
        assert tx["frames"] <= 10, tx["frames"]

    run(driver, scenario, tx={"nak": NakConfig(initial_rate_msgs=None, start_window_msgs=None)})


def test_a_lone_message_leaves_when_its_linger_is_over(driver: str) -> None:
    """The application sends one message and goes away: the driver's timer sends it."""
    async def scenario(pair: Any) -> None:
        await pair.send(b"alone")
        await pair.send(b"company")  # right after: it joins the first one's frame
        await pair.idle(0.2)
        _, rx = pair.snapshots()
        assert rx["received"] == 2 and rx["frames"] >= 1

    run(driver, scenario, tx={"linger_s": 0.005})


def test_abort_leaves_the_stream_incomplete_and_the_sender_counted_as_gone(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        for i in range(100):
            await pair.send(b"%d" % i)
        await pair.abort()
        got = await pair.collect()  # a sender that left counts as finished
        assert len(got) == 100
        tx, rx = pair.snapshots()
        (stream,) = rx["senders"]
        assert stream["status"] == "incomplete" and stream["final_seq"] is None
        assert tx["state"] == "closed"

    run(driver, scenario)


def test_data_after_end_is_refused_by_the_lifecycle(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        await pair.send(b"one")
        await pair.end()
        with pytest.raises(LocalProtocolError, match="after END"):
            await pair.send(b"two")
        await pair.close()
        assert [m.payload for m in await pair.collect()] == [b"one"]

    run(driver, scenario)


def test_bad_payloads_and_anything_after_close_are_refused_and_lose_nothing(driver: str) -> None:
    """A str payload is a TypeError (msgpack would have sent it, and every receiver
    dropped its frame as malformed); after close, data and a wait for receivers are the
    lifecycle's LocalProtocolError (the threaded sender's next look at feedback raised
    ZeroMQ's "Socket operation on non-socket", and a wait said its receiver was ready)."""
    async def scenario(pair: Any) -> None:
        with pytest.raises(TypeError, match="not str"):
            await pair.send("text")
        with pytest.raises(TypeError, match="not int"):
            await pair.send_batch([b"fine", 7])
        await pair.send(b"one")
        await pair.close()
        await pair.idle(0.01)  # past the threaded driver's next look at feedback
        with pytest.raises(LocalProtocolError, match="data after close"):
            await pair.send(b"two")
        with pytest.raises(LocalProtocolError, match="data after close"):
            await pair.send_batch([b"three"])
        with pytest.raises(LocalProtocolError, match="data after close"):
            pair.try_send(b"four")
        with pytest.raises(LocalProtocolError, match="wait_for_receivers after close"):
            await pair.ready()
        assert [m.payload for m in await pair.collect()] == [b"one"]

    run(driver, scenario)


def test_repair_makes_a_lossy_stream_whole(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        for i in range(3_000):
            await pair.send(b"%d" % i)
        await pair.close()
        got = await pair.collect()
        _, rx = pair.snapshots()
        assert sorted(m.seq for m in got) == list(range(3_000))
        assert rx["test_dropped"] > 0 and rx["repaired"] > 0
        assert rx["senders"][0]["status"] == "complete"

    run(driver, scenario, rx={"test_data_loss": 0.1}, tx={"frame_msgs": 16})


def test_a_reused_buffer_sends_what_it_held_when_sent_and_repairs_it_so(driver: str) -> None:
    """An application that refills one bytearray for each message (or sends a memoryview
    of it, or yields it refilled from a generator to ``send_batch``): the frame being
    built and the history kept the buffer itself, so a message left holding what the
    buffer held later (a probe: ``first``, ``SECND`` sent, ``first``, ``third``
    delivered), and a repair re-sent that."""
    async def scenario(pair: Any) -> None:
        buf = bytearray(8)
        view = memoryview(buf)
        want = []
        for i in range(2_000):
            buf[:] = b"%08d" % i
            want.append(bytes(buf))
            if i % 3 == 0:
                await pair.send(buf)
            elif i % 3 == 1:
                await pair.send_batch([view])
            elif not pair.try_send(view):
                await pair.send(view)

        def refilled() -> Any:  # a generator that refills one buffer for each message
            for i in range(2_000, 2_100):
                buf[:] = b"%08d" % i
                want.append(bytes(buf))
                yield view

        await pair.send_batch(refilled())
        buf[:] = b"-" * 8
        await pair.close()
        got = await pair.collect()
        _, rx = pair.snapshots()
        assert [m.payload for m in sorted(got, key=lambda m: m.seq)] == want
        assert rx["test_dropped"] > 0 and rx["repaired"] > 0

    run(driver, scenario, rx={"test_data_loss": 0.1}, tx={"frame_msgs": 16, "linger_s": 0.05})


def test_bad_frames_are_counted_and_dropped_and_the_stream_goes_on(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        for junk in (b"\x00garbage", b"\x93\x01\x63\x00", b"\xc1\x01" + b"x" * 40):
            await pair.inject(junk)
        for i in range(500):
            await pair.send(b"%d" % i)
        await pair.close()
        assert len(await pair.collect()) == 500
        _, rx = pair.snapshots()
        assert rx["malformed"] == 3 and rx["senders"][0]["status"] == "complete"

    run(driver, scenario)


def test_a_peer_in_another_mode_is_named_to_the_waiting_sender_and_counted_on_both_sides(
        driver: str) -> None:
    async def main() -> None:
        pair = DRIVERS[driver]({"mode": "nak"}, {"mode": "ack", "capacity_msgs": 20_000})
        try:
            with pytest.raises(PeerMismatch, match=r"runs mode 'ack', this sender runs 'nak'"):
                await pair.ready()
            tx, rx = pair.snapshots()
            assert tx["mode_mismatch"] > 0 and rx["mode_mismatch"] > 0
        finally:
            await pair.shutdown()

    asyncio.run(main())


def test_try_send_never_waits_and_counts_refusals(driver: str) -> None:
    async def scenario(pair: Any) -> None:
        results = [pair.try_send(b"x") for _ in range(50_000)]
        assert all(isinstance(r, bool) for r in results)
        assert True in results and False in results
        tx, _ = pair.snapshots()
        assert tx["try_refused"] == results.count(False)

    run(driver, scenario, tx={"nak": __import__("nakflow").NakConfig(initial_rate_msgs=1_000)})


def test_arguments_no_call_can_use_are_refused_and_a_generator_is_a_batch(driver: str) -> None:
    """A generator given to ``send_batch`` (``(row.encode() for row in rows)``) raised
    ``object of type 'generator' has no len()``; one payload given in place of the batch
    was sent a byte at a time or refused for its first byte. A negative count or timeout,
    or a NaN one (no deadline is ever reached: ``messages(timeout=nan)`` waited for ever),
    was taken or failed deep inside (``islice``), as was a count or timeout of another kind
    (a string, 1.5 receivers). Each is a ValueError or TypeError saying what is wrong, on
    every driver."""
    if driver == "sim":
        pytest.skip("the simulator drives the cores: no blocking calls, no timeouts")
    nan = float("nan")

    async def scenario(pair: Any) -> None:
        await pair.send_batch(b"g%d" % i for i in range(5))
        for side, name, args, kw, error, says in [
                ("tx", "send_batch", (b"one",), {}, TypeError, "not one payload"),
                ("tx", "send_batch", ("one",), {}, TypeError, "not one payload"),
                ("tx", "wait_for_receivers", (1,), {"timeout": -1.0}, ValueError,
                 "wait_for_receivers: timeout must be a number of seconds >= 0"),
                ("rx", "get_many", (-5,), {}, ValueError, "max_n must be >= 0, not -5"),
                ("rx", "get_many", (5,), {"timeout": nan}, ValueError, "not nan"),
                ("rx", "messages", (), {"senders": -1}, ValueError, "senders must be >= 0"),
                ("rx", "messages", (), {"timeout": nan}, ValueError, "messages: timeout"),
                # another kind: Python's "'<' not supported", and wait_for_receivers(1.5)
                # waited its whole timeout for "1 of 1.5 receivers"
                ("tx", "wait_for_receivers", (1.5,), {"timeout": 5.0}, TypeError,
                 "wait_for_receivers: n must be a whole number >= 0, not 1.5"),
                ("tx", "wait_for_receivers", (1,), {"timeout": "5"}, TypeError,
                 "wait_for_receivers: timeout must be a number of seconds >= 0"),
                ("rx", "get_many", ("5",), {}, TypeError, "max_n must be a whole number"),
                ("rx", "get_many", (2.5,), {}, TypeError, "not 2.5"),
                ("rx", "messages", (), {"senders": "1"}, TypeError, "senders must be a whole"),
                ("rx", "messages", (), {"timeout": "1"}, TypeError, "messages: timeout")]:
            exc = await pair.refused(side, name, *args, **kw)
            assert isinstance(exc, error) and says in str(exc), (name, args, kw, exc)
        await pair.close()
        assert [m.payload for m in await pair.collect()] == [b"g%d" % i for i in range(5)]

    run(driver, scenario)


def test_messages_of_a_closed_receiver_yield_what_is_queued_then_say_it_is_closed(
        driver: str) -> None:
    """A receiver closed before its senders finished can never finish: ``messages()``
    waited its whole timeout and said "0 of 2 senders finished within 30 s". Now it yields
    what is queued, then raises at once (a TimeoutError would mean it waited)."""
    if driver == "sim":
        pytest.skip("the simulator's receiver has no close and no messages() loop")

    async def scenario(pair: Any) -> None:
        await pair.send_batch([b"m%d" % i for i in range(10)])
        await pair.close()
        got, raised = await pair.closed_receivers_messages(senders=2)
        assert [m.payload for m in got] == [b"m%d" % i for i in range(10)]
        assert isinstance(raised, LocalProtocolError), raised
        assert "is closed: 1 of 2 senders finished, and nothing more can arrive" in str(raised)

    run(driver, scenario)
