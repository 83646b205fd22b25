"""How the values of a msgpack row read where only some types go: in JSON (the JSON-line
sinks) and as Arrow struct fields (``nakflow.arrow``, the Parquet sink). Spark's maps
may have keys of any type (``map<int,string>``); JSON and a struct's field names take
strings, so both name a key as Spark's ``to_json`` does (``map_key``)."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import msgpack

__all__ = ["json_value", "map_key", "string_keys"]


def json_value(value: Any) -> Any:
    """A msgpack-decoded value as JSON can carry it, the way Spark's ``to_json`` writes
    it: bytes as base64, NaN and the infinities as the strings "NaN", "Infinity" and
    "-Infinity", map keys as strings; the rest unchanged."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, msgpack.Timestamp):  # another producer's msgpack timestamp
        return value.to_datetime().isoformat(timespec="microseconds")
    if isinstance(value, dict):
        return {map_key(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def map_key(key: Any) -> str:
    """A map key as a string, as JSON and a struct's field name need one (Spark's
    ``to_json``: ``1``, ``1.5``, ``true``; bytes as base64)."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return base64.b64encode(key).decode("ascii")
    return json.dumps(json_value(key), separators=(",", ":"))


def string_keys(value: Any) -> Any:
    """``value`` with every map key, at any depth, named by ``map_key``; the rest as it
    is."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else map_key(k): string_keys(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [string_keys(v) for v in value]
    return value
