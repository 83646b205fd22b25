"""What ``nakflow send``, ``receive``, ``keygen`` and ``demo`` do (the parser is in ``cli``).

Every wait here ends: on SIGINT/SIGTERM (``Interrupted``, raised from the signal
handler, so it breaks out of any blocking wait), or after a bounded time. Then the
command prints its report and a one-line verdict (``nakflow.report``) and exits
non-zero if something was missing (``--allow-loss``: only on errors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

from ..config import AckConfig, NakConfig, RepairConfig
from ..errors import ConfigError, PeerMismatch
from ..policy.bucket import TokenBucket
from ..report import Verdict, receiver_verdict, sender_verdict

log = logging.getLogger("nakflow.cli")

#: Exit status of a run that delivered, but not everything (or was interrupted: 128 + signal).
EXIT_INCOMPLETE = 1


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived: the run stops, reports and exits 128 + the
    signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Held:
    """Signals that arrive inside ``signals_held()`` wait for its end; a second one
    raises at once (a user who insists)."""

    depth = 0
    pending: int | None = None


def _raise_interrupted(signum: int, frame: object) -> None:
    if _Held.depth and _Held.pending is None:
        _Held.pending = signum
        return
    _Held.pending = None
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """A SIGINT/SIGTERM inside waits until the block is over, then raises Interrupted:
    a chunk taken from the queue reaches the sink before the stop. Raised between the
    take and the hand-over, it lost that chunk (2 messages of 4,000 in one CI run)."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
    if not _Held.depth and _Held.pending is not None:
        signum, _Held.pending = _Held.pending, None
        raise Interrupted(signum)


def on_signals_interrupt() -> None:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread, wherever it waits.
    SIGHUP (the terminal that started it closed) ended the process where it stood: a
    receiver's queue never reached its sink, and a Parquet file stayed ``.part``."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _raise_interrupted)


#: What the readable report shows (``--json`` has every figure).
PLAIN_KEYS = {
    "send": ("sender_id", "mode", "sent", "frames", "elapsed_s", "rate_msgs", "blocked_s",
             "credit_stalled_s", "rate_limit", "cuts", "cuts_by_signal", "limiting",
             "naks_received", "receivers_seen", "rtt_ms", "repair", "at_close_counts",
             "at_close"),
    "receive": ("receiver_id", "mode", "delivered", "received", "dropped", "repaired",
                "lost", "beyond_history", "missed_before_join", "duplicates", "queued",
                "queue_peak", "goodput_msgs", "latency_ms", "naks_sent", "naks_by_signal",
                "credits_sent", "sink", "senders"),
}


def say(text: str, file: Any = None) -> None:
    """Write ``text`` and its newline to ``file`` (stderr) in one write, flushed.

    ``print`` writes the text and the newline separately, so the lines of processes that
    share one stderr (receivers started with ``&`` in one shell, a Spark worker's
    children) could be spliced: one process's text, the other's line, then the newline.
    One write of a whole line (under the pipe's 4 KiB atomic limit) cannot be."""
    file = file or sys.stderr
    file.write(text + "\n")
    file.flush()


def emit(result: dict[str, Any], as_json: bool, file: Any = None,
         keys: Sequence[str] | None = None) -> None:
    """Print a run's metrics: one JSON object, or a short readable listing of ``keys``
    (scalars one a line, a dict's scalars on its line, a list of rows last), in one
    write (``say``)."""
    file = file or sys.stdout
    if as_json:
        say(json.dumps(result, sort_keys=True, default=str), file)
        return
    lines, nested = [], []
    for key in keys or list(result):
        value = result.get(key)
        if key == "timeline":
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()
                              if not isinstance(v, (dict, list))) or "-"
        elif isinstance(value, list):
            nested.append((key, value))
            continue
        lines.append(f"{key:>20}: {value}")
    for key, rows in nested:
        lines.append(f"{key}:")
        lines.extend("  " + ", ".join(f"{k} {v}" for k, v in row.items()
                                      if not isinstance(v, (dict, list))) for row in rows)
    if lines:
        say("\n".join(lines), file)


