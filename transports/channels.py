"""Thin ZeroMQ I/O for nakflow's two channels. Bytes in, bytes out; no policy.

* data channel: senders PUB -> receivers SUB
* feedback channel: receivers PUB -> senders SUB (and other receivers, to overhear)

Who binds: for ``tcp://``, ``ipc://`` and ``inproc://`` receivers bind both
their endpoints and senders connect to a list of them (Spark tasks come and
go, receivers stay). For ``epgm://`` and ``pgm://`` everyone connects to the
multicast group and nobody needs a list of anybody.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import zmq

SCHEMES = ("tcp", "ipc", "inproc", "epgm", "pgm")
MULTICAST = ("epgm", "pgm")


class EndpointError(ValueError):
    """An endpoint URI nakflow cannot use."""


@dataclass(frozen=True)
class Curve:
    """CURVE authentication and encryption (ZeroMQ's own) for one node's sockets.

    Receivers bind and are CURVE servers; senders (and receivers overhearing each
    other) connect as clients. All receivers of a stream share one server key pair:
    a client connects only if the server proves it holds that key pair's secret, so
    a sender hears feedback only from real receivers. A server admits only clients
    whose public key is in ``authorized_dir`` (checked by a ZAP handler the
    receiver runs). Key files are those ``nakflow keygen`` writes (zmq.auth format).
    Multicast (epgm/pgm) cannot use CURVE.
    """

    #: This node's key pair: a ``.key_secret`` file.
    secret_key_file: str
    #: The receivers' public key: a ``.key`` file (what clients check servers against).
    server_key_file: str
    #: Directory of public keys allowed to connect (servers only; receivers).
    authorized_dir: str | None = None

    def keys(self) -> tuple[bytes, bytes, bytes]:
        """(public, secret, server public); raises EndpointError if a file is unusable."""
        import os

        import zmq.auth

        for what, path in (("secret key", self.secret_key_file),
                           ("server key", self.server_key_file)):
            if not os.path.isfile(path):
                raise EndpointError(f"CURVE {what} file not found: {path} (make key files "
                                    "with 'nakflow keygen DIR NAME')")
        try:
            public, secret = zmq.auth.load_certificate(self.secret_key_file)
            server, _ = zmq.auth.load_certificate(self.server_key_file)
        except (OSError, ValueError) as exc:
            raise EndpointError(f"CURVE key files: {exc}") from None
        if secret is None:
            raise EndpointError(f"{self.secret_key_file} holds no secret key")
        return public, secret, server


@dataclass(frozen=True)
class SocketOptions:
    """ZeroMQ socket options users need."""

    #: Messages queued per peer before PUB drops (PUB never blocks), msgs.
    sndhwm_msgs: int = 200_000
    #: Messages queued per peer on the receiving side, msgs.
    rcvhwm_msgs: int = 200_000
    #: How long close() waits to hand queued messages to the kernel, ms.
    linger_ms: int = 2_000
    #: Largest message a socket accepts; bigger ones drop the connection, bytes (a
    #: receiver's data socket takes its ``max_frame_bytes`` at least).
    max_msg_bytes: int = 16 * 1024 * 1024 + 1024
    #: Multicast send rate (ZMQ_RATE), kbit/s.
    multicast_rate_kbps: int = 1_000_000
    #: Multicast recovery interval (ZMQ_RECOVERY_IVL): how long data is kept for repair, ms.
    multicast_recovery_ms: int = 2_000
    #: Kernel socket buffer of multicast (PGM) sockets, SO_RCVBUF via ZMQ_RCVBUF, bytes.
    #: The kernel's default (about 208 KiB) holds only a few hundred small PGM packets: a
    #: burst arriving while libzmq's I/O thread waits for a CPU overflows it, and PGM must
    #: repair what the kernel dropped. The kernel caps this at ``net.core.rmem_max``;
    #: 0 leaves the kernel's default.
    multicast_buffer_bytes: int = 4 * 1024 * 1024
    #: Multicast hops (ZMQ_MULTICAST_HOPS); 1 keeps traffic on the local segment.
    multicast_hops: int = 1
    #: CURVE security (None: plain TCP/IPC).
    curve: Curve | None = None


def scheme_of(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    if not sep or not rest or scheme not in SCHEMES:
        raise EndpointError(
            f"endpoint {uri!r}: expected one of {', '.join(s + '://' for s in SCHEMES)}")
    return scheme


def _check_port(uri: str, rest: str) -> None:
    """tcp and (e)pgm endpoints end in ``:PORT`` (1..65535, or ``*`` for tcp)."""
    host, sep, port = rest.rpartition(":")
    example = ("tcp://127.0.0.1:5600" if uri.startswith("tcp")
               else "epgm://192.168.1.5;239.192.1.1:5555")
    if not sep or not host:
        raise EndpointError(f"endpoint {uri!r} has no port: write it as {example}")
    if uri.startswith("tcp") and ":" in host.rpartition(";")[2]:  # [::1], [fe80::1%eth0]
        raise EndpointError(
            f"endpoint {uri!r}: an IPv6 address, and nakflow's sockets are IPv4 only: use "
            "an IPv4 address, e.g. tcp://127.0.0.1:5600 on this machine "
            "(docs/known-limits.md)")
    if port == "*" and uri.startswith("tcp"):
        return
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise EndpointError(f"endpoint {uri!r}: the port must be a number from 1 to 65535"
                            f"{' (or * to pick a free one)' if uri.startswith('tcp') else ''}")


#: The longest ipc path, bytes: ``sockaddr_un.sun_path`` (a sender's connect said only
#: "File name too long").
IPC_PATH_MAX = getattr(zmq, "IPC_PATH_MAX_LEN", 107) or 107


def _check_group(uri: str, rest: str) -> None:
    """An (e)pgm endpoint is ``INTERFACE;GROUP:PORT``, the group an IPv4 multicast address.
    libzmq asserts (the process aborts) on one without the interface."""
    example = "epgm://192.168.1.5;239.192.1.1:5555"
    iface, sep, group_port = rest.partition(";")
    if not sep or not iface:
        raise EndpointError(
            f"endpoint {uri!r} names no interface: write it as {example} (the IPv4 address "
            "of this machine's interface to send and join on, then the group)")
    group = group_port.rpartition(":")[0]
    try:
        multicast = ipaddress.IPv4Address(group).is_multicast
    except ValueError:
        multicast = False
    if not multicast:
        raise EndpointError(f"endpoint {uri!r}: {group!r} is no IPv4 multicast group "
                            f"(224.0.0.0 to 239.255.255.255; {example})")


def is_multicast(uri: str) -> bool:
    return scheme_of(uri) in MULTICAST


#: Host names of the loopback interface (besides 127.0.0.0/8).
LOOPBACK_NAMES = ("localhost", "::1")


def is_host_local(uri: str) -> bool:
    """``uri`` leads to a process on this host: ``ipc://``, ``inproc://``, or ``tcp://``
    to a loopback address (127.0.0.0/8, ``::1``, ``localhost``). Judged from the URI
    alone, without a name lookup: a host's own name or address counts as remote, and a
    tunnel or proxy that listens on loopback and forwards elsewhere is not recognised
    (``SenderConfig.host_local=False`` says so)."""
    scheme = scheme_of(uri)
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = uri.partition("://")[2].rpartition(":")[0].rpartition(";")[2]  # (source;)host:port
    host = host.strip("[]").lower()
    return host in LOOPBACK_NAMES or host.startswith("127.")


def receivers_expected(data: Sequence[str]) -> int:
    """How many receivers a sender's data endpoints lead to, at least: one per endpoint
    (each receiver binds its own), one for a multicast group (who joined is not known)."""
    return 1 if any(map(is_multicast, data)) else len(data)


def path_kind(uris: Sequence[str]) -> tuple[bool, bool]:
    """A sender's data endpoints: (multicast: some go to a group; host-local: every one
    leads to a process on this host, ``is_host_local``)."""
    return any(map(is_multicast, uris)), bool(uris) and all(map(is_host_local, uris))


def parse_endpoints(spec: str | Iterable[str]) -> list[str]:
    """``"tcp://a:1,tcp://b:2"`` or a list -> validated list of URIs."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    if isinstance(spec, (bytes, bytearray)) or not all(isinstance(u, str) for u in items):
        what = spec if isinstance(spec, (bytes, bytearray)) else next(
            u for u in items if not isinstance(u, str))
        raise TypeError(f"an endpoint is a str such as 'tcp://10.0.0.5:5600' (or a list of "
                        f"them), not {type(what).__name__}: {what!r}")
    uris = [u.strip() for u in items if u and u.strip()]
    if not uris:
        raise EndpointError("at least one endpoint is required")
    for u in uris:
        scheme = scheme_of(u)
        if scheme in ("tcp", "epgm", "pgm"):
            _check_port(u, u.partition("://")[2])
        if scheme in MULTICAST:
            _check_group(u, u.partition("://")[2])
        if scheme == "ipc" and len(u.partition("://")[2].encode()) > IPC_PATH_MAX:
            raise EndpointError(
                f"endpoint {u!r}: an ipc path holds at most {IPC_PATH_MAX} bytes (a Unix "
                f"socket's), this one {len(u.partition('://')[2].encode())}: pick a shorter "
                "path")
        if is_multicast(u) and not zmq.has("pgm"):
            raise EndpointError(
                f"{u}: this pyzmq has no OpenPGM (zmq.has('pgm') is False); "
                "run scripts/setup.sh as root to build it against Debian's libzmq3-dev")
    return uris


