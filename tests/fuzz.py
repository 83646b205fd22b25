"""Shared Hypothesis strategies and the fuzzing budget.

CI runs each fuzz test with the example count it names. The longer run scales every
count: ``NAKFLOW_FUZZ_SCALE=100 pytest --timeout 0 tests/test_codec.py tests/test_auth.py
tests/test_fuzz_live.py`` (``--timeout 0``: the live tests then take longer than CI's
per-test limit; see docs/guarantees.md for the last long run's figures).
"""

from __future__ import annotations

import os

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from nakflow.wire import Bye, Credit, Data, End, Gone, Hello, Nak, RData, Receipt, Repair, encode

SCALE = max(1, int(os.environ.get("NAKFLOW_FUZZ_SCALE", "1")))
MAX = 2**63 - 1


def budget(examples: int) -> settings:
    """Settings for a fuzz test: ``examples`` in CI, times NAKFLOW_FUZZ_SCALE on request."""
    return settings(max_examples=examples * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


names = st.text(min_size=1, max_size=20)
u63 = st.integers(0, MAX)
ts = st.floats(allow_nan=False, allow_infinity=False)
frames = st.one_of(
    st.builds(Data, names, names, u63, u63, ts,
              st.lists(st.binary(max_size=40), min_size=1, max_size=5).map(tuple), u63),
    st.builds(Nak, names, names, st.integers(1, 100), st.floats(0, 1000), ts,
              st.integers(0, 255), st.floats(0, 1e12)),
    st.builds(Credit, names, names, names, u63, u63, ts),
    st.builds(Hello, names, names, st.sampled_from(["sender", "receiver"]),
              st.sampled_from(["nak", "ack", "none"]), u63, u63, st.text(max_size=5), ts,
              st.booleans(), st.booleans(), u63, u63),
    st.builds(Bye, names, names, st.sampled_from(["sender", "receiver"]), u63, ts),
    st.builds(End, names, names, u63, u63, ts),
    st.builds(RData, names, names, u63, u63, ts,
              st.lists(st.binary(max_size=40), min_size=1, max_size=5).map(tuple)),
    st.builds(Repair, names, names, names, u63,
              st.lists(st.tuples(st.integers(0, MAX - 1), st.integers(1, 1000)).map(
                  lambda r: (r[0], min(MAX, r[0] + r[1]))), min_size=1, max_size=64).map(tuple),
              ts, st.booleans(), st.booleans()),
    st.tuples(names, names, u63, st.integers(0, MAX - 1), st.integers(1, 1000), ts).map(
        lambda t: Gone(t[0], t[1], t[2], t[3], min(MAX, t[3] + t[4]), t[5])),
    st.builds(Receipt, names, names, names, u63, u63, st.tuples(u63, u63, u63, u63), ts),
)

# Frames a live node takes seriously: its own stream, ids from a small set (so streams
# collide), the ids of the real peers, seqs and levels at the edges.
edge_ints = st.one_of(st.integers(0, 10), st.sampled_from([MAX, MAX - 1, 2**32, 2**53 + 1]),
                      u63)
peers = st.sampled_from(["real", "r1", "mallory", "x" * 256])
stream = st.sampled_from(["default", "default", "default", "other"])
now_ts = st.one_of(st.floats(0, 2e9), ts)
live_frames = st.one_of(
    st.builds(Data, stream, peers, edge_ints, edge_ints, now_ts,
              st.lists(st.binary(max_size=16), min_size=1, max_size=8).map(tuple), edge_ints),
    st.builds(Nak, stream, peers, st.integers(1, 100), st.floats(0, 1000), now_ts),
    st.builds(Credit, stream, peers, peers, edge_ints, edge_ints, now_ts),
    st.builds(Hello, stream, peers, st.sampled_from(["sender", "receiver"]),
              st.sampled_from(["nak", "ack", "none"]), edge_ints, edge_ints,
              st.sampled_from(["", "real", "r1"]), now_ts, st.booleans(), st.booleans(),
              edge_ints, edge_ints),
    st.builds(Bye, stream, peers, st.sampled_from(["sender", "receiver"]), edge_ints, now_ts),
    st.builds(End, stream, peers, edge_ints, edge_ints, now_ts),
    st.builds(RData, stream, peers, edge_ints, edge_ints, now_ts,
              st.lists(st.binary(max_size=16), min_size=1, max_size=8).map(tuple)),
    st.builds(Repair, stream, peers, peers, edge_ints,
              st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 10**6)).map(
                  lambda r: (r[0], r[0] + r[1])), min_size=1, max_size=64).map(tuple),
              now_ts),
    st.tuples(stream, peers, edge_ints, st.integers(0, 1000), st.integers(1, 10**6),
              now_ts).map(lambda t: Gone(t[0], t[1], t[2], t[3], t[3] + t[4], t[5])),
    st.builds(Receipt, stream, peers, peers, edge_ints, edge_ints,
              st.tuples(edge_ints, edge_ints, edge_ints, edge_ints), now_ts),
)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """A valid frame's bytes with a byte changed, cut short, or followed by junk."""
    buf = bytearray(draw(base))
    how = draw(st.integers(0, 2))
    if how == 0 and buf:
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    elif how == 1:
        del buf[draw(st.integers(0, len(buf))):]
    else:
        buf += draw(st.binary(min_size=1, max_size=8))
    return bytes(buf)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
                    st.text(max_size=10), st.binary(max_size=10))
# arrays that look like frames: the right version and a frame type, then anything
lookalikes = st.tuples(st.integers(1, 10), st.lists(scalars, max_size=9)).map(
    lambda t: msgpack.packb([1, t[0], *t[1]], use_bin_type=True))
wire = st.one_of(live_frames.map(encode), mutated(live_frames.map(encode)), lookalikes,
                 st.binary(max_size=64))