def say_verdict(command: str, verdict: Verdict, allow_loss: bool) -> int:
    """Print the verdict on stderr; the exit status it means (docs/exit-codes.md): 1 for
    any problem, but ``--allow-loss`` excuses missing data (not peers configured
    differently)."""
    say(f"nakflow {command}: {verdict.line}")
    for problem in verdict.problems:
        excused = allow_loss and problem not in verdict.mismatches
        say(f"nakflow {command}: {'note' if excused else 'problem'}: {problem}")
    if verdict.mismatches or (verdict.problems and not allow_loss):
        return EXIT_INCOMPLETE
    return 0


def socket_options(args: argparse.Namespace) -> Any:
    """SocketOptions with CURVE if the --curve-* options ask for it and the --hwm given,
    else None (the defaults)."""
    from transports import Curve, SocketOptions

    kw: dict[str, Any] = {}
    if args.hwm is not None:
        kw.update(sndhwm_msgs=args.hwm, rcvhwm_msgs=args.hwm)
    if args.curve_secret or args.curve_server_key:
        if not (args.curve_secret and args.curve_server_key):
            raise ValueError("CURVE needs both --curve-secret and --curve-server-key")
        kw["curve"] = Curve(args.curve_secret, args.curve_server_key,
                            getattr(args, "curve_authorized", None))
    return SocketOptions(**kw) if kw else None


def shared_key(args: argparse.Namespace) -> Any:
    from ..keyfile import load_shared_key

    return None if args.shared_key is None else load_shared_key(args.shared_key)


def repair_config(args: argparse.Namespace) -> RepairConfig:
    kw: dict[str, Any] = {"enabled": not args.no_repair}
    if getattr(args, "no_late_join", False):
        kw["late_join"] = False
    for name in ("history_msgs", "history_bytes", "history_age_s"):
        value = getattr(args, name, None)
        if value is not None:
            kw[name] = value
    return RepairConfig(**kw)


def nak_config(args: argparse.Namespace) -> NakConfig:
    """NakConfig with what the --nak-* options set (the rest at their defaults)."""
    kw: dict[str, Any] = {}
    for opt in ("initial_rate_msgs", "probe_after_s", "window_s"):
        value = getattr(args, f"nak_{opt}", None)
        if value is not None:
            kw[opt] = value
    probe, quiet = kw.get("probe_after_s"), NakConfig().quiet_s
    if probe == 0:
        kw["probe_after_s"] = None  # --nak-probe-after 0: no probe
    elif probe is not None and probe < quiet:  # the config's words name no option
        raise ConfigError(f"--nak-probe-after must be 0 (no probe) or at least {quiet:g} s "
                          f"(quiet_s: the probe needs that long without a NAK)")
    window = getattr(args, "nak_start_window_msgs", None)
    if window is not None:
        kw["start_window_msgs"] = window or None
    window_bytes = getattr(args, "nak_start_window_bytes", None)
    if window_bytes is not None:
        kw["start_window_bytes"] = window_bytes or None
    if getattr(args, "nak_levels", None):
        levels = args.nak_levels
        factors = NakConfig().cut_factors
        kw["levels"] = levels
        kw["cut_factors"] = {lv: factors.get(lv, 0.5) for lv in levels}
    return NakConfig(**kw)


def frame_bound(args: argparse.Namespace) -> dict[str, Any]:
    """``max_frame_bytes`` for a Sender or Receiver if --max-frame-bytes was given."""
    return {} if args.max_frame_bytes is None else {"max_frame_bytes": args.max_frame_bytes}


def serve_metrics(args: argparse.Namespace, source: Any) -> Any:
    """A Prometheus endpoint for the source if --metrics-port was given (else None)."""
    if args.metrics_port is None:
        return None
    from ..live.prometheus import serve_metrics as serve

    server = serve(source, port=args.metrics_port, addr=args.metrics_addr)
    log.info("metrics on %s", server.url)
    return server


