"""Thin ZeroMQ transports for nakflow: PUB/SUB over tcp, ipc, inproc and epgm."""

from .channels import (
    MULTICAST,
    SCHEMES,
    Curve,
    EndpointError,
    SocketOptions,
    disconnections,
    drain,
    is_multicast,
    open_pub,
    open_receiver_sockets,
    open_sub,
    parse_endpoints,
    scheme_of,
    unwatch,
    watch_disconnects,
)

__all__ = [
    "MULTICAST",
    "SCHEMES",
    "Curve",
    "EndpointError",
    "SocketOptions",
    "disconnections",
    "drain",
    "is_multicast",
    "open_pub",
    "open_receiver_sockets",
    "open_sub",
    "parse_endpoints",
    "scheme_of",
    "unwatch",
    "watch_disconnects",
]
