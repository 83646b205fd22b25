"""Compiled twins of the hot modules, with the pure-Python source as the fallback.

The modules in ``HOT`` (the codec, the sequence tracker, the batcher, the flow and rate
control, the history and repair, the receiver's core and queue) are plain Python and stay
the only source.
``nakflow speedups`` (``nakflow.cli.speedups``; ``make setup`` runs it) compiles each of
them, unchanged, with Cython into a twin extension module ``nakflow/<path>_c*.so`` next
to its source (``nakflow/core/gaps_c*.so`` for ``core.gaps``) and stamps the twin with
the SHA-256 of the source it came from. The last line of each hot module calls
``use_compiled(globals())``, which swaps the module's functions and classes for the
twin's when

* ``NAKFLOW_PURE_PYTHON`` is unset or empty (``1``: run the pure Python, e.g. to compare),
* the twin imports (it was built, for this Python),
* and it was built from this very source: a twin older than an edit of its source is
  stale and is not used (pure Python runs, ``status()`` and a warning say so, and
  ``nakflow speedups`` rebuilds it).

A hot module must not hold module-level state that changes (a registry, a cache): the
twin runs the module's body again and would hold its own copy (such state lives in
``nakflow.policy.rate_memory`` and ``nakflow.policy.mode_tables``). The compiled classes
keep the pure module's name (``__module__``), so pickles name ``nakflow.wire.codec.Data``
whichever runs. Spark's shipped bundle carries only the ``.py`` files: executors run the
pure Python unless nakflow is installed there with its twins (``nakflow speedups`` on
each node, after ``pip install``).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from typing import Any

#: Modules compiled by ``nakflow speedups``.
#: Names relative to the package (``wire.codec`` is ``nakflow/wire/codec.py``). Not the
#: sender's core nor the live Sender: untyped, their compiled twins ran more instructions a
#: message than Python 3.11's own interpreter, whose attribute caches the twins' generic
#: attribute lookups lack (a 1 -> 1 sender, cachegrind: 5,400 a message in the core with
#: them, 4,797 without, 4,581 all pure; the live sender, one message a frame, 54,300 with
#: them, 46,300-46,700 without; docs/design/history.md, 2026-12-07).
HOT = ("wire.codec", "core.gaps", "core.seqtrack", "core.batch", "policy.bucket",
       "policy.rate", "policy.curve", "policy.credit", "policy.sender_flows", "policy.nak_flow",
       "policy.receiver_flows", "policy.fill", "core.history",
       "core.repair", "live.delivery_queue", "core.receiver_core",
       "core.admission", "core.framer")
TWIN_SUFFIX = "_c"
ENV = "NAKFLOW_PURE_PYTHON"

log = logging.getLogger("nakflow.speedups")
_status: dict[str, str] = {}


def source_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def use_compiled(ns: dict[str, Any]) -> None:
    """Called by a hot module's last line with its ``globals()``: take the compiled
    twin's functions and classes if it may be used (see the module's docstring)."""
    name: str = ns["__name__"]
    short = name.partition(".")[2]  # relative to the package, as in HOT
    if short.endswith(TWIN_SUFFIX) and short[:-len(TWIN_SUFFIX)] in HOT:
        return  # this is the twin itself
    if os.environ.get(ENV):
        _status[short] = f"pure ({ENV} is set)"
        return
    try:
        twin = importlib.import_module(name + TWIN_SUFFIX)
    except ImportError:
        _status[short] = "pure (not compiled: run 'nakflow speedups')"
        return
    if getattr(twin, "_SOURCE_SHA256", None) != source_sha256(ns["__file__"]):
        _status[short] = "pure (stale: its source changed since it was compiled)"
        log.warning("nakflow.%s: the compiled module is older than its source; running the "
                    "pure Python (rebuild: nakflow speedups)", short)
        return
    for key, value in vars(twin).items():
        if getattr(value, "__module__", None) == twin.__name__:
            try:
                value.__module__ = name
            except (AttributeError, TypeError):
                pass
            ns[key] = value
    _status[short] = "compiled"


def status() -> dict[str, str]:
    """Each hot module: ``"compiled"``, or ``"pure (why)"``."""
    for short in HOT:
        importlib.import_module(f"nakflow.{short}")
    return {short: _status.get(short, "pure") for short in HOT}
