"""A ``Sender`` or ``Receiver`` does not survive ``fork``: ZeroMQ's sockets and the
object's threads stay in the parent. In a child that ``fork`` made of its process
(``multiprocessing``'s default start method on Linux, with one made at module level) a
sender's first send waited for ever (its timer thread could hold the lock at the fork,
and the sockets' I/O threads are gone), and so did a receiver's ``get``. Each one made is
tracked here; in a forked child it becomes an object whose every use but ``snapshot``
(and ``close``, which does nothing: the sockets are the parent's) raises
``LocalProtocolError`` saying why. The hot paths are untouched.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

from ..errors import LocalProtocolError

_MADE: weakref.WeakSet[Any] = weakref.WeakSet()
_FORKED: dict[type, type] = {}


def track(obj: Any, refused: Sequence[str]) -> None:
    """``obj`` (made in this process) refuses ``refused`` (its methods) in a forked child."""
    obj._made_in = os.getpid()
    obj._refused_after_fork = tuple(refused)
    _MADE.add(obj)


def _refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
    kind = type(self).__mro__[1].__name__
    name = getattr(self, "sender_id", None) or getattr(self, "receiver_id", "")
    raise LocalProtocolError(
        f"{kind} {name} was created in process {self._made_in}, and this process is a fork "
        f"of it: ZeroMQ's sockets and the {kind.lower()}'s threads do not survive a fork. "
        f"Create the {kind} in the process that uses it (after the fork; "
        "multiprocessing's 'spawn' start method does that)")


def _nothing(self: Any, *args: Any, **kwargs: Any) -> None:
    """``close`` in a forked child: the sockets and threads are the parent's to close."""


def _forked_class(cls: type, refused: Sequence[str]) -> type:
    forked = _FORKED.get(cls)
    if forked is None:
        body: dict[str, Any] = {name: _refuse for name in refused}
        body.update(close=_nothing, abort=_nothing, __exit__=_nothing,
                    __doc__=f"A {cls.__name__} in a forked child (``nakflow.live.forks``).")
        forked = _FORKED[cls] = type(f"Forked{cls.__name__}", (cls,), body)
    return forked


def _in_forked_child() -> None:
    for obj in list(_MADE):
        obj.__class__ = _forked_class(type(obj), obj._refused_after_fork)
    _MADE.clear()


os.register_at_fork(after_in_child=_in_forked_child)
