"""Latency simulations of nakflow's NAK and ACK modes, driving the real controllers.

``simulate(SimParams(...), mode)`` runs one deployment of the vectorised model;
``SCENARIOS`` holds the named ones behind ``nakflow simulate``, which runs them on the
real protocol cores (``scenario_cores``) up to ``engines.CORES_MAX_STREAMS``. Depends on
nakflow, never the reverse. Names load on first use: ``nakflow send`` and ``receive``
register the ``simulate`` command without importing numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import SimParams, simulate
    from .scenarios import SCENARIOS, Scenario, run_tasks, table_rows, tasks_for
    from .vectorized import VecCreditGranter, VecFillMonitor

_WHERE = {"SimParams": "model", "simulate": "model", "SCENARIOS": "scenarios",
          "Scenario": "scenarios", "run_tasks": "scenarios", "table_rows": "scenarios",
          "tasks_for": "scenarios", "VecCreditGranter": "vectorized",
          "VecFillMonitor": "vectorized"}

__all__ = ["SCENARIOS", "Scenario", "SimParams", "VecCreditGranter", "VecFillMonitor",
           "run_tasks", "simulate", "table_rows", "tasks_for"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'simulations' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
