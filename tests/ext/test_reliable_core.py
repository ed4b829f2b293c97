"""The pure part of the reliable extension (core/reliable.py): the retransmission schedule, the
acknowledgement payload, and the receiver's memory of delivered messages."""
from __future__ import annotations

import pytest

from speed_runtime.core import reliable
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.core.reliable import DONE, IN_PROGRESS, NEW, Deliveries


def test_the_schedule_starts_at_the_timeout_and_backs_off_to_a_cap():
    assert reliable.waits(5.0, 5) == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]  # the defaults: send-error after 125 s
    assert reliable.waits(0.2, 2, backoff=3.0, max_interval=1.0) == [0.2, pytest.approx(0.6), 1.0]
    assert reliable.waits(40.0, 1, max_interval=30.0) == [40.0, 40.0]  # never below the first wait
    assert reliable.waits(1.0, 0) == [1.0]


def test_acks_name_the_message_and_its_outcome():
    ack = reliable.ack("b", "a", 7, "m-1", "failed", "ValueError: x")
    assert ack == {"from": "b", "to": "a", "ackSeq": 7, "messageId": "m-1", "status": "failed", "error": "ValueError: x"}
    assert reliable.read_ack(ack) == ("m-1", "failed", "ValueError: x")
    assert reliable.read_ack(reliable.ack("b", "a", 7, "m", "handled")) == ("m", "handled", None)
    for bad in ({**ack, "status": "ok"}, {**ack, "messageId": ""}, {**ack, "messageId": "a.b"},
                {k: v for k, v in ack.items() if k != "messageId"}):
        with pytest.raises(EnvelopeError) as info:
            reliable.read_ack(bad)
        assert info.value.reason == "bad_payload"


def test_one_delivery_per_message_and_sender():
    d = Deliveries()
    assert d.begin("a", "m")[0] == NEW
    assert d.begin("a", "m")[0] == IN_PROGRESS and d.in_progress == 1
    assert d.begin("b", "m")[0] == NEW  # ids are per sender
    d.finish("a", "m", "failed", "boom")
    assert d.begin("a", "m") == (DONE, "failed", "boom") and d.in_progress == 1
    d.forget("b", "m")  # it never reached the handler: a retransmission must be delivered
    assert d.begin("b", "m")[0] == NEW


def test_memory_is_bounded_and_keeps_what_is_in_progress():
    d = Deliveries(capacity=3)
    d.begin("a", "busy")
    for i in range(10):
        d.begin("a", str(i))
        d.finish("a", str(i), "handled")
    assert len(d) == 3
    assert d.begin("a", "busy")[0] == IN_PROGRESS  # the oldest entry, but still in its handler: kept
    assert d.begin("a", "9")[0] == DONE and d.begin("a", "0")[0] == NEW  # the oldest finished one was forgotten


def test_a_flood_of_one_senders_ids_never_makes_anothers_copies_new_again():
    """Principle (a): what one sender does counts only against that sender. Before, the oldest ids
    of every sender went first: 10,000 ids of a flooder made an honest sender's copies NEW."""
    d = Deliveries(capacity=100)
    for i in range(10):
        d.begin("honest", f"h{i}")
        d.finish("honest", f"h{i}", "handled")
    for i in range(10_000):
        d.begin("flooder", f"f{i}")
        d.finish("flooder", f"f{i}", "handled")
    assert len(d) == 100
    assert all(d.begin("honest", f"h{i}")[0] == DONE for i in range(10))
    assert d.begin("flooder", "f9999")[0] == DONE and d.begin("flooder", "f0")[0] == NEW


def test_senders_share_the_memory_equally_when_all_are_busy():
    d = Deliveries(capacity=90)
    for i in range(300):
        for sender in ("a", "b", "c"):
            d.begin(sender, str(i))
            d.finish(sender, str(i), "handled")
    assert len(d) == 90 and [len(d._mine[s]) for s in "abc"] == [30, 30, 30]


def test_one_ack_can_acknowledge_several_messages():
    batch = reliable.ack_batch("b", "a", [(3, "m1", "handled", None), (4, "m2", "failed", "E: x"), (5, "m3", "handled",
                                                                                                      None)])
    assert batch == {"from": "b", "to": "a", "ackSeq": 3, "messageId": "m1", "status": "handled",
                     "acks": [{"ackSeq": 4, "messageId": "m2", "status": "failed", "error": "E: x"},
                              {"ackSeq": 5, "messageId": "m3", "status": "handled"}]}
    assert reliable.read_acks(batch) == [("m1", "handled", None, 3), ("m2", "failed", "E: x", 4),
                                         ("m3", "handled", None, 5)]
    assert reliable.read_acks(reliable.ack("b", "a", 9, "solo", "handled")) == [("solo", "handled", None, 9)]
    for bad in ({**batch, "acks": {"x": 1}}, {**batch, "acks": [1]}, {**batch, "acks": [{"messageId": "m", "status":
                "handled"}]}, {**batch, "acks": [{"ackSeq": True, "messageId": "m", "status": "handled"}]},
                {**batch, "acks": [{"ackSeq": 1, "messageId": "m", "status": "lost"}]},
                {**batch, "acks": [{"ackSeq": 1, "messageId": "m", "status": "handled"}] * (reliable.MAX_ACKS + 1)}):
        with pytest.raises(EnvelopeError):
            reliable.read_acks(bad)