def check_distinct(data: Sequence[str], feedback: Sequence[str]) -> None:
    """No endpoint named twice in a data and a feedback list (parsed), a sender's or a
    receiver's: each channel needs its own (a receiver would bind it twice). ``:*`` (a
    free port each time) may repeat. Raises EndpointError naming it."""
    every = [*data, *feedback]
    twice = sorted({u for u in every if every.count(u) > 1 and not u.endswith(":*")})
    if twice:
        raise EndpointError(f"endpoint {twice[0]} is named twice: each channel needs its own "
                            "endpoint (each receiver has one for data and one for feedback, "
                            "e.g. ports 5600 and 5601)")


def check_pairs(data: Sequence[str], feedback: Sequence[str], *,
                proxy: bool = False) -> None:
    """A sender's endpoint lists (parsed): one feedback endpoint per data endpoint over
    tcp/ipc/inproc (each receiver has a pair, in the same order), no endpoint named twice.
    ``proxy``: the feedback endpoints are not one per receiver (a proxy that forwards
    every receiver's feedback), so the lists need not pair. Raises EndpointError saying
    which."""
    check_distinct(data, feedback)
    for uri in (*data, *feedback):
        if scheme_of(uri) == "tcp":
            host, _, port = uri.partition("://")[2].rpartition(":")
            if "*" in (host, port):  # ZeroMQ's connect said only "Invalid argument"
                raise EndpointError(
                    f"endpoint {uri}: a sender connects to a receiver's address and port, "
                    "not to a wildcard (that is how a receiver binds): write the receiver's "
                    "host and the port its 'ready' line gives, e.g. tcp://10.0.0.5:5600")
    if proxy or any(map(is_multicast, [*data, *feedback])):
        return
    if len(data) != len(feedback):
        raise EndpointError(
            f"{len(data)} data endpoint{'s' if len(data) != 1 else ''} and {len(feedback)} "
            f"feedback endpoint{'s' if len(feedback) != 1 else ''}: each receiver has one of "
            "each, listed in the same order (feedback through a proxy: --feedback-proxy, "
            "feedback_proxy=True)")


