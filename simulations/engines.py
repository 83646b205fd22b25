"""Which engine runs a simulation: the real protocol cores (``scenario_cores``) or the
vectorised model (``model``). No numpy here: ``nakflow``'s command line imports it."""

from __future__ import annotations

from typing import Any

#: engine="auto" runs the real cores up to this many receivers x senders (their cost
#: grows with both: about 0.05 s of wall time per receiver per simulated second).
CORES_MAX_STREAMS = 100
ENGINES = ("auto", "cores", "model")
#: What the vectorised model leaves out, printed with every table it made.
MODEL_LEAVES_OUT = (
    "the vectorised model runs the real sender policies (NAK rate controller, token "
    "bucket, credit ledger) with numpy copies of the receivers' fill and credit "
    "decisions; it leaves out repair (its drops stay missing: see 'unrepaired'), the "
    "queueing-delay and loss signals, framing, HELLO/END, the measured RTT, NAK's start "
    "(its PROGRESS window: the model ramps from initial_rate_msgs), and the "
    "transport's disconnect signal (its ACK evicts a dead receiver after "
    "receiver_timeout_s, the cores and live senders at once over tcp/ipc)")


def pick_engine(params: Any, engine: str) -> str:
    """``cores`` or ``model`` for ``params`` (a SimParams); ``auto`` picks the cores up
    to CORES_MAX_STREAMS receivers x senders."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine == "auto":
        small = params.receivers * params.senders <= CORES_MAX_STREAMS
        return "cores" if small else "model"
    return engine
