"""How Spark values travel: a row becomes one msgpack map, with values that mean the same
thing wherever they are read.

=========================  ===============================  ===========================
Spark type                 a Python receiver gets            the JSON-line sink writes
=========================  ===============================  ===========================
byte/short/int/long        ``int``                           a number
float/double               ``float`` (NaN and infinities     a number; NaN, Infinity and
                           too)                              -Infinity as those strings
boolean                    ``bool``                          true / false
string                     ``str``                           a string
binary                     ``bytes``                         a base64 string
decimal(p, s)              ``str``, every digit kept         a string
                           (``decimal.Decimal(value)``)
date                       ``str`` ``2026-11-25``            a string
timestamp                  ``str``, the instant in UTC at    a string
                           microseconds:
                           ``2026-11-25T10:00:00.000000+00:00``
timestamp_ntz              ``str``, the wall time as given,  a string
                           no offset:
                           ``2026-11-25T10:00:00.000000``
interval (day-time)        ``str``, an ISO 8601 duration:    a string
                           ``P1DT2H3M4.000005S``
array, map, struct         ``list``, ``dict``, ``dict``      array, object, object
variant                    ``str``, its JSON text            a string
null (any type)            ``None``                          null
=========================  ===============================  ===========================

A year-month ``interval`` PySpark hands no task at all: ``check_sendable`` refuses it on
the driver, naming the column.

A ``timestamp`` is an instant: PySpark hands a task a naive datetime in the Python
worker's own time zone (its ``TZ``), which this module turns back into the instant and
writes in UTC, so the result depends on no worker's or receiver's time zone. A
``timestamp_ntz`` is a wall time with no zone, and stays one. PySpark gives both as naive
datetimes, so only the schema tells them apart: ``msgpack_serializer(schema)`` (which
``nakflow_writer(config, schema=df.schema)`` and ``send_with_metrics`` use) knows it;
without a schema every naive datetime is taken for a ``timestamp``. The JSON-line sink's
side is ``nakflow.values.json_value``; docs/types.md has this table and a snippet that
reads a sink file back into pandas.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Callable
from typing import Any

import msgpack

from nakflow import ConfigError

__all__ = ["check_sendable", "duration", "instant", "msgpack_serializer", "row_to_msgpack",
           "unsendable", "wall_time"]

Convert = Callable[[Any], Any]


def instant(value: _dt.datetime) -> str:
    """A Spark ``timestamp`` as ISO 8601 in UTC at microseconds. A naive datetime is
    taken in this process's local time zone (PySpark's form of a ``timestamp``)."""
    return value.astimezone(_dt.timezone.utc).isoformat(timespec="microseconds")


def wall_time(value: _dt.datetime) -> str:
    """A Spark ``timestamp_ntz`` as ISO 8601 at microseconds, without an offset."""
    return value.replace(tzinfo=None).isoformat(timespec="microseconds")


def duration(value: _dt.timedelta) -> str:
    """A Spark day-time ``interval`` as an ISO 8601 duration at microseconds:
    ``P1DT2H3M4.000005S``; a negative one with a leading minus (``-P1DT0H0M0.000000S``),
    as ``pandas.Timedelta`` reads both."""
    sign = "-" if value < _dt.timedelta(0) else ""
    value = abs(value)
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{sign}P{value.days}DT{hours}H{minutes}M{seconds}.{value.microseconds:06d}S"


def _plain(value: Any) -> Any:
    """msgpack ``default`` hook: Spark values msgpack has no type for."""
    if isinstance(value, _dt.timedelta):
        return duration(value)
    if isinstance(value, _dt.datetime):
        return instant(value)
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, _dt.time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if type(value).__name__ == "VariantVal":  # a ``variant``: its JSON text, as to_json
        return value.toJson()
    if hasattr(value, "asDict"):  # a nested Row
        return value.asDict(recursive=True)
    raise TypeError(f"cannot serialise {type(value).__name__}; pass serializer= to the config")


def _pack(value: Any) -> bytes:
    out: bytes = msgpack.packb(value, default=_plain, use_bin_type=True, datetime=False)
    return out


def row_to_msgpack(row: Any) -> bytes:
    """The default serializer without a schema: a Row becomes a msgpack map of column ->
    value (see the module's table); an RDD's plain values (dicts, tuples, numbers,
    strings) are packed as they are. Every naive datetime is taken for a ``timestamp``."""
    if hasattr(row, "asDict"):
        d = row.asDict(recursive=True)
        if len(d) < len(row):  # a name twice: the map would keep the last value of it
            raise ValueError(_twice(_repeated(row.__fields__)))
        row = d
    return _pack(row)


def _repeated(names: Any, prefix: str = "") -> list[str]:
    """Each name of ``names`` again, after ``prefix``, every time it comes again."""
    seen: set[str] = set()
    again = []
    for name in names:
        if name in seen:
            again.append(f"{prefix}{name}")
        seen.add(name)
    return again


def _twice(twice: list[str]) -> str:
    return (f"columns named twice: {', '.join(repr(n) for n in dict.fromkeys(twice))}. A row "
            "reaches its receivers by name (a map of name to value; Arrow refuses such a "
            "struct), one value a name: the others would be lost. Rename them first, "
            "e.g. df.toDF('a', 'a_2')")


def _converter(dtype: Any) -> Convert | None:
    """What to do to a value of Spark type ``dtype`` before packing (None: nothing, the
    default hook will do); only ``timestamp_ntz`` needs the schema's word."""
    name = type(dtype).__name__
    if name == "TimestampNTZType":
        return lambda v: None if v is None else wall_time(v)
    if name == "StructType":
        fields = [(f.name, _converter(f.dataType)) for f in dtype.fields]
        if all(c is None for _n, c in fields):
            return None

        def struct(v: Any) -> Any:
            if v is None:
                return None
            d = v.asDict(recursive=False) if hasattr(v, "asDict") else dict(v)
            for fname, conv in fields:
                if conv is not None and fname in d:
                    d[fname] = conv(d[fname])
            return d
        return struct
    if name == "ArrayType":
        elem = _converter(dtype.elementType)
        if elem is None:
            return None
        return lambda v: None if v is None else [elem(x) for x in v]
    if name == "MapType":
        key, val = _converter(dtype.keyType), _converter(dtype.valueType)
        if key is None and val is None:
            return None
        k, w = key or (lambda x: x), val or (lambda x: x)
        return lambda v: None if v is None else {k(a): w(b) for a, b in v.items()}
    return None


def msgpack_serializer(schema: Any) -> Callable[[Any], bytes]:
    """The default serializer for rows of ``schema`` (a ``pyspark.sql.types.StructType``):
    as ``row_to_msgpack``, with ``timestamp_ntz`` fields kept as wall times."""
    check_sendable(schema)
    conv = _converter(schema)
    if conv is None:
        return row_to_msgpack

    def serialize(row: Any) -> bytes:
        return _pack(conv(row))
    return serialize


#: Spark types that PySpark hands no Python task, row by row or as Arrow (Spark 4.x:
#: ``[NOT_IMPLEMENTED] YearMonthIntervalType.fromInternal is not implemented`` in a row
#: writer's task, ``KeyError: 21`` from pyarrow in the data source's), by their Spark
#: names. ``unsendable`` finds them before a task starts.
UNSENDABLE = {"YearMonthIntervalType", "CalendarIntervalType"}


def unsendable(schema: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(column, Spark type) of every column of ``schema`` (a ``StructType``), nested
    fields, array elements and map keys and values too, whose values PySpark cannot hand a
    Python task: a year-month ``interval`` and a ``CalendarIntervalType``."""
    found: list[tuple[str, str]] = []
    for f in getattr(schema, "fields", ()):
        found += _unsendable_type(f.dataType, f"{prefix}{f.name}")
    return found


def _named_twice(schema: Any, prefix: str = "") -> list[str]:
    """Every field name of ``schema`` that a struct, nested or not, has twice (Spark
    allows it: ``SELECT 1 AS a, 2 AS a``), with its path, each time it repeats."""
    found = _repeated([f.name for f in getattr(schema, "fields", ())], prefix)
    for f in getattr(schema, "fields", ()):
        dtype = f.dataType
        while type(dtype).__name__ in ("ArrayType", "MapType"):
            dtype = getattr(dtype, "elementType", None) or dtype.valueType
        found += _named_twice(dtype, f"{prefix}{f.name}.")
    return found


def _unsendable_type(dtype: Any, path: str) -> list[tuple[str, str]]:
    name = type(dtype).__name__
    if name in UNSENDABLE:
        return [(path, dtype.simpleString())]
    if name == "StructType":
        return unsendable(dtype, f"{path}.")
    if name == "ArrayType":
        return _unsendable_type(dtype.elementType, f"{path}[]")
    if name == "MapType":
        return (_unsendable_type(dtype.keyType, f"{path}{{key}}")
                + _unsendable_type(dtype.valueType, f"{path}{{value}}"))
    return []


def check_sendable(schema: Any) -> None:
    """Raise ``ConfigError`` naming the columns of ``schema`` that a struct names twice
    (a row would keep one value of each name), or else each that no Spark task could
    send (``unsendable``), and what to do instead: called before any task starts."""
    named = _named_twice(schema)
    if named:
        raise ConfigError(_twice(named))
    bad = unsendable(schema)
    if bad:
        cols = ", ".join(f"{path!r} ({kind})" for path, kind in bad)
        top = next(f.name for f in schema.fields if _unsendable_type(f.dataType, f.name))
        raise ConfigError(
            f"cannot send column{'s' if len(bad) > 1 else ''} {cols}: PySpark hands a "
            "Python task no value of that type (its row and its Arrow conversions both "
            "fail), so no nakflow writer can send it. Cast it to one a task takes first, "
            f"e.g. df.withColumn({top!r}, df[{top!r}].cast('string')): a year-month "
            "interval then arrives as text, INTERVAL '1-2' YEAR TO MONTH (docs/types.md)")
