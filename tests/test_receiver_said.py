"""What a receiver's HELLO answer tells its sender (wire revision 8): the largest frame
it takes, and its incarnation. Real sockets; nothing here measures time, so these run
with the others (not ``quiet``)."""

from __future__ import annotations

import pytest

from nakflow.live.receiver import Receiver
from nakflow.live.sender import Sender

pytestmark = pytest.mark.slow


def test_two_receivers_started_with_one_id_are_named_not_counted_as_one():
    """Two receivers given one ``--id`` (a service's unit copied to a second host) each
    answered the sender's HELLO as that id: a wait for 2 said that the receivers were up
    but did not answer, and the close said ``to 1 receiver: 1 complete`` (in ack, one
    credit for both). Each answer now carries its receiver's incarnation: two for one
    HELLO under one id name the clash; one receiver listed twice (one incarnation) and
    one restarted under its id (later HELLOs) are no clash."""
    from nakflow.core.roster import ReceiverRoster
    from nakflow.errors import PeerMismatch
    from nakflow.report import sender_verdict

    roster = ReceiverRoster()
    assert not roster.on_answer("r", 1.0, 7) and not roster.on_answer("r", 1.0, 7)  # twice
    assert not roster.on_answer("r", 2.0, 8)  # restarted: a later HELLO, a new incarnation
    assert not roster.on_answer("q", 1.0, 0) and not roster.on_answer("q", 1.0, 0)  # older
    assert roster.on_answer("r", 2.0, 9) and list(roster.clashes) == ["r"]
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", receiver_id="same") as a, \
            Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", receiver_id="same") as b:
        with Sender(a.data_endpoints + b.data_endpoints,
                    a.feedback_endpoints + b.feedback_endpoints) as tx:
            with pytest.raises(PeerMismatch, match="two receivers answer as 'same': each "
                                                   "receiver needs an id of its own"):
                tx.wait_for_receivers(2, timeout=2)
            tx.send(b"x")
        for rx in (a, b):
            assert [m.payload for m in rx.messages(senders=1, timeout=10)] == [b"x"]
    verdict = sender_verdict(tx.snapshot())
    assert tx.snapshot()["receiver_id_clashes"] == ["same"]
    assert verdict.mismatches == [
        "more than one receiver answers as 'same': each needs an id of its own (check every "
        "receiver's --id); each id was counted as one receiver"]


def test_frames_stay_within_the_smallest_bound_a_receiver_said():
    """Each side had its own ``max_frame_bytes`` and no frame said the receiver's: one of
    32 KiB beside a default sender lost the 64 KiB frames the sender batched (its socket
    drops the connection at a bigger frame), 316 of 3,000 reported ``beyond_history``,
    and a message bigger than it takes went the same way. A sender whose own bound was
    64 KiB could not ``send_batch`` 1,000 messages of 1 KB (its 256 KiB frames: a
    ValueError). The receiver's HELLO answer now says its bound: no frame is built
    bigger, and a message no frame for it can hold is refused, naming it, before it is
    sent."""
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", max_frame_bytes=32 * 1024) as small, \
            Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as default:
        with Sender(small.data_endpoints + default.data_endpoints,
                    small.feedback_endpoints + default.feedback_endpoints) as tx:
            tx.wait_for_receivers(2, timeout=10)
            for _ in range(3_000):
                tx.send(b"y" * 500)  # frames of 64 KiB by default
            tx.send_batch([b"z" * 1_000] * 1_000)  # frames of 256 KiB by default
            with pytest.raises(ValueError, match=f"receiver {small.receiver_id} takes"):
                tx.send(b"x" * 40_000)
        for rx in (small, default):
            assert len(list(rx.messages(senders=1, timeout=30))) == 4_000
            (stream,) = rx.snapshot()["senders"]
            assert (stream["status"], stream["beyond_history"]) == ("complete", 0)
    assert [r["status"] for r in tx.snapshot()["at_close"]] == ["complete"] * 2
    with Receiver("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as rx:
        with Sender(rx.data_endpoints, rx.feedback_endpoints, max_frame_bytes=64 * 1024) as tx:
            tx.wait_for_receivers(timeout=10)
            tx.send_batch([b"z" * 1_000] * 1_000)
        assert len(list(rx.messages(senders=1, timeout=30))) == 1_000