def _apply(sock: zmq.Socket[bytes], opts: SocketOptions, multicast: bool, bind: bool) -> None:
    if opts.curve is not None:
        if multicast:
            raise EndpointError("CURVE cannot secure multicast (epgm/pgm): use tcp or ipc")
        public, secret, server = opts.curve.keys()
        sock.curve_publickey = public
        sock.curve_secretkey = secret
        if bind:
            sock.curve_server = True
        else:
            sock.curve_serverkey = server
    sock.setsockopt(zmq.LINGER, opts.linger_ms)
    sock.setsockopt(zmq.SNDHWM, opts.sndhwm_msgs)
    sock.setsockopt(zmq.RCVHWM, opts.rcvhwm_msgs)
    sock.setsockopt(zmq.MAXMSGSIZE, opts.max_msg_bytes)
    if multicast:
        sock.setsockopt(zmq.RATE, opts.multicast_rate_kbps)
        sock.setsockopt(zmq.RECOVERY_IVL, opts.multicast_recovery_ms)
        sock.setsockopt(zmq.MULTICAST_HOPS, opts.multicast_hops)
        if opts.multicast_buffer_bytes > 0:  # libzmq 4.3 hands ZMQ_SNDBUF to PGM as
            sock.setsockopt(zmq.RCVBUF, opts.multicast_buffer_bytes)  # SO_RCVBUF too,
            sock.setsockopt(zmq.SNDBUF, opts.multicast_buffer_bytes)  # so both alike


