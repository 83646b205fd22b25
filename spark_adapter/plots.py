"""PNG plots of an evaluation (matplotlib, the 'plot' extra)."""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from nakflow._timeline import rate_series

STYLES = ("-", "--", ":", "-.")


def plot_eval(out: str, result: dict[str, Any]) -> list[str]:
    """Per mode: each receiver's delivery rate and queue depth over time; and a summary."""
    runs = [r for r in result["runs"] if r["receivers"]]
    if not runs:
        return []
    paths = []
    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 3.2 * len(runs)), squeeze=False)
    for row, run in zip(axes, runs, strict=True):
        ax_rate, ax_q = row
        for j, r in enumerate(run["receivers"]):
            tl = r["timeline"]
            ts, rate = rate_series(tl["t"], tl["delivered"], 0.1)
            ls = STYLES[j % len(STYLES)]
            ax_rate.plot(ts, rate, ls=ls, lw=1.0, label=r["receiver_id"])
            ax_q.plot(tl["t"], tl["depth"], ls=ls, lw=1.0, label=r["receiver_id"])
        cap = run["receivers"][0]["capacity_msgs"]
        ax_q.axhline(cap, color="red", lw=0.6, ls=":", label="capacity")
        ax_rate.set_title(f"{run['mode']}: rows delivered per s (100 ms windows)", fontsize=9)
        ax_q.set_title(f"{run['mode']}: queue depth, rows", fontsize=9)
        for ax in row:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
    for ax in axes[-1]:
        ax.set_xlabel("time since the receiver started, s")
    fig.tight_layout()
    paths.append(_save(fig, out, "eval-timelines.png"))

    fig, (ax_g, ax_d) = plt.subplots(1, 2, figsize=(11, 4))
    names = [r["receiver_id"] for r in runs[0]["receivers"]]
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        by_name = {r["receiver_id"]: r for r in run["receivers"]}
        xs = [i + k * width for i in range(len(names))]
        ax_g.bar(xs, [by_name[n]["goodput_msgs"] if n in by_name else 0 for n in names],
                 width, label=run["mode"])
        ax_d.bar(xs, [run["rows"] - by_name[n]["delivered"] if n in by_name else 0
                      for n in names], width, label=run["mode"])
    for ax, title in ((ax_g, "goodput per receiver, rows/s"),
                      (ax_d, "rows not delivered (dropped or lost)")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(_save(fig, out, "eval-summary.png"))
    return paths


def _save(fig: Any, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