# -- keygen ------------------------------------------------------------------------
def cmd_keygen(args: argparse.Namespace) -> int:
    from ..keyfile import write_curve_pair, write_shared_key

    if args.shared:
        try:
            path = write_shared_key(args.dir, args.name)
        except FileExistsError:
            raise ValueError(f"{args.name}.shared_key exists in {args.dir}; not overwriting "
                             "it") from None
        print(f"shared key: {path} (give it to every sender and receiver of the stream; "
              "keep it private)")
        return 0
    try:
        public, secret = write_curve_pair(args.dir, args.name)
    except FileExistsError as exc:
        raise ValueError(f"{exc}; not overwriting them (every peer holding the old pair "
                         "would be locked out): remove them first or pick another name") from None
    print(f"public key: {public}\nsecret key: {secret} (keep it private)")
    return 0


# -- receive -----------------------------------------------------------------------
def rows_of(msgs: Sequence[Any]) -> int:
    """Rows in ``msgs``: an Arrow message's (the Spark data source's), 1 for any other
    (a chunk whose first message is not Arrow is taken for rows, one a message)."""
    if not msgs or msgs[0].payload[:4] != b"\xff\xff\xff\xff":
        return len(msgs)
    from ..arrow import ArrowDecodeError, rows_in

    n = 0
    for m in msgs:
        try:
            n += rows_in(m.payload)
        except ArrowDecodeError:
            n += 1
    return n


class _Consumer:
    """The receive loop's consumer: paced (``--consume-rate``), stalling (``--stall-*``),
    handing messages to the sink and the delivery log."""

    def __init__(self, args: argparse.Namespace, take: Callable[..., Any],
                 sink: Any, ends: Callable[[], int] = lambda: 0) -> None:
        self.rate = args.consume_rate
        # a consumer of fixed speed is a token bucket with a 10 ms burst: capacity it did
        # not use while the queue was empty is gone
        self.pace = TokenBucket(self.rate, burst_s=0.01) if self.rate else None
        self.chunk = 256 if self.rate is None else max(1, min(256, int(self.rate * 0.002)))
        self.stall_from = args.stall_at if args.stall_for else None
        self.stall_for = args.stall_for
        self.take, self.sink = take, sink
        self.ends, self.ends_flushed = ends, 0  # streams ended; as of the sink's last flush
        self.error: str | None = None
        self.unsunk = 0
        self.rows = 0  # rows taken: an Arrow message's rows, 1 for any other message

    def step(self, elapsed: float, now: float) -> None:
        """Consume one chunk (or wait a little: stalled, paced)."""
        if self.stall_from is not None and (self.stall_from <= elapsed
                                            < self.stall_from + self.stall_for):
            time.sleep(min(0.05, self.stall_from + self.stall_for - elapsed))
            return
        if self.pace is not None:
            wait = self.pace.request(self.chunk, now=now)
            if wait:
                time.sleep(wait)
                return
        with signals_held():  # what is taken is handed over, whenever a signal comes
            got = self.take(self.chunk, timeout=0.05)
            self.rows += rows_of(got)
            if self.pace is not None and len(got) < self.chunk:  # pay only for what it took
                self.pace.refund(self.chunk - len(got))
            self.hand_over(got)
            if not got and self.sink is not None and self.error is None:
                self.flush_on_end()

    def flush_on_end(self) -> None:
        """The queue is empty: if a stream ended since the last flush, the sink makes
        what it holds durable (a Parquet file closed)."""
        from ..live.sinks import SinkError

        ended = self.ends()
        if ended != self.ends_flushed:
            self.ends_flushed = ended
            try:
                self.sink.flush()
            except SinkError as exc:
                self.error = str(exc)
                log.error("%s; stopping", exc)

    def sink_report(self) -> dict[str, Any] | None:
        """The report's ``sink`` row (None without a sink): also scraped while it runs."""
        sink = self.sink
        if sink is None:
            return None
        return {"target": sink.name, "written": sink.written,
                "not_written": self.unsunk + sink.lost, "error": self.error,
                "rejected": sink.rejected, "rejected_why": sink.rejected_why}

    def hand_over(self, msgs: Sequence[Any]) -> None:
        from ..live.sinks import SinkError

        if self.sink is None or not msgs:
            return
        if self.error is not None:
            self.unsunk += len(msgs)
            return
        try:
            self.sink.write(msgs)
        except SinkError as exc:  # the sink counted what it lost (its ``lost``)
            self.error = str(exc)
            log.error("%s; stopping (messages not written are counted in the report)", exc)
        except Exception as exc:  # a sink's bug: reported as its failure, not a traceback
            self.error = f"sink {self.sink.name} failed: {type(exc).__name__}: {exc}"
            self.unsunk = len(msgs)
            log.exception("%s; stopping (messages not handed over are counted in the "
                          "report)", self.error)