def _attach(sock: zmq.Socket[bytes], uris: Sequence[str], bind: bool) -> list[str]:
    """Bind or connect to every URI (multicast always connects). Returns bound URIs."""
    bound = []
    for uri in uris:
        if bind and not is_multicast(uri):
            if scheme_of(uri) == "ipc" and _ipc_in_use(uri):
                raise EndpointError(
                    f"cannot bind {uri}: a process listens on that path already (another "
                    "receiver?); ZeroMQ would take the path from it without a word. Pick "
                    "another path, or stop that process first")
            try:
                sock.bind(uri)
            except zmq.ZMQError as exc:
                if exc.errno == errno.EADDRINUSE:  # ZeroMQ's error named no endpoint
                    raise EndpointError(
                        f"cannot bind {uri}: address already in use (another receiver, or "
                        "another program, has it); pick another, or tcp://HOST:* for a "
                        "free port") from None
                if exc.errno in (errno.ENODEV, errno.EADDRNOTAVAIL) and scheme_of(uri) == "tcp":
                    host = uri.partition("://")[2].rpartition(":")[0]
                    raise EndpointError(
                        f"cannot bind {uri}: {host!r} is no address or interface of this "
                        "machine; a receiver binds to one of its own IP addresses "
                        "(tcp://127.0.0.1:PORT: this machine only), an interface "
                        "(tcp://eth0:PORT) or every interface (tcp://*:PORT), not to a "
                        "host name such as 'localhost' (senders may connect to one)"
                    ) from None
                raise
            bound.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        elif is_multicast(uri):
            try:
                sock.connect(uri)
            except zmq.ZMQError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENODEV):
                    raise
                iface = uri.partition("://")[2].partition(";")[0]
                raise EndpointError(
                    f"cannot join {uri}: OpenPGM refused it ({exc.strerror}): {iface!r} must "
                    "be an interface of this machine, up, with multicast on and a route for "
                    "the group (ip link set IFACE up multicast on; ip route add 224.0.0.0/4 "
                    "dev IFACE); naming it by its IPv4 address is the surest form "
                    "(epgm://192.168.1.5;239.192.1.1:5555)") from None
        else:
            sock.connect(uri)
    return bound


def _ipc_in_use(uri: str) -> bool:
    """Something accepts connections on ``uri``'s socket file. ZeroMQ's ipc bind removes
    an existing file and binds anew: a second receiver on a live receiver's path took it
    over in silence (a tcp port in use fails the bind instead). A file nobody listens on
    is a dead process's, which the bind may replace. Abstract names (``ipc://@x``) fail
    the bind by themselves."""
    path = uri.partition("://")[2]
    if not path or path.startswith("@") or not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:  # refused: nobody listens there any more
        return False
    finally:
        probe.close()


def check_options(options: Any) -> None:
    """Raise TypeError unless ``options`` is None or a SocketOptions (a dict failed with
    ``'dict' object has no attribute 'max_msg_bytes'``)."""
    if options is not None and not isinstance(options, SocketOptions):
        raise TypeError(f"options must be a transports.SocketOptions (or None), not "
                        f"{type(options).__name__}")


