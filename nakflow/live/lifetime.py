"""What becomes of a live ``Sender`` or ``Receiver`` (threaded or asyncio) when its process
forks or exits.

**Fork.** ZeroMQ's sockets and the object's threads stay in the parent. In a child that
``fork`` made of its process (``multiprocessing``'s default start method on Linux, with
one made at module level) a sender's first send waited for ever (its timer thread could
hold the lock at the fork, and the sockets' I/O threads are gone), and so did a
receiver's ``get``; an ``AsyncSender``'s first wait too. Each one made is tracked
(``track``); in a forked child it becomes an object whose every use but ``snapshot`` (and
``close``, which does nothing, awaitable for the asyncio classes: the sockets are the
parent's) raises ``LocalProtocolError`` saying why. The hot paths are untouched.

**Exit.** A sender the program did not close (``close_at_exit``) leaves at interpreter
exit as ``abort`` does: what it admitted goes out, then BYE, and a warning names it (an
``AsyncSender`` without its loop, which ``asyncio.run`` has closed by then). Before,
the frame it still held was lost in silence (a script that sent 500 and exited: 373
arrived) and its receivers waited ``sender_gone_s`` to take it as gone.
pyzmq does not terminate contexts at exit, so what a closed socket still holds dies with
the process's I/O thread: a sender's context (one it left or one closed or aborted before
the exit) left with no open socket is terminated, which waits for them to send it (up to
their linger, 2 s); one with sockets the program left open is not (terminating it would
wait for them for ever). Before, only a sender left at exit had its context terminated:
one aborted just before (``nakflow send`` stopped by SIGTERM) lost its last frame and
BYE with the I/O thread at a receiver that was slow to take them (a chaos run: 4 of
16,299 short). The term runs in a thread given 3 s:
a socket pyzmq does not list (made by ``zmq.Socket(ctx, ...)``) could still hold it, and
the exit must not hang. A sender whose send waits in another thread holds its lock: it is
left as it is after 1 s, with a warning.

**Pickle.** None of them can be pickled or copied (``not_picklable``): a Spark job that
made a ``Sender`` on the driver and used it in ``foreachPartition``'s function failed with
pyzmq's ``self.handle cannot be converted to a Python object for pickling``, which named
neither the object nor the way out.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import zmq
import zmq.asyncio

from ..config import check_count, check_timeout
from ..errors import LocalProtocolError

log = logging.getLogger("nakflow.live.sender")

_MADE: weakref.WeakSet[Any] = weakref.WeakSet()  # refused in a forked child
_FORKED: dict[type, type] = {}
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()  # senders to abort at exit
_CONTEXTS: weakref.WeakSet[Any] = weakref.WeakSet()  # senders' contexts, terminated at exit


def track(obj: Any, refused: Sequence[str]) -> None:
    """``obj`` (made in this process) refuses ``refused`` (its methods) in a forked child."""
    obj._made_in = os.getpid()
    obj._refused_after_fork = tuple(refused)
    _MADE.add(obj)


def close_at_exit(sender: Any) -> None:
    """``sender`` is aborted at interpreter exit unless it was closed: its
    ``_leave_at_exit()`` says None (closed already, or a forked copy), False (a send holds
    it) or True (it left as ``abort`` does); its ``_ctx`` is the context to terminate,
    closed or not (what its closed sockets still hold goes)."""
    _OPEN.add(sender)
    _CONTEXTS.add(sender._ctx)


def closed_before_done(receiver_id: str, finished: int, senders: int,
                       error: BaseException | None = None) -> LocalProtocolError:
    """What a receiver's ``messages()`` (threaded or asyncio) raises once the receiver is
    closed and drained before its senders finished: nothing more can arrive (it waited
    its whole timeout, then said how many had finished). ``error``: what closed it, its
    I/O failing (the hint said to call messages() before close())."""
    why = ("messages() before close(), or before the with block ends" if error is None
           else f"its I/O failed: {error!r}")
    return LocalProtocolError(
        f"receiver {receiver_id} is closed: {finished} of {senders} senders finished, and "
        f"nothing more can arrive ({why})")


def check_senders(senders: int, timeout: float | None) -> None:
    """A receiver's ``messages()`` (threaded or asyncio) refuses a negative ``senders``
    (it ended at once, as if they had finished) and a ``timeout`` < 0 or NaN (with NaN it
    waited for ever): ValueError (another kind: TypeError)."""
    check_count(senders, "messages", "senders")
    check_timeout(timeout, "messages")


def not_picklable(self: Any, protocol: object = None) -> Any:
    """``__reduce_ex__`` of every live class: a TypeError that says what cannot travel
    and where to make it instead (pickle, cloudpickle, ``copy`` all ask this first)."""
    kind = _kind(type(self))
    raise TypeError(
        f"a nakflow {kind} cannot be pickled or copied: it owns this process's ZeroMQ "
        f"sockets and threads. Create it where it is used: in a Spark job, inside the "
        f"task's function (foreachPartition), or let df.write.format('nakflow') make one "
        f"per task (docs/spark.md)")


def check_context(context: object, *, aio: bool) -> None:
    """A ``context=`` of the kind the class's sockets need, or None: a TypeError naming it
    otherwise. A threaded class given a ``zmq.asyncio.Context`` made sockets whose every
    receive returned a future (its I/O thread died: "There is no current event loop"; a
    sender failed at close); a string failed with ``'str' object has no attribute
    'socket'``. An asyncio class given a plain ``zmq.Context`` is told how to wrap it."""
    if context is None:
        return
    if aio:
        if isinstance(context, zmq.asyncio.Context):
            return
        hint = (" (zmq.asyncio.Context(ctx) wraps one: the same I/O threads)"
                if isinstance(context, zmq.Context) else "")
        raise TypeError(f"context must be a zmq.asyncio.Context (or None), not "
                        f"{_qualname(context)}{hint}")
    if isinstance(context, zmq.Context) and not isinstance(context, zmq.asyncio.Context):
        return
    hint = (" (its sockets are asyncio's: use AsyncSender or AsyncReceiver, or a "
            "zmq.Context)" if isinstance(context, zmq.asyncio.Context) else "")
    raise TypeError(f"context must be a zmq.Context (or None), not {_qualname(context)}{hint}")


def _qualname(obj: object) -> str:
    if isinstance(obj, zmq.asyncio.Context):
        return "zmq.asyncio.Context"
    if isinstance(obj, zmq.Context):
        return "zmq.Context"
    cls = type(obj)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


def _kind(cls: type) -> str:
    """The public class's name (a forked child's object is of a subclass)."""
    return cls.__mro__[1].__name__ if cls.__name__.startswith("Forked") else cls.__name__


def _refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
    kind = _kind(type(self))
    name = getattr(self, "sender_id", None) or getattr(self, "receiver_id", "")
    threads = "" if _is_async(type(self)) else f" and the {kind.lower()}'s threads"
    raise LocalProtocolError(
        f"{kind} {name} was created in process {self._made_in}, and this process is a fork "
        f"of it: ZeroMQ's sockets{threads} do not survive a fork. "
        f"Create the {kind} in the process that uses it (after the fork; "
        "multiprocessing's 'spawn' start method does that)")


def _is_async(cls: type) -> bool:
    """An asyncio class (its ``close`` is a coroutine)."""
    return inspect.iscoroutinefunction(getattr(cls, "close", None))


def _nothing(self: Any, *args: Any, **kwargs: Any) -> None:
    """``close`` in a forked child: the sockets and threads are the parent's to close."""