class _WithSink:
    """What ``--metrics-port`` scrapes of a receive: the receiver's snapshot and, with
    ``--sink``, its sink's row (a sink that rejects or failed shows in the metrics)."""

    def __init__(self, rx: Any, consumer: _Consumer) -> None:
        self.rx, self.consumer = rx, consumer

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = self.rx.snapshot()
        sink = self.consumer.sink_report()
        if sink is not None:
            snap["sink"] = sink
        return snap


class _Waiting:
    """A one-shot ``--senders N`` receive's word while it waits and nothing comes: once
    nothing arrived and no sender finished for ``quiet_s`` (six times as long while no
    sender was heard at all: receivers are started before their senders), then every
    ``every_s``. A receiver told to wait for more senders than will come (an empty
    DataFrame is one Spark task, not one per partition asked for; a sender that never
    started) otherwise waits in silence for ever."""

    def __init__(self, senders: int, now: float, quiet_s: float | None = None) -> None:
        self.want = senders
        self.quiet_s = 10.0 if quiet_s is None else quiet_s
        self.every_s = 3 * self.quiet_s
        self.mark: tuple[int, int] | None = None  # (finished, rows) as last seen
        self.since = self.next_look = now
        self.said_at: float | None = None

    def look(self, now: float, finished: int, rows: int, heard: Callable[[], int]
             ) -> str | None:
        """The line to say now, or None; ``heard()``: sender ids heard so far."""
        if now < self.next_look:
            return None
        self.next_look = now + min(0.5, self.quiet_s / 4)
        if (finished, rows) != self.mark:
            self.mark, self.since, self.said_at = (finished, rows), now, None
            return None
        quiet = now - self.since
        if quiet < self.quiet_s or (self.said_at is not None
                                    and now - self.said_at < self.every_s):
            return None
        ids = heard()
        if not ids and self.said_at is None and quiet < 6 * self.quiet_s:
            return None
        self.said_at = now
        return (f"nakflow receive: still waiting for {self.want - finished} more sender(s) "
                f"(--senders {self.want}, counted by id: one per Spark task): "
                f"{ids} heard, {finished} finished; nothing arrived for {quiet:.0f} s "
                "(Ctrl-C stops it and reports what arrived)")


def _ids_heard(rx: Any) -> int:
    return len({s["sender"] for s in rx.snapshot()["senders"]})