def _open(ctx: zmq.Context[zmq.Socket[bytes]], kind: int, uris: Sequence[str], bind: bool,
          options: SocketOptions | None,
          subscribe: Sequence[bytes] = (b"",)) -> tuple[zmq.Socket[bytes], list[str]]:
    check_options(options)
    opts = options or SocketOptions()
    sock = ctx.socket(kind)
    try:
        _apply(sock, opts, any(is_multicast(u) for u in uris), bind)
        if kind == zmq.SUB:
            for prefix in subscribe:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
        return sock, _attach(sock, uris, bind)
    except BaseException:
        sock.close(0)
        raise


def open_pub(ctx: zmq.Context[zmq.Socket[bytes]], uris: Sequence[str], *, bind: bool,
             options: SocketOptions | None = None) -> tuple[zmq.Socket[bytes], list[str]]:
    """A PUB socket on ``uris``; returns it and the endpoints actually bound."""
    return _open(ctx, zmq.PUB, uris, bind, options)


def open_sub(ctx: zmq.Context[zmq.Socket[bytes]], uris: Sequence[str], *, bind: bool,
             options: SocketOptions | None = None,
             subscribe: Sequence[bytes] = (b"",)) -> tuple[zmq.Socket[bytes], list[str]]:
    """A SUB socket subscribed to the ``subscribe`` prefixes (default: everything) on
    ``uris``; returns it and the bound endpoints."""
    return _open(ctx, zmq.SUB, uris, bind, options, subscribe)


def drain(sock: zmq.Socket[bytes], limit: int) -> list[bytes]:
    """Read up to ``limit`` messages without blocking."""
    out: list[bytes] = []
    recv = sock.recv
    try:
        for _ in range(limit):
            out.append(recv(zmq.NOBLOCK))
    except zmq.Again:
        pass
    return out


class DisconnectWatch:
    """ZeroMQ's socket monitor on ``sock``: the peer connections of ``sock`` that closed
    (EVENT_DISCONNECTED: over tcp and ipc, a peer process that died or closed its socket).
    Poll ``socket`` for POLLIN (a plain or an asyncio socket, as ``sock`` is); ``lost()``
    counts the disconnections since the last look and never blocks."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.socket = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._plain: zmq.Socket[bytes] = zmq.Socket.shadow(self.socket.underlying)

    def lost(self) -> int:
        plain, n = self._plain, 0
        for _ in range(1_000):
            if not int(plain.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                break
            event = plain.recv_multipart()[0]  # [event u16, value u32], then the address
            n += int.from_bytes(event[:2], "little") == zmq.EVENT_DISCONNECTED
        return n

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass  # the socket is already closed
        self.socket.close(0)


_PROBE_EVENTS = (zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
                 | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                 | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_DISCONNECTED
                 | zmq.EVENT_CONNECT_RETRIED)


#: The kind of socket a sender connects with, by the channel it probes.
_PROBE_KINDS = {"data": zmq.PUB, "feedback": zmq.SUB}
_OTHER = {"data": "feedback", "feedback": "data"}
#: Events after which a handshake is over without success (the connection closed in it).
_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                     zmq.EVENT_DISCONNECTED)


def _handshakes(targets: Sequence[tuple[str, str]], opts: SocketOptions,
                timeout_s: float) -> dict[tuple[str, str], int]:
    """(endpoint, channel) -> how a throwaway socket of that channel's kind fared there,
    all at once: the last of ``_PROBE_EVENTS`` ZeroMQ's monitor said (0: none)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    probes: dict[Any, tuple[tuple[str, str], Any]] = {}
    seen = dict.fromkeys(targets, 0)
    try:
        poller = zmq.Poller()
        for target in targets:
            sock = ctx.socket(_PROBE_KINDS[target[1]])
            _apply(sock, opts, False, False)
            sock.setsockopt(zmq.LINGER, 0)
            monitor = sock.get_monitor_socket(_PROBE_EVENTS)
            probes[monitor] = (target, sock)
            poller.register(monitor, zmq.POLLIN)
            sock.connect(target[0])
        end, left = time.monotonic() + timeout_s, len(targets)
        while left and (wait := end - time.monotonic()) > 0:
            for monitor, _ in poller.poll(max(1, int(wait * 1000))):
                target = probes[monitor][0]
                event = int.from_bytes(monitor.recv_multipart()[0][:2], "little")
                seen[target] = event
                if event != zmq.EVENT_CONNECTED:  # the handshake is over, one way or other
                    poller.unregister(monitor)
                    left -= 1
    finally:
        for monitor, (_, sock) in probes.items():
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
        ctx.term()
    return seen


