"""Thin ZeroMQ transports for nakflow: PUB/SUB over tcp, ipc, inproc and epgm."""

from .channels import (
    MULTICAST,
    SCHEMES,
    Curve,
    DisconnectWatch,
    EndpointError,
    SocketOptions,
    check_pairs,
    drain,
    is_host_local,
    is_multicast,
    open_pub,
    open_receiver_sockets,
    open_sub,
    parse_endpoints,
    path_kind,
    scheme_of,
)

__all__ = [
    "MULTICAST",
    "SCHEMES",
    "Curve",
    "DisconnectWatch",
    "EndpointError",
    "SocketOptions",
    "check_pairs",
    "drain",
    "is_host_local",
    "is_multicast",
    "open_pub",
    "open_receiver_sockets",
    "open_sub",
    "parse_endpoints",
    "path_kind",
    "scheme_of",
]