def cmd_receive(args: argparse.Namespace) -> int:
    from ..live.receiver import Receiver
    from ..live.sinks import SinkError, open_sink

    _distinct_endpoints(args.data, args.feedback)
    # a service runs until a signal; a one-shot receive until --senders or --duration
    one_shot = args.senders is not None or args.duration is not None
    if args.payload != "auto" and (not args.sink or args.sink.startswith("parquet:")):
        raise ValueError(f"--payload {args.payload} says how --sink's JSON lines give each "
                         "payload: it needs --sink -, file: or cmd: (the Parquet sink "
                         "writes rows)")
    sink = (open_sink(args.sink, args.stream, args.payload) if args.sink  # checked before
            else None)  # ready
    try:
        rx = Receiver(args.data, args.feedback, mode=args.mode, stream=args.stream,
                      receiver_id=args.id, capacity_msgs=args.capacity,
                      overflow=args.overflow, drop_duplicates=args.drop_duplicates,
                      overhear=args.overhear or (), max_streams=args.max_streams,
                      sender_gone_s=args.sender_gone or None,
                      options=socket_options(args), shared_key=shared_key(args),
                      repair=repair_config(args), test_data_loss=args.test_drop_data,
                      ack=AckConfig(max_share=args.ack_max_share), nak=nak_config(args),
                      **frame_bound(args))
    except BaseException:
        if sink is not None:
            sink.abandon()
        raise
    deliveries = None
    if args.deliveries:
        from ..testing import DeliveryLog

        deliveries = DeliveryLog()
    take = rx.get_many if deliveries is None else _logged(rx.get_many, deliveries)
    consumer = _Consumer(args, take, sink, ends=lambda: len(rx.ends()))
    metrics = None
    interrupted: Interrupted | None = None
    try:  # from here on a signal stops the receiver the orderly way
        metrics = serve_metrics(args, _WithSink(rx, consumer))
        if args.ready_file:
            with open(args.ready_file + ".tmp", "w") as f:
                json.dump({"data": rx.data_endpoints, "feedback": rx.feedback_endpoints,
                           "id": rx.receiver_id,
                           "metrics": None if metrics is None else metrics.url}, f)
            os.replace(args.ready_file + ".tmp", args.ready_file)
        where = "" if metrics is None else f", metrics on {metrics.url}"
        say(f"nakflow receive: ready ({args.mode}, queue {args.capacity:,}{where}): "
            f"senders connect to --data {','.join(rx.data_endpoints)} --feedback "
            f"{','.join(rx.feedback_endpoints)}")
        log.info("receiver %s: data %s feedback %s mode %s", rx.receiver_id,
                 rx.data_endpoints, rx.feedback_endpoints, args.mode)
        t0 = time.monotonic()
        waiting = _Waiting(args.senders, t0, args.test_quiet_s) if args.senders else None
        more_said = False
        while consumer.error is None:
            if rx.error is not None:  # its I/O thread failed: it hears nothing any more
                say(f"nakflow receive: the receiver failed ({rx.error!r}); stopping")
                break
            now = time.monotonic()
            if args.duration is not None and now - t0 >= args.duration:
                break
            if args.senders and rx.done(args.senders):
                live = rx.live_streams()  # more senders than N: leaving would cut them off
                if not live:
                    break
                if not more_said:
                    more_said = True
                    say(f"nakflow receive: {args.senders} sender(s) finished (--senders "
                        f"{args.senders}), but {len(live)} more still sending "
                        f"({', '.join(f'{s}/{e}' for s, e in live[:3])}"
                        f"{', ...' if len(live) > 3 else ''}): waiting for them too")
            if waiting is not None:
                line = waiting.look(now, rx.finished(), consumer.rows, lambda: _ids_heard(rx))
                if line:
                    say(line)
            consumer.step(now - t0, now)
    except Interrupted as exc:
        interrupted = exc
        say(f"nakflow receive: stopping on {exc}: draining {rx.snapshot()['queued']:,} "
            "queued message(s)")
    finally:
        rx.close()
    while True:  # after close the queue is ours: hand it over (or count it drained)
        rest = take(1 << 16, timeout=0)
        if not rest:
            break
        consumer.rows += rows_of(rest)
        consumer.hand_over(rest)
    if sink is not None:
        try:
            sink.close()
        except SinkError as exc:
            consumer.error = consumer.error or str(exc)
    if metrics is not None:
        metrics.close()
    if deliveries is not None:
        with open(args.deliveries, "w") as f:
            json.dump(deliveries.report(), f)
    snap = rx.snapshot()
    snap["consume_rate"] = consumer.rate
    snap["rows"] = consumer.rows
    snap["ends"] = len(rx.ends())
    snap["process_cpu_s"] = round(time.process_time(), 3)  # every thread of the process
    if sink is not None:
        snap["sink"] = consumer.sink_report()
    verdict = receiver_verdict(snap, expect_senders=args.senders, service=not one_shot)
    snap["summary"] = verdict.line
    snap["problems"] = verdict.problems
    snap["stopped_by"] = None if interrupted is None else str(interrupted)
    emit(snap, args.json, file=sys.stderr if args.sink in ("-", "stdout") else None,
         keys=PLAIN_KEYS["receive"])
    status = say_verdict("receive", verdict, args.allow_loss)
    if snap["error"] is not None or consumer.error is not None:
        return EXIT_INCOMPLETE  # the receiver or its sink failed
    if interrupted is not None and one_shot:  # stopped before --senders or --duration
        say(f"nakflow receive: interrupted by {interrupted} before it finished")
        return 128 + interrupted.signum
    # a service's signal is how it stops: clean (0) unless data was missing (1)
    return status


