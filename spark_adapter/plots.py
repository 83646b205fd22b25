"""PNG plots of an evaluation (matplotlib, the 'plot' extra)."""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from nakflow.report import rate_series

STYLES = ("-", "--", ":", "-.")


def rows_per_message(receiver: dict[str, Any], config: dict[str, Any]) -> float:
    """Rows a message carried at ``receiver``: what it counted (rows over messages
    delivered), else the writer's (``batch_rows`` with the data source, 1 with foreach).
    The receivers count messages; the data source's are Arrow messages of many rows, and
    plotted as messages its rows looked 128x fewer (157 "rows/s" where 20,000 went)."""
    rows, delivered = receiver.get("rows"), receiver.get("delivered")
    if rows and delivered:
        return float(rows / delivered)
    return float(config.get("batch_rows", 1)) if config.get("writer") == "datasource" else 1.0


def delivery_series(receiver: dict[str, Any],
                    config: dict[str, Any]) -> tuple[list[float], list[float]]:
    """``receiver``'s rows delivered per second over 100 ms windows: (times, rates)."""
    tl, per = receiver["timeline"], rows_per_message(receiver, config)
    ts, rate = rate_series(tl["t"], tl["delivered"], 0.1)
    return list(ts), [x * per for x in rate]


def queue_series(receiver: dict[str, Any],
                 config: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The rows waiting in ``receiver``'s queue over time: (times, rows)."""
    tl, per = receiver["timeline"], rows_per_message(receiver, config)
    return list(tl["t"]), [d * per for d in tl["depth"]]


def plot_eval(out: str, result: dict[str, Any]) -> list[str]:
    """Per mode: each receiver's delivery rate and queue depth over time; and a summary."""
    runs = [r for r in result["runs"] if r["receivers"]]
    if not runs:
        return []
    paths = []
    cfg = result.get("config", {})
    #: the printed table's rows: its counts are rows, where the receivers count messages
    table = {(row["mode"], row["receiver"]): row for row in result["table"]}
    msgs = runs[0]["receivers"][0]["capacity_msgs"]
    bound = (f"{msgs:,} messages of up to {cfg['batch_rows']:,} rows"
             if cfg.get("writer") == "datasource" and "batch_rows" in cfg else f"{msgs:,} rows")
    setup = (f"{result['rows']:,} rows from {result['partitions']} Spark tasks to "
             f"{len(runs[0]['receivers'])} receivers;\n'slow' consumes "
             f"{cfg.get('slow_rate', 0):,.0f} rows/s, the others as fast as they can; "
             f"queue bound {bound}")
    stall = ((cfg.get("stall_at_s", 0.0), cfg.get("stall_at_s", 0.0) + cfg["stall_for_s"])
             if cfg.get("stall_for_s") else None)
    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 3.0 * len(runs) + 0.9), squeeze=False)
    for row, run in zip(axes, runs, strict=True):
        ax_rate, ax_q = row
        for j, r in enumerate(run["receivers"]):
            ls = STYLES[j % len(STYLES)]
            ax_rate.plot(*delivery_series(r, cfg), ls=ls, lw=1.0, color=f"C{j}",
                         label=r["receiver_id"])
            ax_q.plot(*queue_series(r, cfg), ls=ls, lw=1.0, color=f"C{j}")
        first = run["receivers"][0]
        cap = first["capacity_msgs"] * rows_per_message(first, cfg)
        ax_q.axhline(cap, color="red", lw=0.6, ls=":", label="queue bound")
        ax_q.set_ylim(0, cap * 1.12)
        if stall is not None:
            for ax in row:
                ax.axvspan(*stall, color="grey", alpha=0.15, lw=0,
                           label="'stalled' receiver stops consuming")
        missing = max(table[run["mode"], r["receiver_id"]]["missing"] for r in run["receivers"])
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
    inch = 1.0 / fig.get_figheight()  # the title's two lines, then the legend's, in inches
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=len(handles),
               fontsize=8, bbox_to_anchor=(0.5, 1 - 0.55 * inch), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.8 * inch))
    paths.append(_save(fig, out, "eval-timelines.png"))

    fig, (ax_g, ax_d, ax_l) = plt.subplots(1, 3, figsize=(15, 4.4))
    names = [r["receiver_id"] for r in runs[0]["receivers"]]
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):  # the printed table's numbers: rows, not messages
        xs = [i + k * width for i in range(len(names))]
        for ax, column, fmt, turn in ((ax_g, "goodput", "{:,.0f}", 90),
                                      (ax_d, "missing", "{:,.0f}", 0),
                                      (ax_l, "p50_ms", "{:,.1f}", 90)):
            bars = ax.bar(xs, [(table.get((run["mode"], n)) or {}).get(column) or 0
                               for n in names], width, label=run["mode"])
            ax.bar_label(bars, fmt=fmt, fontsize=7, rotation=turn, padding=2)
    for ax, title in ((ax_g, "goodput: rows/s each receiver delivered to its application"),
                      (ax_d, "rows each receiver did not get (dropped or lost; 0 = all)"),
                      (ax_l, "median latency, send to delivery (its queue's wait in it), ms")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        ax.set_title(title, fontsize=9)
        top = max((bar.get_height() for bar in ax.patches), default=0.0)
        ax.set_ylim(0, max(top, 1.0) * 1.3)  # room for the labels; 0 at the bottom
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"nakflow eval: {setup}", fontsize=10)
    inch = 1.0 / fig.get_figheight()
    fig.legend(*ax_g.get_legend_handles_labels(), loc="upper center", ncol=len(runs),
               fontsize=8, title="mode", title_fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.45 * inch))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.85 * inch))
    paths.append(_save(fig, out, "eval-summary.png"))
    return paths


def _save(fig: Any, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
