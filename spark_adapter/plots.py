"""PNG plots of an evaluation (matplotlib, the 'plot' extra)."""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from nakflow.report import rate_series

STYLES = ("-", "--", ":", "-.")


def plot_eval(out: str, result: dict[str, Any]) -> list[str]:
    """Per mode: each receiver's delivery rate and queue depth over time; and a summary."""
    runs = [r for r in result["runs"] if r["receivers"]]
    if not runs:
        return []
    paths = []
    cfg = result.get("config", {})
    setup = (f"{result['rows']:,} rows from {result['partitions']} Spark tasks to "
             f"{len(runs[0]['receivers'])} receivers;\n'slow' consumes "
             f"{cfg.get('slow_rate', 0):,.0f} rows/s, the others as fast as they can; "
             f"queue bound {runs[0]['receivers'][0]['capacity_msgs']:,} rows")
    stall = ((cfg.get("stall_at_s", 0.0), cfg.get("stall_at_s", 0.0) + cfg["stall_for_s"])
             if cfg.get("stall_for_s") else None)
    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 3.0 * len(runs) + 0.9), squeeze=False)
    for row, run in zip(axes, runs, strict=True):
        ax_rate, ax_q = row
        for j, r in enumerate(run["receivers"]):
            tl = r["timeline"]
            ts, rate = rate_series(tl["t"], tl["delivered"], 0.1)
            ls = STYLES[j % len(STYLES)]
            ax_rate.plot(ts, rate, ls=ls, lw=1.0, color=f"C{j}", label=r["receiver_id"])
            ax_q.plot(tl["t"], tl["depth"], ls=ls, lw=1.0, color=f"C{j}")
        cap = run["receivers"][0]["capacity_msgs"]
        ax_q.axhline(cap, color="red", lw=0.6, ls=":", label="queue bound")
        ax_q.set_ylim(0, cap * 1.12)
        if stall is not None:
            for ax in row:
                ax.axvspan(*stall, color="grey", alpha=0.15, lw=0,
                           label="'stalled' receiver stops consuming")
        missing = max(run["rows"] - r["delivered"] for r in run["receivers"])
        ax_rate.set_title(f"{run['mode']}: rows delivered per s (100 ms windows); job "
                          f"{run['rows'] / run['job_s']:,.0f} rows/s, at most {missing:,} "
                          "missing at a receiver", fontsize=9)
        ax_q.set_title(f"{run['mode']}: rows waiting in each receiver's queue", fontsize=9)
        for ax in row:
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("time since the receiver started, s")
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.suptitle(f"nakflow eval, each receiver over time: {setup}", fontsize=10)
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=len(handles),
               fontsize=8, bbox_to_anchor=(0.5, 0.955), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    paths.append(_save(fig, out, "eval-timelines.png"))

    fig, (ax_g, ax_d) = plt.subplots(1, 2, figsize=(12, 4.4))
    names = [r["receiver_id"] for r in runs[0]["receivers"]]
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        by_name = {r["receiver_id"]: r for r in run["receivers"]}
        xs = [i + k * width for i in range(len(names))]
        bars = ax_g.bar(xs, [round(by_name[n]["goodput_msgs"]) if n in by_name else 0
                             for n in names], width, label=run["mode"])
        ax_g.bar_label(bars, fmt="{:,.0f}", fontsize=7, rotation=90, padding=2)
        bars = ax_d.bar(xs, [run["rows"] - by_name[n]["delivered"] if n in by_name else 0
                             for n in names], width, label=run["mode"])
        ax_d.bar_label(bars, fmt="{:,.0f}", fontsize=7, padding=2)
    for ax, title in ((ax_g, "goodput: rows/s each receiver delivered to its application"),
                      (ax_d, "rows each receiver did not get (dropped or lost; 0 = all)")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        ax.set_title(title, fontsize=9)
        ax.margins(y=0.2)
        ax.legend(fontsize=8, title="mode", title_fontsize=8, loc="upper left")
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"nakflow eval: {setup}", fontsize=10)
    fig.tight_layout()
    paths.append(_save(fig, out, "eval-summary.png"))
    return paths


def _save(fig: Any, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