def _logged(get_many: Any, log: Any) -> Any:
    def take(n: int, timeout: float | None = None) -> list[Any]:
        msgs = get_many(n, timeout=timeout)
        log.add(msgs)
        return list(msgs)
    return take


def _distinct_endpoints(data: str, feedback: str, *, pairs: bool = False) -> None:
    """No endpoint named twice (both channels need their own); a sender's lists (``pairs``)
    also one feedback endpoint per data endpoint over tcp/ipc. Raises ValueError."""
    from transports import check_distinct, check_pairs, parse_endpoints

    d, f = parse_endpoints(data), parse_endpoints(feedback)
    check_pairs(d, f) if pairs else check_distinct(d, f)


# -- send ----------------------------------------------------------------------------
def cmd_send(args: argparse.Namespace) -> int:
    from ..live.sender import Sender
    from ..live.sender import log as events_log

    # the close's outcomes are the report's problem lines: its WARNING for a receiver not
    # complete would say each twice (with -v every event shows, at INFO, as before)
    events_log.setLevel(logging.INFO if args.verbose else logging.ERROR)
    _distinct_endpoints(args.data, args.feedback, pairs=not args.feedback_proxy)
    if args.wait_receivers is None:  # every receiver the --data list leads to
        from transports import parse_endpoints, receivers_expected

        args.wait_receivers = receivers_expected(parse_endpoints(args.data))
    lines = _input_lines(args)  # before any socket: a FILE that cannot be read is exit 2
    payload = b"x" * (100 if args.size is None else args.size)
    count = (args.count if args.count is not None
             else None if args.duration or lines is not None else 10_000)
    interrupted: str | None = None
    mismatch: PeerMismatch | None = None
    status_if_interrupted = 0
    tx = Sender(args.data, args.feedback, mode=args.mode, stream=args.stream,
                sender_id=args.id, max_rate_msgs=args.max_rate,
                options=socket_options(args), shared_key=shared_key(args),
                repair=repair_config(args), linger_s=args.linger_s,
                feedback_proxy=args.feedback_proxy, frame_msgs=args.frame_msgs,
                host_local={"auto": None, "yes": True, "no": False}[args.host_local],
                nak=nak_config(args), **frame_bound(args))
    metrics = serve_metrics(args, tx)
    if metrics is not None:
        say(f"nakflow send: metrics on {metrics.url}")
    ended = False
    try:
        try:  # before the wait: a --size no frame can hold is a bad argument
            tx.core.batch.check(payload)
        except ValueError as exc:
            raise ValueError(f"--size {len(payload):,}: {exc}") from None
        if args.wait_receivers:
            _wait_for_receivers(tx, args)
        ready = tx.core.receivers_ready()
        say(f"nakflow send: {ready} receiver{'s' if ready != 1 else ''} ready; sending "
            f"({args.mode})")
        if lines is None:
            _send_all(tx, args, payload, count)
        else:
            _send_lines(tx, args, lines, count)
        tx.flush()
        ended = True
    except Interrupted as exc:
        interrupted, status_if_interrupted = f"interrupted by {exc}", 128 + exc.signum
    except PeerMismatch as exc:  # another mode or key: the cause is known, nothing sent
        mismatch = exc
    except TimeoutError as exc:
        interrupted, status_if_interrupted = f"gave up: {exc}", EXIT_INCOMPLETE
    except BaseException:
        if metrics is not None:
            metrics.close()
        raise
    finally:
        if not ended:
            tx.abort()
        if lines is not None:
            lines.close()
    if ended:
        try:
            tx.close()
        except Interrupted as exc:  # END went out: the wait for receipts is cut short
            interrupted, status_if_interrupted = f"interrupted by {exc}", 128 + exc.signum
    snap = tx.snapshot()
    snap["process_cpu_s"] = round(time.process_time(), 3)  # every thread of the process
    if metrics is not None:
        metrics.close()
    if mismatch is not None:  # the report, then the cause as the last line
        snap["summary"], snap["problems"] = f"error: {mismatch}", [str(mismatch)]
        emit(snap, args.json, keys=PLAIN_KEYS["send"])
        say(f"nakflow send: error: {mismatch}")
        return EXIT_INCOMPLETE
    if lines is not None:  # the plan is the input's lines (up to --count), all of them sent
        count = None
        snap["input"] = {"file": args.input, "lines": lines.taken}
    verdict = sender_verdict(snap, planned=count, interrupted=interrupted, after_end=ended,
                             waited=bool(args.wait_receivers))
    snap["summary"] = verdict.line
    snap["problems"] = verdict.problems
    emit(snap, args.json, keys=PLAIN_KEYS["send"])
    status = say_verdict("send", verdict, args.allow_loss)
    return status_if_interrupted or status


