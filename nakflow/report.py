"""One-line summaries of a sender's or receiver's snapshot, and whether the run was clean.

``nakflow send`` and ``nakflow receive`` print these, and exit non-zero when
``problems`` is not empty (``--allow-loss`` keeps the old behaviour). The same
functions serve a Python user who wants the verdict without reading the report:

    >>> verdict = receiver_verdict(rx.snapshot(), expect_senders=1)
    >>> print(verdict.line); sys.exit(1 if verdict.problems else 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .core.timeline import rate_series

__all__ = ["MISSING_REASONS", "Verdict", "at_close_problems", "rate_series",
           "receiver_verdict", "sender_verdict", "stream_counts"]

#: Why a message counted in a stream was not delivered, in the order they are printed.
MISSING_REASONS = ("lost", "dropped", "beyond_history", "missed_before_join")


@dataclass(frozen=True)
class Verdict:
    """``line``: what happened, in one line; ``problems``: what was not right (empty: all
    was delivered, every peer agreed on the mode and key, somebody answered); of them,
    ``mismatches``: peers configured differently (``--allow-loss`` does not excuse those)."""

    line: str
    problems: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


def _n(x: int) -> str:
    return f"{x:,}"


def _mismatches(snap: dict[str, Any]) -> list[str]:
    out = []
    if snap.get("mode_mismatch"):
        out.append(f"{_n(snap['mode_mismatch'])} frames from peers in another mode "
                   "(check every side's --mode)")
    if snap.get("key_mismatch"):
        out.append(f"{_n(snap['key_mismatch'])} frames from peers with another shared key, "
                   "or none (check every side's --shared-key)")
    clashes = snap.get("receiver_id_clashes")
    if clashes:
        out.append(f"more than one receiver answers as {', '.join(map(repr, clashes))}: each "
                   "needs an id of its own (check every receiver's --id); each id was counted "
                   "as one receiver")
    return out


def receiver_verdict(snap: dict[str, Any], *, expect_senders: int | None = None,
                     service: bool = False) -> Verdict:
    """``delivered X of Y from N senders, Z missing (reasons)``, and the problems: messages
    missing, senders that sent no END (or fewer than ``expect_senders`` did), nobody
    heard, the receiver, its handler or its sink failing, peers in another mode or with
    another key. A ``service`` (one that runs until it is stopped) is judged on what it
    did get: streams still going when it stopped, and hearing nobody, are no problem
    there. Left out of the count, and named: an attempt a complete retry covers
    (``superseded``), a sender that left before it sent anything."""
    streams, retried, unstarted = _counted(snap)
    reach: dict[str, int] = {}  # with drop_duplicates a seq is one message in any epoch
    total = 0
    for s in streams:
        n = s["final_seq"] if s["final_seq"] is not None else s["next_seq"]
        if snap.get("drop_duplicates"):
            reach[s["sender"]] = max(reach.get(s["sender"], 0), n)
        else:
            total += n
    total += sum(reach.values())
    by_reason = {r: sum(s["missing_by_reason"].get(r, 0) for s in streams)
                 for r in MISSING_REASONS}
    missing = sum(by_reason.values())
    queued = snap.get("queued", 0)
    delivered = max(0, total - missing - queued)
    ended = len({s["sender"] for s in streams if s["final_seq"] is not None})  # ids
    line = (f"delivered {_n(delivered)} of {_n(total)} from {len(streams)} "
            f"sender{'s' if len(streams) != 1 else ''}, {_n(missing)} missing")
    rows = snap.get("rows")
    if rows is not None and rows > delivered:  # Arrow messages: rows are what users count
        line = (f"delivered {_n(delivered)} messages ({_n(rows)} rows) of {_n(total)} from "
                f"{len(streams)} sender{'s' if len(streams) != 1 else ''}, {_n(missing)} "
                "messages missing")
    reasons = ", ".join(f"{r} {_n(v)}" for r, v in by_reason.items() if v)
    if reasons:
        line += f" ({reasons})"
    if retried:
        line += (f"; {len(retried)} earlier attempt{'s' if len(retried) != 1 else ''} "
                 "left for a retry that delivered all of it")
    if unstarted:
        line += (f"; {len(unstarted)} sender{'s' if len(unstarted) != 1 else ''} left "
                 "before sending anything")
    problems = _failures(snap)  # first: a failure is what the rest follows from
    if missing:
        problems.append(f"{_n(missing)} messages missing ({reasons})")
    if queued:
        line += f", {_n(queued)} still queued"
    # streams, not ids: a task and its speculative copy (one id) may both end
    open_streams = sum(1 for s in streams if s["final_seq"] is None)
    silent = min(open_streams, snap.get("senders_silent", 0))  # core.silence
    if open_streams:
        line += f"; {open_streams} without END"
        why = "stopped, or still sending"
        if silent:
            why = (f"{'all' if silent == open_streams else silent} fell silent, nothing heard "
                   f"for {snap.get('sender_gone_s', 0):g} s: killed, or cut off"
                   + ("" if silent == open_streams else f"; the others {why}"))
        if not service:  # a service is judged on what it got (its log names the silent)
            problems.append(f"{open_streams} sender(s) sent no END ({why})")
    if expect_senders is not None and ended < expect_senders:
        ids = len({s["sender"] for s in streams})
        shared = ("" if ids == len(streams) else f" (senders counted by id: the {len(streams)} "
                  f"streams came from {ids}, as a task's attempts share its id)")
        problems.append(f"END from {ended} of the {expect_senders} senders expected{shared}")
    if not streams and not service:
        other = snap.get("foreign_stream")
        problems.append(
            "no sender was heard (check --data/--feedback and that senders connect to these "
            "endpoints)" if other is None else
            f"no sender of stream {snap.get('stream')!r} was heard, but frames of stream "
            f"{other!r} were: the senders' --stream differs from this receiver's")
    mismatches = _mismatches(snap)
    return Verdict(line, problems + mismatches, mismatches)


def _counted(snap: dict[str, Any]) -> tuple[list[dict[str, Any]], set[int], set[int]]:
    """The streams a verdict counts, and (indexes in the snapshot's ``senders``) those it
    leaves out: attempts a retry covers (``superseded``), and senders that left (BYE)
    before they sent anything, their wait for receivers run out (nothing of them is
    missing, and the sender itself failed and said so)."""
    every = snap.get("senders") or []
    retried = superseded(every)
    unstarted = {i for i, s in enumerate(every) if s.get("left") and s["final_seq"] is None
                 and not s["next_seq"] and not s["received"]}
    return ([s for i, s in enumerate(every) if i not in retried and i not in unstarted],
            retried, unstarted)


def stream_counts(snap: dict[str, Any]) -> dict[str, int]:
    """A receiver snapshot's streams as the verdict counts them: ``complete`` (END, and
    every message up to it delivered), ``open`` (no END yet, its sender neither gone nor
    silent) and ``incomplete`` (the rest: an END with messages missing, or a sender that
    left or fell silent without END). Prometheus' ``nakflow_streams{status}``."""
    streams, _retried, _unstarted = _counted(snap)
    complete = sum(1 for s in streams if s["status"] == "complete")
    going = sum(1 for s in streams if s["final_seq"] is None and not s.get("left"))
    going -= min(going, snap.get("senders_silent", 0))
    return {"complete": complete, "open": going,
            "incomplete": len(streams) - complete - going}