async def _nothing_awaited(self: Any, *args: Any, **kwargs: Any) -> None:
    """An asyncio class's ``close`` in a forked child: as ``_nothing``, awaitable."""


def _forked_class(cls: type, refused: Sequence[str]) -> type:
    forked = _FORKED.get(cls)
    if forked is None:
        body: dict[str, Any] = {name: _refuse for name in refused}
        if _is_async(cls):
            body.update(close=_nothing_awaited, abort=_nothing_awaited,
                        __aexit__=_nothing_awaited)
        else:
            body.update(close=_nothing, abort=_nothing, __exit__=_nothing)
        body["__doc__"] = f"A {cls.__name__} in a forked child (``nakflow.live.lifetime``)."
        forked = _FORKED[cls] = type(f"Forked{cls.__name__}", (cls,), body)
    return forked


def _in_forked_child() -> None:
    for obj in list(_MADE):
        obj.__class__ = _forked_class(type(obj), obj._refused_after_fork)
    _MADE.clear()
    _OPEN.clear()  # the parent's to close
    _CONTEXTS.clear()  # the parent's (its I/O threads are not in the child)


def _abort_at_exit() -> None:
    contexts = []
    for tx in list(_OPEN):
        try:
            left = tx._leave_at_exit()  # None: closed, or a forked copy
        except Exception:  # the exit goes on whatever one sender does
            log.exception("sender %s was not closed when the program exited, and leaving "
                          "failed", tx.sender_id)
            continue
        if left is None:
            continue
        if not left:  # a thread's send waits in it
            log.warning("sender %s was not closed when the program exited, and a send "
                        "still waits in it: left as it is (its receivers take it as gone "
                        "after sender_gone_s)", tx.sender_id)
            continue
        closing = ("'await close()', or use 'async with AsyncSender(...)'"
                   if _is_async(type(tx))
                   else "'close()', or use 'with Sender(...)'")
        log.warning("sender %s was not closed when the program exited: it left without END "
                    "(its receivers report the stream incomplete); call %s, to end the "
                    "stream", tx.sender_id, closing)
        if tx._ctx not in contexts:
            contexts.append(tx._ctx)
    contexts += [ctx for ctx in list(_CONTEXTS) if ctx not in contexts]
    for ctx in contexts:
        sockets = getattr(ctx, "_sockets", None)
        if sockets is not None and not ctx.closed and all(s.closed for s in list(sockets)):
            term = threading.Thread(target=ctx.term, daemon=True, name="nakflow-exit-term")
            term.start()
            term.join(3.0)


os.register_at_fork(after_in_child=_in_forked_child)
atexit.register(_abort_at_exit)