class NoReceivers(ValueError):
    """Nobody answered the sender's HELLO in time: a usage problem (exit 2)."""


def _wait_for_receivers(tx: Any, args: argparse.Namespace) -> None:
    try:
        tx.wait_for_receivers(args.wait_receivers, timeout=args.wait_timeout)
    except PeerMismatch:
        raise  # the cause is known (another mode, another key): exit 1, not 2
    except TimeoutError as exc:
        raise NoReceivers(
            f"{exc}; start the receivers first ('nakflow receive'), check that --data and "
            "--feedback are their data and feedback endpoints, in that order, and that they "
            "run the same --stream (a receiver does not answer another stream's sender), or "
            "pass --wait-receivers 0 to send to whoever listens") from None


def _send_all(tx: Any, args: argparse.Namespace, payload: bytes, count: int | None) -> None:
    """Send ``count`` messages (or until --duration); each send may wait at most
    --send-timeout for permission (TimeoutError then)."""
    end = math.inf if args.duration is None else time.monotonic() + args.duration
    timeout = args.send_timeout
    i = 0
    while count is None or i < count:
        if (i & 63) == 0 and time.monotonic() >= end:
            break
        if args.batch > 1:
            n = args.batch if count is None else min(args.batch, count - i)
            tx.send_batch([payload] * n, timeout=timeout)
            i += n
        else:
            tx.send(payload, timeout)
            i += 1


class InputLines:
    """The lines of ``nakflow send --input`` as payloads, without their line ends; the
    count taken so far (``taken``)."""

    def __init__(self, name: str, stream: BinaryIO) -> None:
        self.name, self._stream, self.taken = name, stream, 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self._stream:
            self.taken += 1
            if line.endswith(b"\n"):
                line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            yield line

    def close(self) -> None:
        if self._stream is not sys.stdin.buffer:
            self._stream.close()


def _input_lines(args: argparse.Namespace) -> InputLines | None:
    """``--input``'s lines, opened now: a file that cannot be read is a bad argument."""
    if args.input is None:
        return None
    if args.size is not None:
        raise ValueError("--input sends the lines of its input: --size does not apply")
    if args.batch > 1:
        raise ValueError("--input sends each line as it comes: --batch does not apply")
    if args.input == "-":
        return InputLines("-", sys.stdin.buffer)
    try:
        return InputLines(args.input, open(args.input, "rb"))  # closed by cmd_send
    except OSError as exc:
        raise ValueError(f"--input {args.input}: {exc.strerror or exc}") from None


def _send_lines(tx: Any, args: argparse.Namespace, lines: InputLines,
                count: int | None) -> None:
    """Send each line as one message, at most ``count`` and until --duration; a line no
    frame can hold is a bad input: what went before it went, no END (ValueError)."""
    end = math.inf if args.duration is None else time.monotonic() + args.duration
    timeout = args.send_timeout
    for payload in lines:
        try:
            tx.send(payload, timeout)
        except ValueError as exc:
            raise ValueError(f"--input {lines.name}, line {lines.taken:,}: {exc}; the "
                             f"{lines.taken - 1:,} lines before it were sent, and the "
                             "stream ends without END") from None
        if lines.taken == count or time.monotonic() >= end:
            break


# -- demo ----------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from ..testing import run_local_comparison

    result = run_local_comparison(modes=args.modes.split(","), count=args.count,
                                  slow_rate=args.slow_rate, capacity=args.capacity,
                                  progress=not args.json)
    if args.json:
        emit(result, True)
    return 0
