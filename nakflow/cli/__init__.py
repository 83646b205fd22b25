"""The ``nakflow`` command line: the parser and ``main`` (the commands are in ``commands``).

Built-in subcommands: ``send``, ``receive``, ``keygen``, ``demo``. Other packages add theirs
through the ``nakflow.commands`` entry-point group (a function that takes the
subparsers object and registers a parser whose ``func`` runs it), so nakflow
never imports the simulations or the Spark adapter.

Bad arguments and environment problems (an endpoint without a port, a port in use, a
missing key file, nobody answering) are one line on stderr and exit status 2; a run
that delivered less than asked, or met a peer of another mode or key, exits 1 after its
report (``--allow-loss``: 0 for missing data); one interrupted before it finished exits
128 + the signal. docs/exit-codes.md has the table (``EXIT_CODES`` below, in each
command's ``--help``).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from .. import __version__
from ..config import FRAME_MSGS, LINGER_S, MODES, NakConfig, check_levels
from ..errors import ConfigError, IncompleteDelivery, NakflowError, PeerMismatch
from ..live.sinks import PAYLOAD_READINGS, SINK_HELP
from ..wire import DEFAULT_MAX_FRAME_BYTES
from . import speedups
from .commands import (
    EXIT_INCOMPLETE,
    Interrupted,
    cmd_demo,
    cmd_keygen,
    cmd_receive,
    cmd_send,
    on_signals_interrupt,
    say,
)

log = logging.getLogger("nakflow.cli")


def number_arg(kind: type, *, minimum: float, strict: bool, finite: bool = False) -> Any:
    """An argparse ``type``: ``kind`` (int or float) parsed from the text, refused with
    the option's name (argparse adds it) if it is NaN, below ``minimum`` (or at it, if
    ``strict``) or, if ``finite``, infinite. The commands other packages register (``eval``,
    ``simulate``) use it too."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            said = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"not {said}: {text!r}") from None
        if value != value:  # nan: every comparison false, so no bound would refuse it
            raise argparse.ArgumentTypeError(f"not a number: {text!r}")
        if finite and value == math.inf:
            raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if strict else '>='} {minimum:g}: {text!r}")
        return value
    return parse


_positive_int = number_arg(int, minimum=0, strict=True)
_positive = number_arg(float, minimum=0, strict=True)
_non_negative = number_arg(float, minimum=0, strict=False)
#: a rate, msgs/s (inf: a receiver's --consume-rate inf failed with an OverflowError)
_rate = number_arg(float, minimum=0, strict=True, finite=True)
_count = number_arg(int, minimum=0, strict=False)


def _levels(text: str) -> tuple[int, ...]:
    """--nak-levels: whole percents, strictly increasing, each in (0, 100]."""
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a list of whole percents such as 50,75,87,100: {text!r}") from None
    try:
        return check_levels(levels)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: {text!r}") from None


class Parser(argparse.ArgumentParser):
    """An argument error is one line (not the whole usage) and exit status 2."""

    def error(self, message: str) -> Any:  # argparse's signature: NoReturn
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every option's default (unless it is None or off, or the help text
    already says it), and leaves descriptions and examples as written."""

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

Receivers bind (each its own data and feedback endpoint, e.g. ports 5600 and 5601);
senders connect to every receiver's pair, given as comma-separated lists in the same
order. Over IP multicast (epgm://) everybody joins the same two groups.
Run 'nakflow COMMAND --help' for a command's options and examples."""

#: The exit-code table, short, for the --help of each command (docs/exit-codes.md).
EXIT_CODES = {
    "send": "exit status: 0 every receiver confirmed the whole stream; 1 a receiver "
            "incomplete, gone or unconfirmed at the close or never heard, fewer sent than "
            "planned, or a receiver of another mode or key; 2 bad arguments or an unusable "
            "environment (nobody answered within --wait-timeout); 129/130/143 interrupted "
            "(SIGHUP/SIGINT/SIGTERM) before END, or while the close waited for receipts (the "
            "report still comes). --allow-loss: 0 for missing data. See docs/exit-codes.md.",
    "receive": "exit status: 0 every stream complete (a service, without --senders and "
               "--duration, stopped by SIGTERM/SIGINT/SIGHUP after draining: 0 unless something "
               "was missing); 1 messages missing, a peer of another mode or key, or the sink "
               "failed; 2 bad arguments or an unusable environment (a port in use, a sink "
               "that cannot start); 129/130/143 a one-shot receive interrupted before "
               "--senders/--duration was met. --allow-loss: 0 for missing data. See "
               "docs/exit-codes.md.",
}


