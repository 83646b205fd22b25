"""One sender and one receiver behind the same small async interface, for every driver of
the protocol cores: the threaded classes, the asyncio classes, and the simulator's
in-memory ``SimLink`` (virtual time). ``tests/test_conformance.py`` runs one suite
against all three, as Trio runs one stream suite against every stream type."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import zmq

from nakflow import (
    AsyncReceiver,
    AsyncSender,
    Message,
    Receiver,
    ReceiverConfig,
    ReceiverCore,
    Sender,
    SenderConfig,
    SenderCore,
)
from simulations.cores import SimLink


async def _garbage_pub(endpoints: list[str]) -> zmq.Socket[bytes]:
    """An XPUB connected to a receiver's data endpoint, returned once the receiver's
    subscription has reached it, so nothing sent on it is lost to the slow joiner. It
    waits without blocking the loop: an asyncio receiver's socket sends its subscription
    only when the loop runs it."""
    pub = zmq.Context.instance().socket(zmq.XPUB)
    pub.connect(endpoints[0])
    for _ in range(500):
        if pub.poll(0):
            pub.recv()  # the subscription
            return pub
        await asyncio.sleep(0.01)
    raise TimeoutError("the receiver's subscription did not arrive")


class ThreadedPair:
    def __init__(self, tx: dict[str, Any], rx: dict[str, Any]) -> None:
        self.rx = Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", **rx)
        self.tx = Sender(self.rx.data_endpoints, self.rx.feedback_endpoints, **tx)
        self._pub: zmq.Socket[bytes] | None = None

    async def ready(self) -> None:
        self.tx.wait_for_receivers(1, timeout=10)

    async def send(self, payload: bytes) -> None:
        self.tx.send(payload, timeout=10)

    async def send_batch(self, payloads: list[bytes]) -> None:
        self.tx.send_batch(payloads, timeout=10)

    def try_send(self, payload: bytes) -> bool:
        return self.tx.try_send(payload)

    async def end(self) -> None:
        self.tx.flush()

    async def close(self) -> None:
        self.tx.close()

    async def abort(self) -> None:
        self.tx.abort()

    async def idle(self, seconds: float) -> None:
        time.sleep(seconds)

    async def collect(self, timeout: float = 20.0) -> list[Message]:
        return list(self.rx.messages(senders=1, timeout=timeout))

    async def inject(self, buf: bytes) -> None:
        if self._pub is None:
            self._pub = await _garbage_pub(self.rx.data_endpoints)
        self._pub.send(buf)

    async def closed_receivers_messages(self, senders: int,
                                        ) -> tuple[list[Message], BaseException | None]:
        """Once the sender's END is in, close the receiver, then take ``messages(senders)``:
        what it yielded, and what it raised (None: nothing)."""
        assert self.rx.wait_for_ends(1, 20)
        self.rx.close()
        got: list[Message] = []
        try:
            got.extend(self.rx.messages(senders=senders, timeout=20))
        except Exception as exc:
            return got, exc
        return got, None

    async def refused(self, side: str, name: str, *args: Any, **kw: Any) -> BaseException:
        """What the sender's (``side`` "tx") or receiver's method ``name`` raises for these
        arguments (an iterator's, such as ``messages``, once iterated)."""
        try:
            out = getattr(self.tx if side == "tx" else self.rx, name)(*args, **kw)
            if hasattr(out, "__next__"):
                list(out)
        except Exception as exc:
            return exc
        raise AssertionError(f"{name}{args} {kw} raised nothing")

    def snapshots(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.tx.snapshot(), self.rx.snapshot()

    async def shutdown(self) -> None:
        self.tx.abort()
        self.rx.close()
        if self._pub is not None:
            self._pub.close(0)


class AsyncPair(ThreadedPair):
    def __init__(self, tx: dict[str, Any], rx: dict[str, Any]) -> None:
        self.arx = AsyncReceiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", **rx)
        self.atx = AsyncSender(self.arx.data_endpoints, self.arx.feedback_endpoints, **tx)
        self.arx.start()
        self._pub = None

    async def ready(self) -> None:
        await self.atx.wait_for_receivers(1, timeout=10)

    async def send(self, payload: bytes) -> None:
        await self.atx.send(payload, timeout=10)

    async def send_batch(self, payloads: list[bytes]) -> None:
        await self.atx.send_batch(payloads, timeout=10)

    def try_send(self, payload: bytes) -> bool:
        return self.atx.try_send(payload)

    async def end(self) -> None:
        self.atx.flush()

    async def close(self) -> None:
        await self.atx.close()

    async def abort(self) -> None:
        await self.atx.abort()

    async def idle(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def collect(self, timeout: float = 20.0) -> list[Message]:
        return [m async for m in self.arx.messages(senders=1, timeout=timeout)]

    async def inject(self, buf: bytes) -> None:
        if self._pub is None:
            self._pub = await _garbage_pub(self.arx.data_endpoints)
        self._pub.send(buf)

    async def closed_receivers_messages(self, senders: int,
                                        ) -> tuple[list[Message], BaseException | None]:
        assert await self.arx.wait_for_ends(1, 20)
        await self.arx.close()
        got: list[Message] = []
        try:
            async for msg in self.arx.messages(senders=senders, timeout=20):
                got.append(msg)
        except Exception as exc:
            return got, exc
        return got, None

    async def refused(self, side: str, name: str, *args: Any, **kw: Any) -> BaseException:
        try:
            out = getattr(self.atx if side == "tx" else self.arx, name)(*args, **kw)
            if hasattr(out, "__anext__"):
                _ = [m async for m in out]
            elif hasattr(out, "__await__"):
                await out
        except Exception as exc:
            return exc
        raise AssertionError(f"{name}{args} {kw} raised nothing")

    def snapshots(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.atx.snapshot(), self.arx.snapshot()

    async def shutdown(self) -> None:
        await self.atx.close()
        await self.arx.close()
        if self._pub is not None:
            self._pub.close(0)


class SimPair(ThreadedPair):
    """The cores on ``SimLink``: waiting is stepping virtual time (1 ms a step)."""

    def __init__(self, tx: dict[str, Any], rx: dict[str, Any]) -> None:
        rng = random.Random(5)
        self.txc = SenderCore(SenderConfig(sender_id="s", epoch=1, **tx), now=0.0)
        self.rxc = ReceiverCore(ReceiverConfig(receiver_id="r", **rx), now=0.0,
                                rng=random.Random(rng.random()))
        self.link = SimLink([self.txc], [self.rxc], rng=rng)
        self._taken: list[Message] = []

    def _steps(self, seconds: float) -> None:
        for _ in range(max(1, round(seconds / self.link.step_s))):
            self._taken += self.link.queues[0].take(1 << 20, 0)
            self.link.step()

    async def ready(self) -> None:
        self.txc.want_receivers(1, self.link.now)
        try:
            for _ in range(10_000):  # 10 s of virtual time, the live drivers' timeout
                if self.txc.receivers_ready():
                    return
                if (error := self.txc.wait_error(self.link.now)) is not None:
                    raise error
                self._steps(0.001)
            raise TimeoutError("no receiver answered in 10 s")
        finally:
            self.txc.want_receivers(0, self.link.now)

    async def send(self, payload: bytes) -> None:
        for _ in range(100_000):
            if not self.txc.offer(payload, self.link.now):
                return
            self._steps(0.001)
        raise TimeoutError("not admitted")

    async def send_batch(self, payloads: list[bytes]) -> None:
        offer = self.txc.batch_offer(payloads)
        while not offer.done:
            if offer(self.link.now):
                self._steps(0.001)

    def try_send(self, payload: bytes) -> bool:
        return self.txc.try_offer(payload, self.link.now)

    async def end(self) -> None:
        self.txc.end(self.link.now)

    async def close(self) -> None:
        self.txc.close(self.link.now)
        while not self.txc.closed:
            self._steps(0.001)

    async def abort(self) -> None:
        self.txc.abort(self.link.now)

    async def idle(self, seconds: float) -> None:
        self._steps(seconds)

    async def collect(self, timeout: float = 20.0) -> list[Message]:
        rx, queue = self.rxc, self.link.queues[0]
        for _ in range(round(timeout / self.link.step_s)):
            self._steps(0.001)
            if (queue.finished() >= 1 and not rx.tracker.with_gaps and not len(queue)
                    and not rx.deliveries()):
                break
        else:
            raise TimeoutError("the stream did not end")
        out, self._taken = self._taken, []
        return out

    async def inject(self, buf: bytes) -> None:
        self.link.inject(0, buf)

    def snapshots(self) -> tuple[dict[str, Any], dict[str, Any]]:
        now = self.link.now
        rx = self.rxc.snapshot(now)
        rx.update(self.link.queues[0].snapshot(None, len(self.rxc.deliveries())))
        return self.txc.snapshot(now), rx

    async def shutdown(self) -> None:
        pass


DRIVERS = {"threaded": ThreadedPair, "asyncio": AsyncPair, "sim": SimPair}
