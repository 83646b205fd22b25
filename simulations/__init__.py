"""Latency simulations of nakflow's NAK and ACK modes, driving the real controllers.

``simulate(SimParams(...), mode)`` runs one deployment; ``SCENARIOS`` holds the
named ones behind ``nakflow simulate``. Depends on nakflow, never the reverse.
"""

from .model import SimParams, simulate
from .scenarios import SCENARIOS, Scenario, run_tasks, table_rows, tasks_for
from .vectorized import VecCreditGranter, VecFillMonitor

__all__ = ["SCENARIOS", "Scenario", "SimParams", "VecCreditGranter", "VecFillMonitor",
           "run_tasks", "simulate", "table_rows", "tasks_for"]
