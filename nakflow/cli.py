"""The ``nakflow`` command line.

Built-in subcommands: ``send``, ``receive``, ``keygen``, ``demo``. Other packages add theirs
through the ``nakflow.commands`` entry-point group (a function that takes the
subparsers object and registers a parser whose ``func`` runs it), so nakflow
never imports the simulations or the Spark adapter.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from ._batch import FRAME_MSGS, LINGER_S
from ._bucket import TokenBucket
from ._config import MODES, AckConfig
from ._errors import NakflowError
from .sinks import SINK_HELP

log = logging.getLogger("nakflow.cli")


class _Stop:
    """Turns SIGTERM/SIGINT into a flag so a run ends cleanly and still reports."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value
    return parse


def _non_negative(text: str) -> float:
    value = _positive(float)(text) if text not in ("0", "0.0") else 0.0
    return float(value)


def emit(result: dict[str, Any], as_json: bool, file: Any = None) -> None:
    """Print a run's metrics: one JSON object (stdout by default), or a readable listing."""
    file = file or sys.stdout
    if as_json:
        print(json.dumps(result, sort_keys=True, default=str), file=file, flush=True)
        return
    for key, value in result.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=str)
        print(f"{key:>24}: {value}", file=file)
    file.flush()


def _socket_options(args: argparse.Namespace) -> Any:
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


def _shared_key(args: argparse.Namespace) -> Any:
    from .keyfile import load_shared_key

    return None if args.shared_key is None else load_shared_key(args.shared_key)


# -- keygen --------------------------------------------------------------------------
def cmd_keygen(args: argparse.Namespace) -> int:
    import os

    import zmq.auth

    os.makedirs(args.dir, exist_ok=True)
    if args.shared:
        from .keyfile import write_shared_key

        try:
            path = write_shared_key(args.dir, args.name)
        except FileExistsError:
            raise ValueError(f"{args.name}.shared_key exists in {args.dir}; not overwriting "
                             "it") from None
        print(f"shared key: {path} (give it to every sender and receiver of the stream; "
              "keep it private)")
        return 0
    public, secret = zmq.auth.create_certificates(args.dir, args.name)
    os.chmod(secret, 0o600)
    print(f"public key: {public}\nsecret key: {secret} (keep it private)")
    return 0


def _repair_config(args: argparse.Namespace) -> Any:
    from ._config import RepairConfig

    kw: dict[str, Any] = {"enabled": not args.no_repair}
    for name in ("history_msgs", "history_bytes", "history_age_s"):
        value = getattr(args, name, None)
        if value is not None:
            kw[name] = value
    return RepairConfig(**kw)


# -- receive -----------------------------------------------------------------------
def _serve_metrics(args: argparse.Namespace, source: Any) -> Any:
    """A Prometheus endpoint for the source if --metrics-port was given (else None)."""
    if args.metrics_port is None:
        return None
    from .prometheus import serve_metrics

    server = serve_metrics(source, port=args.metrics_port, addr=args.metrics_addr)
    log.warning("metrics on %s", server.url)
    return server


