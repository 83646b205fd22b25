"""SequenceTracker: gaps, duplicates, joins and END accounting kept apart."""

from hypothesis import given
from hypothesis import strategies as st

from nakflow.core.seqtrack import SequenceTracker


def test_in_order_stream_is_complete():
    t = SequenceTracker()
    for s in range(0, 100, 10):
        assert t.on_data("p", 1, s, 10) == [(0, 10)]
    st_ = t.on_end("p", 1, 100)
    assert st_.complete and t.totals() == {"lost": 0, "missed_before_join": 0,
                                           "duplicates": 0, "received": 100, "dropped": 0,
                                           "repaired": 0, "beyond_history": 0,
                                           "redundant": 0}


def test_gap_in_flight_missing_tail_and_late_join_are_kept_apart():
    t = SequenceTracker()
    t.on_data("p", 1, 50, 10)  # joined late: 0..49 missed
    t.on_data("p", 1, 70, 10)  # 60..69 lost in flight
    t.on_end("p", 1, 100)  # 80..99 lost
    assert t.totals() == {"lost": 30, "missed_before_join": 50, "duplicates": 0,
                          "received": 20, "dropped": 0, "repaired": 0, "beyond_history": 0,
                          "redundant": 0}
    assert t.per_sender()[0]["status"] == "incomplete"


def test_complete_means_every_seq_up_to_end_was_delivered():
    """END alone is not complete: a stream whose queue drops were not repaired, or part
    of which was beyond the sender's history, is incomplete, with the count by reason."""
    t = SequenceTracker(repair=True)
    t.on_data("a", 1, 0, 10)
    t.on_dropped("a", 1, 3)
    t.on_end("a", 1, 10)
    t.on_data("b", 1, 0, 5)
    t.on_data("b", 1, 8, 2)  # 5..7 lost in flight ...
    t.on_gone("b", 1, 5, 8)  # ... and no longer held by the sender
    t.on_end("b", 1, 10)
    t.on_data("c", 1, 0, 10)
    t.on_end("c", 1, 10)
    rows = {r["sender"]: r for r in t.per_sender()}
    assert (rows["a"]["status"], rows["a"]["missing"]) == ("incomplete", 1)
    assert rows["a"]["missing_by_reason"] == {"dropped": 1}
    assert rows["b"]["missing_by_reason"] == {"beyond_history": 3}
    assert (rows["c"]["status"], rows["c"]["missing"]) == ("complete", 0)


def test_duplicates_counted_and_delivered_unless_dropping():
    t = SequenceTracker()
    t.on_data("p", 1, 0, 10)
    assert t.on_data("p", 1, 5, 10) == [(0, 10)]
    assert t.totals()["duplicates"] == 5
    d = SequenceTracker(drop_duplicates=True)
    d.on_data("p", 1, 0, 10)
    assert d.on_data("p", 1, 5, 10) == [(5, 10)]


def test_resent_epoch_delivered_once_with_dedup_and_epochs_not_confused():
    d = SequenceTracker(drop_duplicates=True)
    d.on_data("part-3", 0, 0, 40)  # first attempt dies after 40
    assert d.on_data("part-3", 1, 0, 100) == [(40, 100)]  # retry: only the new 60
    d.on_end("part-3", 1, 100)
    rows = {r["epoch"]: r for r in d.per_sender()}
    assert rows[1]["status"] == "complete" and rows[1]["re_sent"]
    assert rows[1]["duplicates"] == 40 and rows[0]["status"] == "incomplete"
    plain = SequenceTracker()  # without dedup each epoch is its own sequence
    plain.on_data("s", 0, 0, 10)
    plain.on_data("s", 1, 0, 10)
    assert plain.totals()["duplicates"] == 0 and plain.totals()["lost"] == 0


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 20)), max_size=60))
def test_dedup_delivers_every_seq_exactly_once(frames):
    d = SequenceTracker(drop_duplicates=True)
    delivered = []
    for seq, n in frames:
        for lo, hi in d.on_data("s", 0, seq, n):
            delivered.extend(range(seq + lo, seq + hi))
    want = sorted({s for seq, n in frames for s in range(seq, seq + n)})
    assert sorted(delivered) == want and len(delivered) == len(set(delivered))


def test_memory_is_bounded_whatever_ids_and_seqs_arrive():
    """A flood of made-up sender ids with random seqs (drop_duplicates keeps a set of
    seen seqs per id) stays within max_streams and MAX_INTERVALS_TOTAL, forgets ended
    streams before live ones, and keeps accounting the real stream exactly."""
    import random

    from nakflow.core.seqtrack import MAX_INTERVALS_TOTAL

    rng = random.Random(3)
    t = SequenceTracker(drop_duplicates=True, max_streams=1_000)
    for i in range(200):  # streams that ended long ago
        t.on_data(f"old-{i}", 0, 0, 1)
        t.on_end(f"old-{i}", 0, 1)
    real_seq = 0
    for i in range(60_000):
        if i % 10 == 0:
            assert t.on_data("real", 1, real_seq, 2) == [(0, 2)]
            real_seq += 2
        t.on_data(f"fake-{rng.randrange(30_000)}", rng.randrange(3),
                  rng.randrange(1 << 40), rng.randrange(1, 5))
        if i == 1_100:  # 200 ended + ~1,100 others: the ended were forgotten
            assert not any(k[0].startswith("old-") for k in t.streams)  # ended go first
    assert len(t.streams) <= 1_000 and t.evicted >= 50_000
    assert sum(len(s.starts) for s in t._seen.values()) <= MAX_INTERVALS_TOTAL
    assert len(t._seen) <= 1_000
    real = t.streams[("real", 1)]  # heard every 10 frames: never the least recently heard
    assert (real.received, real.lost, real.missed_before_join, real.duplicates) == (12_000, 0,
                                                                                    0, 0)


def test_what_forgotten_streams_counted_stays_in_the_totals():
    """Totals of what happened only grow: they are counters (Prometheus'
    ``nakflow_messages_received_total``), and a counter that fell when a stream was
    forgotten reads as a restart to a scraper. What is missing now is of the streams
    kept (a forgotten stream's gaps are nobody's to repair)."""
    t = SequenceTracker(max_streams=2, repair=True)
    t.on_data("a", 0, 0, 10)
    t.on_data("a", 0, 0, 10)  # again: duplicates
    t.on_end("a", 0, 10)
    t.on_data("b", 0, 0, 5)
    t.on_data("b", 0, 7, 3)  # 5..6 lost in flight
    before = t.totals()
    assert (before["received"], before["duplicates"], before["lost"]) == (28, 10, 2)
    t.on_data("c", 0, 0, 4)  # a third stream: the ended one ("a") is forgotten
    assert t.evicted == 1 and ("a", 0) not in t.streams
    after = t.totals()
    assert (after["received"], after["duplicates"], after["lost"]) == (32, 10, 2)
    t.on_data("d", 0, 0, 1)  # and then "b", with its gap
    assert t.evicted == 2 and (t.totals()["received"], t.totals()["lost"]) == (33, 0)