def superseded(streams: list[dict[str, Any]]) -> set[int]:
    """The streams (indexes in ``streams``, a snapshot's ``senders``) that a newer epoch of
    the same sender id covers: complete, with every seq the older one reached (a retried
    Spark task, a restarted ``nakflow send --id``: both send their messages again from
    seq 0). What the older attempt lacks, or that it sent no END, is no loss then."""
    whole: dict[str, list[tuple[int, int]]] = {}
    for s in streams:
        if s["status"] == "complete":
            whole.setdefault(s["sender"], []).append((s["epoch"], s["final_seq"]))
    return {i for i, s in enumerate(streams) if s["status"] != "complete"
            and any(epoch > s["epoch"] and final >= s["next_seq"]
                    for epoch, final in whole.get(s["sender"], ()))}


def _failures(snap: dict[str, Any]) -> list[str]:
    """What failed beside the streams: the receiver itself (``error``), the messages a
    ``handler=`` raised on, the CLI's sink (its ``sink`` row). The delivered line counts
    what reached the application; a sink that died wrote less, which only its row said."""
    out = []
    if snap.get("error"):
        out.append(f"the receiver failed: {snap['error']}")
    if snap.get("handler_errors"):
        out.append(f"the handler raised on {_n(snap['handler_errors'])} messages (logged)")
    sink = snap.get("sink")
    if sink and sink.get("rejected"):
        out.append(f"the sink could not write {_n(sink['rejected'])} messages (the first: "
                   f"{sink['rejected_why']}); it wrote the others")
    if sink and sink.get("error"):
        out.append(f"the sink wrote {_n(sink['written'])} messages, not the other "
                   f"{_n(sink['not_written'])}: {sink['error']}")
    return out