def _epilog(examples: str, command: str) -> str:
    import textwrap

    return examples + "\n\n" + textwrap.fill(EXIT_CODES[command], width=88,
                                              break_on_hyphens=False)


RECEIVE_EXAMPLES = """\
examples:
  # a receiver bound on ports 5600 (data) and 5601 (feedback), until one sender ends
  nakflow receive --data tcp://127.0.0.1:5600 --feedback tcp://127.0.0.1:5601 --senders 1
  # a second receiver of the same stream: its own pair of ports
  nakflow receive --data tcp://127.0.0.1:5610 --feedback tcp://127.0.0.1:5611 --senders 1
  # a service: every message as a JSON line to a command, until SIGTERM
  nakflow receive --data tcp://0.0.0.0:5600 --feedback tcp://0.0.0.0:5601 \\
      --sink "cmd:/opt/ingest" --metrics-port 9108

It prints 'ready' with its endpoints, then at the end a report and one line:
'delivered X of Y from N senders, Z missing (reasons)'."""

SEND_EXAMPLES = """\
examples:
  # 50,000 messages of 100 B to the two receivers above (data lists, feedback lists)
  nakflow send --data tcp://127.0.0.1:5600,tcp://127.0.0.1:5610 \\
      --feedback tcp://127.0.0.1:5601,tcp://127.0.0.1:5611 --count 50000
  # over IP multicast: everybody uses the same two groups (interface by its address)
  nakflow send --data "epgm://10.0.0.5;239.192.1.1:5555" \\
      --feedback "epgm://10.0.0.5;239.192.1.2:5556" --duration 60
  # every line of a program's output, one message each, as it comes, then END
  grep ERROR app.log | nakflow send --data tcp://127.0.0.1:5600 \\
      --feedback tcp://127.0.0.1:5601 --input -

It waits for --wait-receivers receivers to answer, sends, ends the stream with END,
waits for every receiver's receipt (the exact close), and prints a report and one line:
'sent X msgs in T s (R msgs/s) to N receivers: N complete'."""

KEYGEN_EXAMPLES = """\
examples:
  nakflow keygen keys receivers          # CURVE pair shared by the stream's receivers
  nakflow keygen keys sender-1           # one pair per sender
  nakflow keygen --shared keys stream    # a shared MAC key, for multicast"""