def probe(targets: Sequence[tuple[str, str]], options: SocketOptions | None = None,
          timeout_s: float = 2.0) -> dict[tuple[str, str], str]:
    """What is wrong with each (``tcp://`` or ``ipc://`` endpoint, channel: "data" or
    "feedback") of ``targets``, as a sender's socket there (PUB, SUB) with ``options``
    (its CURVE keys) sees it: a throwaway socket connects to each, all at once, and
    ZeroMQ's monitor says how it ended: the connect refused (ZeroMQ schedules a retry),
    the handshake succeeded or failed, or the connection closed in it. Each of those comes
    within milliseconds here; ``timeout_s`` bounds a peer that never answers (a host that
    drops the SYN), generous so that a loaded machine does not turn a slow handshake into
    a wrong diagnosis. A handshake that failed without ZAP's refusal is tried again with
    the other channel's kind: if that one succeeds, the endpoint is the other channel's
    (the two swapped). Otherwise it is CURVE: which event a client without keys meets at a
    CURVE server (mechanism mismatch, or the connection closed) is a race, as it is for a
    PUB at a PUB (measured: 36/4 and 29/11 of 40), so only the second try tells them
    apart. Returns target -> what is wrong; a target that is fine, multicast and inproc
    are left out. For an error path (nobody answered); the receivers see a peer come and
    go."""
    wanted = [t for t in targets if scheme_of(t[0]) in ("tcp", "ipc")]
    if not wanted:
        return {}
    opts = options or SocketOptions()
    seen = _handshakes(wanted, opts, timeout_s)
    failed = [t for t, event in seen.items() if event in _HANDSHAKE_FAILED]
    other = _handshakes([(e, _OTHER[c]) for e, c in failed], opts, timeout_s) if failed else {}
    curve = ("the handshake failed: the receiver requires CURVE and this sender has no keys"
             if opts.curve is None else "the CURVE handshake failed: the receiver runs "
             "without CURVE, or the server key is not its key")
    out = {}
    for (endpoint, channel), event in seen.items():
        if event in (0, zmq.EVENT_CONNECT_RETRIED):
            why = "nothing accepts a connection"
        elif event == zmq.EVENT_CONNECTED:
            why = f"connected, but the handshake did not end within {timeout_s:g} s"
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            why = ("the receiver refused this sender's CURVE key (its public key is not in "
                   "the receiver's authorized directory)")
        elif other.get((endpoint, _OTHER[channel])) == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            why = (f"a receiver's {_OTHER[channel]} endpoint, not its {channel} endpoint "
                   "(are the data and feedback endpoints swapped?)")
        elif event in _HANDSHAKE_FAILED:
            why = curve
        else:
            continue  # the handshake succeeded
        out[(endpoint, channel)] = why
    return out


