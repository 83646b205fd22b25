"""The tables nakflow prints (demo, eval, simulate), with a legend under each.

One glossary for every table, in the same words as README's "Reading the tables", so
a column means the same thing wherever it appears. A table names its overrides where
a column's meaning is particular to it (e.g. which receivers a run has).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

#: Legend lines wrap at this width.
WIDTH = 96

COLUMNS: dict[str, str] = {
    "mode": "flow control: nak (senders cut their rate on receivers' NAKs), ack (credit "
            "from every receiver), none (no flow control)",
    "receiver": "which receiver; slow consumes at a fixed rate, fast-N as fast as it can, "
                "stalled stops consuming for a while",
    "point": "the swept parameter's value for this row ('-': the scenario is no sweep)",
    "scenario": "which deployment ran (described above the table, or by nakflow simulate "
                "--list)",
    "rows_per_s": "the whole job: rows sent / job wall time (the same on every row of a "
                  "mode)",
    "send_rate": "messages per second the sender(s) sent",
    "goodput": "messages per second this receiver delivered to its application",
    "slowest": "the lowest goodput of any live receiver",
    "delivered": "messages delivered to this receiver's application",
    "missing": "messages sent but not delivered here (sent - delivered)",
    "dropped": "messages this receiver's full queue dropped (repair may bring them back: "
               "see repaired)",
    "repaired": "messages delivered after a repair re-sent them from the sender's history",
    "lost": "messages that never arrived (lost in flight) and were not repaired",
    "beyond_history": "lost or dropped, and no longer in the sender's history when the "
                      "receiver asked for it (nak with repair)",
    "dropped_unrepaired": "messages this receiver's full queue dropped that no repair "
                          "brought back",
    "missed_before_join": "messages a sender sent before this receiver joined its stream",
    "dups": "messages that arrived more than once (e.g. a retried Spark task re-sent its "
            "partition)",
    "complete": "senders whose stream this receiver holds whole (its END came and "
                "nothing is missing) / senders in the run",
    "done_s": "seconds from the job's start until this receiver delivered its last "
              "message to its application (the job ends once every receiver holds every "
              "message: what a queue still holds then is delivered after it)",
    "queue_peak": "most messages ever waiting in this receiver's queue (bound: its "
                  "capacity)",
    "blocked_s": "seconds the sender(s) waited for the rate limit or credit, summed",
    "fb_frames": "feedback frames the sender(s) received (NAKs, credits, repair requests, "
                 "HELLO answers), summed",
    "fb_per_s": "feedback frames per second arriving at one sender",
    "fb_start": "feedback frames this receiver sent in its first second of data (its "
                "start), every kind",
    "fb_after": "feedback frames this receiver sent after its first second (HELLO, "
                "NAK, PROGRESS or credit, repair requests, RECEIPT, BYE)",
    "flow_start": "of fb_start, the NAKs and PROGRESS (nak) or credits (ack)",
    "flow_after": "of fb_after, the NAKs and PROGRESS (nak) or credits (ack): 0 for a "
                  "healthy NAK receiver, which is silent after its start",
    "progress": "PROGRESS frames this receiver sent (nak: answers to a sender in its "
                "start, at most one a millisecond; less often past 50 receivers)",
    "fb_per_s_at_sender": "feedback frames per second arriving at the sender",
    "cuts": "times a NAK cut a sender's rate limit, summed",
    "naks": "NAKs this receiver sent",
    "credits": "credit frames this receiver sent (ack mode)",
    "p50_ms": "median latency from send to delivery to the application (the time in "
              "the receiver's queue included; sampled), ms",
    "p99_ms": "99th percentile latency from send to delivery, ms",
    "recovery_s": "seconds from the fault until the other receivers' goodput was back to "
                  "90 % ('-': no fault, or never back)",
    "wall_s": "seconds this run took to simulate",
    "sent": "messages the sender(s) sent",
}


def format_table(rows: Sequence[Mapping[str, Any]], *, legend: bool = True,
                 notes: Mapping[str, str] | None = None) -> str:
    """Rows as aligned columns; with ``legend``, one line per column under the table
    (``notes`` override or add to the glossary for this table). The columns are every key
    any row has, in the order first seen; a row without one shows ``-`` there."""
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(c for r in rows for c in r))
    cells = [[str(r.get(c, "-")) for c in cols] for r in rows]
    width = {c: max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)}
    line = "  ".join(c.rjust(width[c]) for c in cols)
    body = ["  ".join(v.rjust(width[c]) for v, c in zip(row, cols, strict=True))
            for row in cells]
    out = [line, "-" * len(line), *body]
    if legend:
        words = {**COLUMNS, **(notes or {})}
        pad = max(len(c) for c in cols)
        out += ["", "where:"]
        for c in cols:
            out += textwrap.wrap(words.get(c, ""), width=WIDTH, break_on_hyphens=False,
                                 initial_indent=f"  {c.ljust(pad)}  ",
                                 subsequent_indent=" " * (pad + 4)) or [f"  {c}"]
    return "\n".join(out)


def parse_table(text: str) -> list[dict[str, str]]:
    """The rows of the first table printed by :func:`format_table` in ``text`` (what
    comes before its header and after its rows, such as the legend, is skipped)."""
    lines = text.strip().splitlines()
    rule = next((i for i, line in enumerate(lines) if line and set(line) == {"-"} and i > 0),
                None)
    if rule is None:
        raise ValueError("no table in the text (no header line above a line of dashes)")
    header = lines[rule - 1].split()
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(dict(zip(header, line.split(), strict=True)))
    return rows