DEMO_EXAMPLES = """\
examples:
  nakflow demo                           # nak, ack and none, 100,000 messages each
  nakflow demo --modes nak --count 20000 --json"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True,
                   help="data endpoint URI(s), comma-separated: receivers bind theirs, "
                        "senders connect to every receiver's")
    p.add_argument("--feedback", required=True,
                   help="feedback endpoint URI(s), in the same order as --data")
    p.add_argument("--mode", choices=MODES, default="nak",
                   help="flow control: nak (rate limit cut by receivers' NAKs), ack "
                        "(credit from every receiver) or none; every side must agree")
    p.add_argument("--stream", default="default",
                   help="stream name; senders and receivers of one stream must agree")
    p.add_argument("--id", default=None,
                   help="node id, 1..256 characters (default: random)")
    p.add_argument("--json", action="store_true",
                   help="print the report as one JSON object on stdout")
    p.add_argument("--allow-loss", action="store_true",
                   help="exit 0 even if messages are missing or a peer is configured "
                        "differently (the report still says so)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics on http://ADDR:PORT/metrics "
                        "(0: any free port, logged); needs nakflow[metrics] (default: off)")
    p.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                   help="address for --metrics-port (0.0.0.0: every interface)")
    p.add_argument("--hwm", type=_positive_int, default=None, metavar="MSGS",
                   help="ZeroMQ high-water marks (send and receive) per peer; past it "
                        "PUB drops (default 200000)")
    p.add_argument("--max-frame-bytes", type=_positive_int, default=None, metavar="BYTES",
                   help="the largest frame this side takes (a receiver) or builds (a sender), "
                        "bytes; a receiver's bound binds its senders once it answers them "
                        f"(default {DEFAULT_MAX_FRAME_BYTES:,}: 16 MiB)")
    p.add_argument("--no-repair", action="store_true",
                   help="nak mode: no history, no repair requests (repair is on by default)")
    p.add_argument("--curve-secret", default=None, metavar="FILE",
                   help="CURVE: this node's .key_secret file (see 'nakflow keygen'; "
                        "default: no CURVE)")
    p.add_argument("--curve-server-key", default=None, metavar="FILE",
                   help="CURVE: the receivers' public .key file (default: no CURVE)")
    p.add_argument("--shared-key", default=None, metavar="FILE",
                   help="seal and check every frame with this key (HMAC; for multicast, "
                        "where CURVE cannot go; see 'nakflow keygen --shared'; default: none)")
    d = NakConfig()
    p.add_argument("--nak-window", dest="nak_window_s", type=_positive, default=None,
                   metavar="S", help=f"nak: the strongest-NAK window and receivers' repeat "
                                     f"interval (default {d.window_s})")
    p.add_argument("--nak-levels", type=_levels, default=None, metavar="PCT,...",
                   help="nak, receivers: fill levels that send a NAK (default "
                        f"{','.join(map(str, d.levels))})")


def _receive_parser(sub: Any) -> None:
    r = sub.add_parser("receive", help="receive a stream and report what arrived",
                       epilog=_epilog(RECEIVE_EXAMPLES, "receive"))
    _common(r)
    r.add_argument("--capacity", type=_positive_int, default=10_000, help="queue bound, msgs")
    r.add_argument("--overflow", choices=("drop-newest", "drop-oldest", "block"),
                   default="drop-newest", help="what a full queue does with a new message")
    r.add_argument("--consume-rate", type=_rate, default=None, metavar="MSGS_PER_S",
                   help="consume no faster than this (default: as fast as it can)")
    r.add_argument("--stall-at", type=_non_negative, default=0.0, metavar="S",
                   help="the consumer stalls this long after the start ...")
    r.add_argument("--stall-for", type=_non_negative, default=0.0, metavar="S",
                   help="... for this long (0: never stalls)")
    r.add_argument("--senders", type=_positive_int, default=None, metavar="N",
                   help="exit once N sender ids finished (one of their epochs ended "
                        "complete, or the newest is over without that: BYE after it sent, "
                        "silent for --sender-gone, or an END short of messages for good; "
                        "then with no stream live since and, but for silence, no retry of "
                        "the id within 3 s) and their streams are complete or given up; "
                        "more senders still sending then are waited for too (default: run "
                        "until --duration or SIGTERM)")
    r.add_argument("--duration", type=_positive, default=None, metavar="S",
                   help="stop after this long (default: until --senders finished, or "
                        "SIGTERM)")
    r.add_argument("--sender-gone", type=_non_negative, default=10.0, metavar="S",
                   help="a sender heard from, then silent this long while this receiver "
                        "listens (a live one announces itself every second), left without "
                        "END: killed, or cut off (default: 10; 0: wait for its END for "
                        "ever)")
    r.add_argument("--max-streams", type=_positive_int, default=10_000, metavar="N",
                   help="per-stream state kept for at most N (sender, epoch) streams and "
                        "sender ids; past it the oldest ended, then the least recently "
                        "heard, is forgotten (bounds memory against made-up ids)")
    r.add_argument("--drop-duplicates", action="store_true",
                   help="deliver a message seen before (a retried Spark task) only once")
    r.add_argument("--no-late-join", action="store_true",
                   help="nak: do not ask the senders' history for what was sent before "
                        "this receiver joined (late join is on by default)")
    r.add_argument("--overhear", default=None,
                   help="other receivers' feedback URIs, to suppress NAKs and repair "
                        "requests another receiver already sent (default: none; over "
                        "multicast every receiver hears the others anyway)")
    r.add_argument("--curve-authorized", default=None, metavar="DIR",
                   help="CURVE: directory of public keys allowed to connect (default: "
                        "no CURVE)")
    r.add_argument("--ack-max-share", type=float, default=1.0, metavar="FRACTION",
                   help="ack mode: most of the queue one sender is granted (0.5: senders "
                        "that start together never deadlock, but a lone sender's window "
                        "is halved)")
    r.add_argument("--sink", default=None, metavar="TARGET",
                   help=f"hand every delivered message, as a JSON line, to {SINK_HELP}; "
                        "the report then goes to stderr if the sink is stdout (default: "
                        "none, messages are only counted)")
    r.add_argument("--payload", choices=PAYLOAD_READINGS, default="auto",
                   help="how --sink's JSON lines give each payload: msgpack (decoded), text "
                        "(UTF-8), base64 (payload_b64), or auto: a msgpack map, array or "
                        "string, else text, else a msgpack number, else base64 (the line "
                        "'a' is also the msgpack of 97: say text or msgpack where a stream "
                        "has such)")
    r.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)
    # check hook (chaos run): write which seqs of each stream were delivered, at exit
    r.add_argument("--deliveries", default=None, help=argparse.SUPPRESS)
    # test hook: drop this fraction of DATA before accounting, as loss in flight would
    r.add_argument("--test-drop-data", type=float, default=0.0, help=argparse.SUPPRESS)
    # test hook: how long --senders N waits in silence before it says so (10 s)
    r.add_argument("--test-quiet-s", type=float, default=None, help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_receive)


def _send_parser(sub: Any) -> None:
    s = sub.add_parser("send", help="send the lines of a file or of stdin (--input), or a "
                                    "stream of fixed-size messages",
                       epilog=_epilog(SEND_EXAMPLES, "send"))
    _common(s)
    d = NakConfig()
    s.add_argument("--input", default=None, metavar="FILE",
                   help="send each line of FILE ('-': standard input) as one message, "
                        "without its line end (\\n or \\r\\n), as it comes, until the "
                        "input ends (default: --size messages of 'x')")
    s.add_argument("--count", type=_positive_int, default=None,
                   help="messages to send (default: 10,000; with --duration or --input: no "
                        "limit; with --input: at most this many lines)")
    s.add_argument("--size", type=_positive_int, default=None, metavar="BYTES",
                   help="payload size of each message (default: 100; not with --input)")
    s.add_argument("--duration", type=_positive, default=None, metavar="S",
                   help="send for this long (default: until --count is sent)")
    s.add_argument("--max-rate", type=_rate, default=None, metavar="MSGS_PER_S",
                   help="never faster than this, whatever the flow control allows "
                        "(default: no cap)")
    s.add_argument("--batch", type=_positive_int, default=1,
                   help="call send_batch with this many messages at a time (1: send() "
                        "per message, coalesced by --linger)")
    s.add_argument("--linger", dest="linger_s", type=_non_negative, default=LINGER_S,
                   metavar="S", help="natural batching: a message waits at most this long "
                                     "for others to share its DATA frame (0: one a frame)")
    s.add_argument("--frame-msgs", type=_positive_int, default=FRAME_MSGS, metavar="N",
                   help="natural batching: at most this many messages a frame")
    s.add_argument("--history-msgs", type=_positive_int, default=None, metavar="N",
                   help="repair history bound, messages (default 100000)")
    s.add_argument("--history-bytes", type=_positive_int, default=None, metavar="BYTES",
                   help="repair history bound, payload bytes (default 64 MiB)")
    s.add_argument("--history-age", dest="history_age_s", type=_positive, default=None,
                   metavar="S", help="repair history bound, age (default 5 s)")
    s.add_argument("--wait-receivers", type=_count, default=None, metavar="N",
                   help="wait until N receivers answered before sending (in ack also "
                        "granted credit); exit 2 if they do not within --wait-timeout; 0: "
                        "do not wait, send to whoever listens (default: one per --data "
                        "endpoint, 1 for a multicast group)")
    s.add_argument("--feedback-proxy", action="store_true",
                   help="the --feedback endpoints are a proxy's that forwards every "
                        "receiver's feedback, not one per receiver: the lists need not "
                        "pair (default: they must, over tcp/ipc)")
    s.add_argument("--wait-timeout", type=_positive, default=10.0, metavar="S",
                   help="... for at most this long")
    s.add_argument("--host-local", choices=("auto", "yes", "no"), default="auto",
                   help="nak: the receivers are processes on this host, with no network "
                        "link between (the start then sends half their room at once); "
                        "auto: judged from --data (loopback tcp, ipc, inproc); no: a "
                        "tunnel or proxy on loopback that leads to another host")
    s.add_argument("--send-timeout", type=_positive, default=30.0, metavar="S",
                   help="give up if the flow control lets nothing out for this long (ack "
                        "with every receiver gone): report, no END, exit 1")
    s.add_argument("--nak-initial-rate", dest="nak_initial_rate_msgs", type=_rate,
                   default=None, metavar="MSGS_PER_S",
                   help=f"nak: slow start's first rate (default {d.initial_rate_msgs:g})")
    s.add_argument("--nak-start-window", dest="nak_start_window_msgs", type=_count,
                   default=None, metavar="MSGS",
                   help=f"nak: the start's first window (default {d.start_window_msgs}; 0: "
                        "no start, slow start from --nak-initial-rate)")
    s.add_argument("--nak-start-window-bytes", dest="nak_start_window_bytes", type=_count,
                   default=None, metavar="BYTES",
                   help=f"nak: ... or this many bytes of the first message's size, within "
                        f"half the least room the receivers' HELLO answers said, if that is "
                        f"more (default {d.start_window_bytes}; 0: the window in messages "
                        f"always)")
    s.add_argument("--nak-probe-after", dest="nak_probe_after_s", type=_non_negative,
                   default=None, metavar="S",
                   help=f"nak: after this long (and {d.probe_rtts:g} RTTs) without a NAK also "
                        f"grow geometrically, each growth bounded by the receivers' reported "
                        f"room (default {d.probe_after_s}; 0: no probe, CUBIC alone)")
    s.set_defaults(func=cmd_send)


def _other_parsers(sub: Any) -> None:
    k = sub.add_parser("keygen", help="make a CURVE key pair (NAME.key, NAME.key_secret), "
                                      "or with --shared a shared MAC key (NAME.shared_key)",
                       epilog=KEYGEN_EXAMPLES)
    k.add_argument("dir", help="directory to write the key files to")
    k.add_argument("name", help="key name, e.g. the node's id")
    k.add_argument("--shared", action="store_true",
                   help="make a 256-bit shared key for --shared-key instead of a CURVE pair")
    k.set_defaults(func=cmd_keygen)

    d = sub.add_parser("demo", help="three local receivers (one slow), one sender per mode",
                       epilog=DEMO_EXAMPLES)
    d.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated modes to run, one after the other")
    d.add_argument("--count", type=_positive_int, default=100_000,
                   help="messages the sender sends in each mode")
    d.add_argument("--slow-rate", type=_rate, default=20_000.0,
                   metavar="MSGS_PER_S", help="the slow receiver's consumption rate")
    d.add_argument("--capacity", type=_positive_int, default=5_000, metavar="MSGS",
                   help="each receiver's queue bound")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=cmd_demo)
    speedups.register(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nakflow", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr")
    parser.add_argument("--version", action="version", version=f"nakflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _receive_parser(sub)
    _send_parser(sub)
    _other_parsers(sub)
    for ep in entry_points(group="nakflow.commands"):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not take the CLI down
            log.warning("nakflow command plugin %s failed to load: %s", ep.name, exc)
    for p in sub.choices.values():  # plugins' commands too
        p.formatter_class = HelpFormatter
        # -v after the command as well as before it (SUPPRESS: an absent -v leaves the
        # top level's value alone)
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="log at INFO on stderr")
    return parser


def _json_stdout(argv: Sequence[str]) -> None:
    """With --json, stdout is the report alone: libraries that print there (OpenPGM warns
    on stdout) write to stderr instead, and Python's stdout keeps the real one."""
    if "--json" not in argv:
        return
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)  # C code writing to fd 1 now reaches stderr
    sys.stdout = os.fdopen(real, "w", buffering=1)