def cmd_receive(args: argparse.Namespace) -> int:
    from .receiver import Receiver
    from .sinks import SinkError, open_sink

    stop = _Stop()
    sink = open_sink(args.sink, args.stream) if args.sink else None
    rx = Receiver(args.data, args.feedback, mode=args.mode, stream=args.stream,
                  receiver_id=args.id, capacity_msgs=args.capacity, overflow=args.overflow,
                  drop_duplicates=args.drop_duplicates, overhear=args.overhear or (),
                  options=_socket_options(args), shared_key=_shared_key(args),
                  repair=_repair_config(args), test_data_loss=args.test_drop_data,
                  ack=AckConfig(max_share=args.ack_max_share))
    metrics = _serve_metrics(args, rx)
    if args.ready_file:
        import os

        with open(args.ready_file + ".tmp", "w") as f:
            json.dump({"data": rx.data_endpoints, "feedback": rx.feedback_endpoints,
                       "id": rx.receiver_id,
                       "metrics": None if metrics is None else metrics.url}, f)
        os.replace(args.ready_file + ".tmp", args.ready_file)
    log.info("receiver %s: data %s feedback %s mode %s", rx.receiver_id, rx.data_endpoints,
             rx.feedback_endpoints, args.mode)
    t0 = time.monotonic()
    rate = args.consume_rate
    # A slow consumer is a token bucket with a 10 ms burst: capacity it did not use
    # while the queue was empty is gone, as with a real consumer of fixed speed.
    pace = TokenBucket(rate, burst_s=0.01) if rate else None
    chunk = 256 if rate is None else max(1, min(256, int(rate * 0.002)))
    stall_from = args.stall_at if args.stall_for else None
    deliveries = None
    if args.deliveries:
        from ._local import DeliveryLog

        deliveries = DeliveryLog()
    take = rx.get_many if deliveries is None else _logged(rx.get_many, deliveries)
    error: str | None = None
    unsunk = 0

    def hand_over(msgs: Sequence[Any]) -> None:
        nonlocal error, unsunk
        if sink is None or not msgs:
            return
        if error is not None:
            unsunk += len(msgs)
            return
        try:
            sink.write(msgs)
        except SinkError as exc:
            error, unsunk = str(exc), len(msgs)
            log.error("%s; stopping (messages not handed over are counted in the report)",
                      exc)

    try:
        while not stop.requested and error is None:
            now = time.monotonic()
            elapsed = now - t0
            if args.duration is not None and elapsed >= args.duration:
                break
            if (args.senders and len(rx.ends()) >= args.senders and rx.wait_drained(0)
                    and not rx.awaiting_repair()):
                break
            if stall_from is not None and stall_from <= elapsed < stall_from + args.stall_for:
                time.sleep(min(0.05, stall_from + args.stall_for - elapsed))
                continue
            if pace is not None:
                wait = pace.request(chunk, now=now)
                if wait:
                    time.sleep(wait)
                    continue
            got = take(chunk, timeout=0.05)
            if pace is not None and len(got) < chunk:  # pay only for what it took: a
                pace.refund(chunk - len(got))  # fixed-speed consumer keeps up below its rate
            hand_over(got)
    finally:
        rx.close()
    if stop.requested:
        log.warning("stopping on a signal: draining %d queued message(s)", rx.snapshot()["queued"])
    while True:  # after close the queue is ours: hand it over (or count it drained)
        rest = take(1 << 16, timeout=0)
        if not rest:
            break
        hand_over(rest)
    if sink is not None:
        try:
            sink.close()
        except SinkError as exc:
            error = error or str(exc)
    if metrics is not None:
        metrics.close()
    if deliveries is not None:
        with open(args.deliveries, "w") as f:
            json.dump(deliveries.report(), f)
    snap = rx.snapshot()
    snap["consume_rate"] = rate
    snap["ends"] = len(rx.ends())
    snap["process_cpu_s"] = round(time.process_time(), 3)  # every thread of the process
    if sink is not None:
        snap["sink"] = {"target": sink.name, "written": sink.written, "not_written": unsunk,
                        "error": error}
    emit(snap, args.json, file=sys.stderr if args.sink in ("-", "stdout") else sys.stdout)
    return 0 if snap["error"] is None and error is None else 1


def _logged(get_many: Any, log: Any) -> Any:
    def take(n: int, timeout: float | None = None) -> list[Any]:
        msgs = get_many(n, timeout=timeout)
        log.add(msgs)
        return list(msgs)
    return take


# -- send ----------------------------------------------------------------------------
def cmd_send(args: argparse.Namespace) -> int:
    from .sender import Sender

    stop = _Stop()
    payload = b"x" * args.size
    with Sender(args.data, args.feedback, mode=args.mode, stream=args.stream,
                sender_id=args.id, max_rate_msgs=args.max_rate,
                options=_socket_options(args), shared_key=_shared_key(args),
                repair=_repair_config(args), linger_s=args.linger_s,
                frame_msgs=args.frame_msgs) as tx:
        metrics = _serve_metrics(args, tx)
        if args.wait_receivers:
            tx.wait_for_receivers(args.wait_receivers, timeout=args.wait_timeout)
        t0 = time.monotonic()
        count = args.count if args.count is not None else (None if args.duration else 10_000)
        end = None if args.duration is None else t0 + args.duration
        i = 0
        while not stop.requested and (count is None or i < count):
            if end is not None and (i & 63) == 0 and time.monotonic() >= end:
                break
            if args.batch > 1:
                n = args.batch if count is None else min(args.batch, count - i)
                tx.send_batch([payload] * n)
                i += n
            else:
                tx.send(payload)
                i += 1
        tx.flush()
        snap = tx.snapshot()
        if metrics is not None:
            metrics.close()
    emit(snap, args.json)
    return 0


