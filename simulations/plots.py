"""PNG plots of simulation results (matplotlib, the 'plot' extra)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from nakflow.report import rate_series

COLORS = {"nak": "tab:blue", "ack": "tab:orange", "none": "tab:gray"}
SWEEP_LABELS = {"rtt_s": "round-trip time, s", "receivers": "receivers"}


def engine_note(results: Sequence[dict[str, Any]]) -> str:
    """What ran ``results``, for a plot's title: the real cores have repair, the vectorised
    model has none (a sweep run on the cores was captioned "this model has no repair")."""
    engines = {r.get("engine", "model") for r in results}
    if engines == {"cores"}:
        return "the real protocol cores, repair on (NAK's drops are re-sent from the history)"
    if engines == {"model"}:
        return ("the vectorised model, which has no repair (live and on the cores, NAK's "
                "drops are re-sent from the history)")
    return "the real protocol cores (repair on) where small, the vectorised model (no repair) above"


def plot_results(out: str, scenario: str, results: Sequence[dict[str, Any]]) -> list[str]:
    """Rate and queue traces per mode (first point); for sweeps, the sweep curves."""
    paths = []
    first = results[0]["point"]
    per_mode = [r for r in results if r["point"] == first]
    params = per_mode[0]["params"]
    fig, (ax_rate, ax_q) = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True)
    senders = int(params.get("senders", 1))  # the trace sums what they sent; the limit is
    # the first one's (3 senders at 10,000 msgs/s in all drew under a limit of 3,300)
    summed, one = ((f", {senders} senders summed", " of one sender") if senders > 1
                   else ("", ""))
    for r in per_mode:
        tr, c = r["trace"], COLORS.get(r["mode"])
        t = tr["t"]
        ts, rate = rate_series(t, tr["sent"], 0.1)
        ax_rate.plot(ts, rate, color=c, lw=1.0,
                     label=f"{r['mode']} send rate (100 ms{summed})")
        if r["mode"] == "nak":
            ax_rate.plot(t, [v if v is not None else float("nan") for v in tr["rate_limit"]],
                         color="tab:green", lw=0.7, ls="--", label=f"nak rate limit{one}")
        roles = {rx["id"]: rx["role"] for rx in r["receivers"]}
        for j, (name, q) in enumerate(tr["queue"].items()):
            ax_q.plot(t, q, color=c, lw=0.8, ls=["-", ":", "-.", "--"][j % 4],
                      label=f"{r['mode']} {name} ({roles.get(name, '?')})")
    cap = params["capacity_msgs"]
    ax_q.axhline(cap, color="red", lw=0.6, ls=":", label="queue bound")
    ax_q.set_ylim(0, cap * 1.15)
    _mark_events(ax_rate, ax_q, params, {r["mode"] for r in per_mode})
    ax_rate.set_ylabel("msgs/s (log scale)")
    ax_rate.set_yscale("log")
    ax_rate.set_title(f"the sender{'s' if senders > 1 else ''}: send rate and NAK rate limit",
                      fontsize=9)
    ax_q.set_title("receivers' queues: one receiver of each role is drawn", fontsize=9)
    ax_q.set_ylabel("queue depth, msgs")
    ax_q.set_xlabel("time, s")
    for ax in (ax_rate, ax_q):  # legends beside the plots, where they cover nothing
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax.grid(alpha=0.3)
    point = "" if first == "-" else f" at {first}"
    fig.suptitle(f"simulation '{scenario}'{point}: {params['receivers']:,} receivers, "
                 f"RTT {params['rtt_s'] * 1000:g} ms, queue bound {cap:,} msgs\n"
                 f"{engine_note(per_mode)}", fontsize=10)
    fig.tight_layout()
    paths.append(_save(fig, out, f"{scenario}-traces.png"))

    if len({r["point"] for r in results}) > 1:
        param = first.split("=")[0]
        fig, (ax_g, ax_d, ax_f) = plt.subplots(1, 3, figsize=(15, 4.4))
        for mode in dict.fromkeys(r["mode"] for r in results):
            rs = [r for r in results if r["mode"] == mode]
            xs = [float(r["point"].split("=")[1]) for r in rs]
            kw = {"color": COLORS.get(mode), "label": mode}
            ax_g.plot(xs, [r["goodput"]["overall"] for r in rs], "o-", **kw)
            ax_d.plot(xs, [r["dropped"] for r in rs], "o-", **kw)
            ax_f.plot(xs, [r["feedback_per_s_at_sender"] for r in rs], "o-", **kw)
        for ax, ylabel in ((ax_g, "goodput per receiver, msgs/s"),
                           (ax_d, "messages dropped by full queues, all receivers"),
                           (ax_f, "feedback frames/s at the sender")):
            ax.set_xscale("log")
            ax.set_xlabel(SWEEP_LABELS.get(param, param))
            ax.set_ylabel(ylabel)
            ax.legend(title="mode", fontsize=8, title_fontsize=8)
            ax.grid(alpha=0.3)
        for ax in (ax_d, ax_f):
            ax.set_yscale("symlog", linthresh=1)
            ax.set_ylim(0, max(2.0, ax.get_ylim()[1]))  # all 0: an axis to 2, not to 0.05
        fig.suptitle(f"simulation '{scenario}': {params['receivers']:,} receivers, queue bound "
                     f"{cap:,} msgs; {engine_note(results)}", fontsize=9)
        fig.tight_layout()
        paths.append(_save(fig, out, f"{scenario}-sweep.png"))
    return paths


def _mark_events(ax_rate: Any, ax_q: Any, p: dict[str, Any], modes: set[str]) -> None:
    """Vertical markers for the scenario's events: a death (and ACK's eviction of the
    dead receiver), pauses; labelled once, in the legend."""
    end = p["duration_s"]
    if p.get("dead"):
        for ax in (ax_rate, ax_q):
            ax.axvline(p["dead_at_s"], color="black", lw=0.9, ls="--",
                       label=f"{p['dead']} receiver(s) die" if ax is ax_q else None)
        evict = p["dead_at_s"] + p["receiver_timeout_s"]
        if "ack" in modes and evict < end:
            for ax in (ax_rate, ax_q):
                ax.axvline(evict, color="tab:orange", lw=0.9, ls="-.",
                           label="ack evicts the dead (receiver_timeout_s)"
                           if ax is ax_q else None)
    if p.get("paused") and p.get("pause_for_s", 0) > 0:
        t, first = p["pause_at_s"], True
        while t < end:
            for ax in (ax_rate, ax_q):
                ax.axvspan(t, t + p["pause_for_s"], color="grey", alpha=0.18, lw=0,
                           label=f"{p['paused']} receiver(s) paused" if first and ax is ax_q
                           else None)
            first = False
            if not p.get("pause_every_s"):
                break
            t += p["pause_every_s"]


def _save(fig: Any, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