def main(argv: Sequence[str] | None = None) -> int:
    import zmq

    from ..live.sinks import SinkError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _json_stdout(argv)
    on_signals_interrupt()
    try:
        return int(args.func(args))
    except Interrupted as exc:  # a one-shot command stopped before it finished
        say(f"nakflow {args.command}: interrupted by {exc} before it finished")
        return 128 + exc.signum
    except (PeerMismatch, IncompleteDelivery) as exc:  # the table's 1: a peer of another
        say(f"nakflow {args.command}: error: {exc}")  # mode or key,
        return EXIT_INCOMPLETE  # or data missing
    except (NakflowError, ValueError, TimeoutError, SinkError) as exc:
        say(f"nakflow {args.command}: error: {exc}")
    except zmq.ZMQError as exc:
        say(f"nakflow {args.command}: error: {_zmq_problem(exc, args)}")
    except OSError as exc:
        say(f"nakflow {args.command}: error: {exc}")
    return 2


def _zmq_problem(exc: Any, args: argparse.Namespace) -> str:
    import errno

    endpoints = ", ".join(x for x in (getattr(args, "data", None),
                                      getattr(args, "feedback", None)) if x)
    if exc.errno == errno.EADDRINUSE:
        return (f"address already in use ({endpoints}): another process has that port; pick "
                "another, or tcp://HOST:* for a free one")
    if exc.errno == errno.EADDRNOTAVAIL or exc.errno == errno.ENODEV:
        return f"no such local address or interface in {endpoints}: {exc}"
    return f"{exc} ({endpoints})"