# -- demo ----------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from ._local import run_local_comparison

    result = run_local_comparison(modes=args.modes.split(","), count=args.count,
                                  slow_rate=args.slow_rate, capacity=args.capacity,
                                  progress=not args.json)
    if args.json:
        emit(result, True)
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every option's default (unless it is None or off, or the help text
    already says it), and leaves descriptions as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is False or default == []
                or default == argparse.SUPPRESS or not action.option_strings):
            return text
        if isinstance(default, float) and default.is_integer():
            default = int(default)
        shown = f"{default:,}" if isinstance(default, int) and not isinstance(default, bool) \
            else default
        return f"{text} (default: {shown})" if text else f"default: {shown}"


DESCRIPTION = """\
nakflow: 1:N messaging over ZeroMQ where fast senders never drown slow receivers.
Receivers send a NAK only when their queue fills; senders adapt their rate to the
strongest NAK they hear, without tracking who the receivers are.
Run 'nakflow COMMAND --help' for a command's options."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nakflow", description=DESCRIPTION,
                                     formatter_class=HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", required=True, help="data endpoint URI(s), comma-separated")
        p.add_argument("--feedback", required=True, help="feedback endpoint URI(s)")
        p.add_argument("--mode", choices=MODES, default="nak",
                       help="flow control: nak (rate limit cut by receivers' NAKs), ack "
                            "(credit from every receiver) or none")
        p.add_argument("--stream", default="default",
                       help="stream name; senders and receivers of one stream must agree")
        p.add_argument("--id", default=None, help="node id (default: random)")
        p.add_argument("--json", action="store_true", help="print one JSON object at the end")
        p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve Prometheus metrics on http://ADDR:PORT/metrics "
                            "(0: any free port, logged); needs nakflow[metrics]")
        p.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                       help="address for --metrics-port (0.0.0.0: every interface)")
        p.add_argument("--hwm", type=_positive(int), default=None, metavar="MSGS",
                       help="ZeroMQ high-water marks (send and receive) per peer; past it "
                            "PUB drops (default 200000)")
        p.add_argument("--no-repair", action="store_true",
                       help="nak mode: no history, no repair requests (repair is on by default)")
        p.add_argument("--curve-secret", default=None, metavar="FILE",
                       help="CURVE: this node's .key_secret file (see 'nakflow keygen')")
        p.add_argument("--curve-server-key", default=None, metavar="FILE",
                       help="CURVE: the receivers' public .key file")
        p.add_argument("--shared-key", default=None, metavar="FILE",
                       help="seal and check every frame with this key (HMAC; for multicast, "
                            "where CURVE cannot go; see 'nakflow keygen --shared')")

    r = sub.add_parser("receive", help="receive a stream and report its metrics")
    common(r)
    r.add_argument("--capacity", type=_positive(int), default=10_000, help="queue bound, msgs")
    r.add_argument("--overflow", choices=("drop-newest", "drop-oldest", "block"),
                   default="drop-newest", help="what a full queue does with a new message")
    r.add_argument("--consume-rate", type=_positive(float), default=None,
                   metavar="MSGS_PER_S", help="consume no faster than this")
    r.add_argument("--stall-at", type=_non_negative, default=0.0, metavar="S",
                   help="the consumer stalls this long after the start ...")
    r.add_argument("--stall-for", type=_non_negative, default=0.0, metavar="S",
                   help="... for this long (0: never stalls)")
    r.add_argument("--senders", type=_positive(int), default=None, metavar="N",
                   help="exit after END from N senders, queue drained")
    r.add_argument("--duration", type=_positive(float), default=None, metavar="S",
                   help="stop after this long (default: until --senders ended, or SIGTERM)")
    r.add_argument("--drop-duplicates", action="store_true",
                   help="deliver a message seen before (a retried Spark task) only once")
    r.add_argument("--overhear", default=None,
                   help="other receivers' feedback URIs, to suppress NAKs and repair "
                        "requests another receiver already sent")
    r.add_argument("--curve-authorized", default=None, metavar="DIR",
                   help="CURVE: directory of public keys allowed to connect")
    r.add_argument("--ack-max-share", type=float, default=1.0, metavar="FRACTION",
                   help="ack mode: most of the queue one sender is granted (0.5: senders "
                        "that start together never deadlock, but a lone sender's window "
                        "is halved)")
    r.add_argument("--sink", default=None, metavar="TARGET",
                   help=f"hand every delivered message, as a JSON line, to {SINK_HELP}; "
                        "the report then goes to stderr if the sink is stdout")
    r.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)
    # check hook (chaos run): write which seqs of each stream were delivered, at exit
    r.add_argument("--deliveries", default=None, help=argparse.SUPPRESS)
    # test hook: drop this fraction of DATA before accounting, as loss in flight would
    r.add_argument("--test-drop-data", type=float, default=0.0, help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_receive)

    s = sub.add_parser("send", help="send a stream of fixed-size messages")
    common(s)
    s.add_argument("--count", type=_positive(int), default=None,
                   help="messages to send (default: until --duration, or SIGTERM)")
    s.add_argument("--size", type=_positive(int), default=100, metavar="BYTES",
                   help="payload size of each message")
    s.add_argument("--duration", type=_positive(float), default=None, metavar="S",
                   help="send for this long")
    s.add_argument("--max-rate", type=_positive(float), default=None, metavar="MSGS_PER_S",
                   help="never faster than this, whatever the flow control allows "
                        "(default: no cap)")
    s.add_argument("--batch", type=_positive(int), default=1,
                   help="call send_batch with this many messages at a time (1: send() "
                        "per message, coalesced by --linger)")
    s.add_argument("--linger", dest="linger_s", type=float, default=LINGER_S, metavar="S",
                   help="natural batching: a message waits at most this long for others to "
                        "share its DATA frame (0: one message a frame)")
    s.add_argument("--frame-msgs", type=_positive(int), default=FRAME_MSGS, metavar="N",
                   help="natural batching: at most this many messages a frame")
    s.add_argument("--history-msgs", type=_positive(int), default=None, metavar="N",
                   help="repair history bound, messages (default 100000)")
    s.add_argument("--history-bytes", type=_positive(int), default=None, metavar="BYTES",
                   help="repair history bound, payload bytes (default 64 MiB)")
    s.add_argument("--history-age", dest="history_age_s", type=_positive(float), default=None,
                   metavar="S", help="repair history bound, age (default 5 s)")
    s.add_argument("--wait-receivers", type=_positive(int), default=None, metavar="N",
                   help="wait until N receivers answered HELLO before sending")
    s.add_argument("--wait-timeout", type=_positive(float), default=10.0, metavar="S",
                   help="... for at most this long")
    s.set_defaults(func=cmd_send)

    k = sub.add_parser("keygen", help="make a CURVE key pair (NAME.key, NAME.key_secret), "
                                      "or with --shared a shared MAC key (NAME.shared_key)")
    k.add_argument("dir", help="directory to write the key files to")
    k.add_argument("name", help="key name, e.g. the node's id")
    k.add_argument("--shared", action="store_true",
                   help="make a 256-bit shared key for --shared-key instead of a CURVE pair")
    k.set_defaults(func=cmd_keygen)

    d = sub.add_parser("demo", help="three local receivers (one slow), one sender per mode")
    d.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated modes to run, one after the other")
    d.add_argument("--count", type=_positive(int), default=100_000,
                   help="messages the sender sends in each mode")
    d.add_argument("--slow-rate", type=_positive(float), default=20_000.0,
                   metavar="MSGS_PER_S", help="the slow receiver's consumption rate")
    d.add_argument("--capacity", type=_positive(int), default=5_000, metavar="MSGS",
                   help="each receiver's queue bound")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=cmd_demo)

    for ep in entry_points(group="nakflow.commands"):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not take the CLI down
            log.warning("nakflow command plugin %s failed to load: %s", ep.name, exc)
    for p in sub.choices.values():  # plugins' commands too
        p.formatter_class = HelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return int(args.func(args))
    except (NakflowError, ValueError, TimeoutError) as exc:
        print(f"nakflow {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