#: Receivers named one a line in a verdict, at most; the rest are counted in one line.
VERDICT_RECEIVERS = 8


def at_close_problems(at_close: list[dict[str, Any]], *, live_only: bool = False,
                      counts: dict[str, int] | None = None) -> list[str]:
    """One line per receiver the close did not find complete (``snapshot()["at_close"]``):
    ``receiver r3: incomplete (beyond_history 65)``, at most VERDICT_RECEIVERS of them
    and a line counting the rest (of ``counts``, ``snapshot()["at_close_counts"]``, if
    given: the report lists a bounded number). ``live_only``: leave out the receivers
    that were gone (BYE, silent, disconnected)."""
    out = []
    short = [c for c in at_close
             if c["status"] != "complete" and not (live_only and c["status"] == "gone")]
    for c in short[:VERDICT_RECEIVERS]:
        why = f" ({c['why']})" if c.get("why") else ""
        out.append(f"receiver {c['receiver']}: {c['status']}{why}")
    total = len(short) if counts is None else sum(
        n for status, n in counts.items()
        if status != "complete" and not (live_only and status == "gone"))
    if total > len(out):
        out.append(f"{total - len(out):,} more receivers not complete (the report's "
                   "at_close_counts)")
    return out


def _at_close_words(snap: dict[str, Any]) -> str:
    counts = snap.get("at_close_counts") or {}
    parts = [f"{n} {status}" for status, n in counts.items() if n]
    return f": {', '.join(parts)}" if parts else ""


def sender_verdict(snap: dict[str, Any], *, planned: int | None = None,
                   interrupted: str | None = None, after_end: bool = False,
                   waited: bool = True) -> Verdict:
    """``sent X msgs in T s (R msgs/s) to N receivers: 3 complete, 1 gone``, and the
    problems: nobody answered, fewer sent than ``planned``, an interruption (before END,
    or ``after_end``: while the close waited for receipts), a receiver
    the close did not find complete (its receipt said what it lacks; it went, or never
    confirmed), messages the receivers asked for that the history no longer held, peers
    in another mode or with another key. ``waited``: False for a sender that sent without
    waiting for its receivers (nobody answering then has another likely cause)."""
    sent, elapsed = snap.get("sent", 0), snap.get("elapsed_s", 0.0)
    receivers = snap.get("receivers_seen") or snap.get("receivers") or 0
    rate = sent / elapsed if elapsed > 0 else 0.0
    line = (f"sent {_n(sent)} msgs in {elapsed:.1f} s ({_n(round(rate))} msgs/s) to "
            f"{receivers} receiver{'s' if receivers != 1 else ''}{_at_close_words(snap)}")
    problems = at_close_problems(snap.get("at_close") or [],
                                 counts=snap.get("at_close_counts"))
    if planned is not None and sent < planned:
        problems.append(f"sent {_n(sent)} of the {_n(planned)} planned")
    if interrupted and after_end:
        problems.append(f"{interrupted} after END, while the close waited for receipts: "
                        "receivers that had not confirmed are unconfirmed")
    elif interrupted:
        problems.append(f"{interrupted}: no END was sent, receivers report the stream "
                        "incomplete")
    if not receivers and not waited and sent:  # the slow joiner, most likely
        problems.append("no receiver answered before the close: nothing was known to "
                        "arrive (it did not wait for its receivers: ZeroMQ drops what is "
                        "sent before a receiver's subscription is in, and none had "
                        "answered when it closed; wait for them, --wait-receivers, and "
                        "check --data/--feedback)")
    elif not receivers:
        problems.append("no receiver answered: nothing was known to arrive (check "
                        "--data/--feedback: the receivers' data and feedback endpoints)")
    endpoints = snap.get("data_endpoints") or []
    if (receivers and not snap.get("multicast") and receivers < len(endpoints)
            and not snap.get("receiver_id_clashes")):  # else ids were shared: said below
        # each tcp/ipc data endpoint is one receiver: one never heard got nothing
        problems.append(f"{receivers} receiver{'s' if receivers != 1 else ''} heard on "
                        f"{len(endpoints)} data endpoints: {len(endpoints) - receivers} "
                        "never answered (down, or not started; --wait-receivers let the "
                        "send go on without it), so nothing is known to have reached it")
    repair = snap.get("repair") or {}
    if repair.get("gone"):
        problems.append(f"{_n(repair['gone'])} messages receivers asked for were no longer "
                        "in the history (beyond_history; see --history-*)")
    mismatches = _mismatches(snap)
    return Verdict(line, problems + mismatches, mismatches)