def with_reach(err: Exception, data: Sequence[str], feedback: Sequence[str],
               options: SocketOptions | None = None, timeout_s: float = 2.0,
               answered: int = 0) -> Exception:
    """A sender's wait for receivers ran out with ``err``: a plain TimeoutError (nobody
    or too few answered) gains what a probe (``probe``, with the sender's ``options``)
    finds wrong at its endpoints ("; tcp://h:5740 (data): nothing accepts a connection;
    ..."); none named: the receivers there are up and the handshake succeeds, but they
    did not answer (another stream, another shared key). Any other ``err`` (the cause is
    known), or one where ``answered`` is as many as the data endpoints (a wait for more
    receivers than they lead to), comes back as it is."""
    if type(err) is not TimeoutError or answered >= len(data):
        return err  # the cause is known, or every endpoint's receiver ``answered``
    targets = [(e, "data") for e in data] + [(e, "feedback") for e in feedback]
    found = probe(targets, options, timeout_s)
    said = [str(err), *(f"{e} ({channel}): {why}" for (e, channel), why in found.items())]
    if not found and all(scheme_of(e) in ("tcp", "ipc") for e, _ in targets):
        said.append(REACHED_BUT_SILENT)
    return TimeoutError("; ".join(said))


#: A wait that ran out where every endpoint took the probe's connection and handshake.
REACHED_BUT_SILENT = ("every endpoint accepts this sender's connection and handshake: the "
                      "receivers there are up but did not answer its HELLO (a receiver "
                      "answers only its own stream, --stream, and with a shared key only "
                      "frames sealed with it), or some are one receiver named twice (two "
                      "names or addresses of one host and port: it answers once)")


#: What a frame may carry beyond ``max_frame_bytes``: a shared key's seal, bytes.
FRAME_SLACK_BYTES = 1024


def open_receiver_sockets(context: zmq.Context[zmq.Socket[bytes]] | None,
                          data: str | Sequence[str], feedback: str | Sequence[str],
                          overhear: str | Sequence[str], options: SocketOptions | None,
                          subscribe: Sequence[bytes] = (b"",), max_frame_bytes: int = 0,
                          ) -> tuple[Any, list[str], Any, list[str], Any, Any]:
    """A receiver's sockets: (data SUB subscribed to ``subscribe``, its bound endpoints,
    feedback PUB, its bound endpoints, overhearing SUB or None, CURVE authenticator or
    None); all closed again if any of them fails. Over multicast the overhearing SUB
    joins the feedback group, where the other receivers speak. The data SUB takes
    messages of ``max_frame_bytes`` (the receiver's frame bound) and a seal at least:
    ZeroMQ drops the connection at a bigger one, and at its fixed 16 MiB a receiver
    configured for bigger frames lost every one (reported as beyond the history)."""
    check_options(options)
    base = options or SocketOptions()
    if max_frame_bytes + FRAME_SLACK_BYTES > base.max_msg_bytes:
        options = replace(base, max_msg_bytes=max_frame_bytes + FRAME_SLACK_BYTES)
    curve = options.curve if options is not None else None
    auth: Any = None
    if curve is not None:
        if not curve.authorized_dir:
            raise EndpointError("a CURVE receiver needs authorized_dir (--curve-authorized): "
                                "a directory of the public keys allowed to connect")
        if not os.path.isdir(curve.authorized_dir):
            raise EndpointError(f"CURVE authorized_dir {curve.authorized_dir!r} is not a "
                                "directory (it holds the public keys allowed to connect)")
        from zmq.auth.thread import ThreadAuthenticator

        ctx = context or zmq.Context()  # the ZAP handler belongs to a context: its own
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=curve.authorized_dir)
    else:
        ctx = context or zmq.Context.instance()
    sockets: list[zmq.Socket[bytes]] = []
    try:
        data_uris, fb_uris = parse_endpoints(data), parse_endpoints(feedback)
        check_distinct(data_uris, fb_uris)
        sub, data_eps = open_sub(ctx, data_uris, bind=True, options=options,
                                 subscribe=subscribe)
        sockets.append(sub)
        pub, fb_eps = open_pub(ctx, fb_uris, bind=True, options=options)
        sockets.append(pub)
        hear_uris = parse_endpoints(overhear) if overhear else []
        if any(is_multicast(u) for u in fb_uris):
            hear_uris += fb_uris
        hear = None
        if hear_uris:
            hear, _ = open_sub(ctx, hear_uris, bind=False, options=options)
            sockets.append(hear)
    except BaseException:
        for sock in sockets:
            sock.close(0)
        if auth is not None:
            auth.stop()
        raise
    return sub, data_eps, pub, fb_eps, hear, auth
