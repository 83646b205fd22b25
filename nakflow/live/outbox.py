"""Frames a core hands out, onto a socket, none lost to an exception part way.

A signal's handler (Ctrl-C's ``KeyboardInterrupt``, the CLI's SIGTERM) runs in the main
thread where CPython checks for it: as a Python function is entered, after a compiled
call returns, and inside pyzmq, as each of its calls returns (``_check_rc``), so after a
send whose frame went. Sent from a list the core had let go of, the frames after such a
send were lost with their seqs: the abort that followed sent the next frame, and the
receivers counted the ones between ``lost`` (an ACK chaos run's 133 at all three
receivers of a sender stopped by SIGTERM). They go back to the core now, ahead of
anything newer, and leave with the next frames (an abort's, before BYE).
"""

from __future__ import annotations

import zmq
from zmq.backend import Socket as _CompiledSocket

from ..wire.endpoint import Endpoint

#: pyzmq's compiled send: unlike ``zmq.Socket.send`` (Python, whose entry is a point where
#: a handler runs), nothing runs between the call and its frame going out, so whether a
#: frame went is known from where the exception came.
_SEND = _CompiledSocket.send


def send_all(core: Endpoint, sock: zmq.Socket[bytes]) -> None:
    """Send every frame ``core`` has due on ``sock``, in order; on an exception, those
    not sent stay the core's (a ``zmq.ZMQError``: its frame did not go; any other, a
    handler's: it came out of a send whose frame went, or after it)."""
    frames = core.frames_to_send()
    went = 0
    try:
        for buf in frames:
            went += 1  # counted before the call: no handler runs between the two
            _SEND(sock, buf, 0, True)
    except BaseException as exc:
        if isinstance(exc, zmq.ZMQError):
            went -= 1
        core.unsent(frames[went:])
        raise
