"""The reliable extension between nodes: acknowledgements after the handler ran, retransmission
with backoff, send-error, duplicate suppression within a receiver instance, a receiver killed
(kill -9) and restarted under a stream, a leaving target, the v1 fallback, forged ACKs."""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from speed_runtime import AccessDeniedError, DeliveryError, DeliveryTimeoutError, Node, NodeClosedError, \
    NodeUnavailableError
from speed_runtime.core import payloads, reliable
from speed_runtime.core.envelope import EnvelopeType
from speed_runtime.core.reliable import FLAG_RELIABLE

from ..helpers.wait import wait_until
from .conftest import FEATURES, MiB, Forger, inbox, journal, read_inbox, stopped, wait_record

FAST = dict(features=FEATURES, ack_timeout=0.2, max_retransmissions=3, retransmission_backoff=2.0)


def events(root: str, name: str, mid: str) -> list[str]:
    return [r["event"] for r in journal(root, name, "message") if r["messageId"] == mid]


def test_acknowledged_after_the_handler_ran(root, key):
    handled = []
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], trace=True, **FAST) as b:
        b.on_message(handled.append)
        handle = a.send("b", {"n": 1}, reliable=True)
        delivered = handle.result(10)
        assert delivered == reliable.Delivered(handle.message_id, 1, delivered.seq)
        assert [m.message_id for m in handled] == [handle.message_id], "acknowledged only after its handler"
        big = a.send("b", os.urandom(3 * MiB), reliable=True).result(20)
        assert big.transmissions == 1 and handled[-1].message_id == big.message_id
        a.journal.flush()
        b.journal.flush()
    assert events(root, "a", handle.message_id) == ["sent", "received"]
    assert events(root, "b", handle.message_id) == ["delivered"]
    sent = [r for r in journal(root, "a", "message") if r["messageId"] == big.message_id]
    assert sent[0]["chunks"] == 4 and sent[0]["reliable"] is True
    acks = [r for r in journal(root, "b", "envelope") if r["type"] == "ACK"]
    assert {r.get("messageId") for r in acks} == {handle.message_id, big.message_id}


def test_message_records_say_the_bytes_of_the_value_on_both_sides(root, key):
    """`size` in a message record is the bytes of the value (its compact JSON text, or the raw
    bytes), whatever layout carried it: v1 layout, one binary envelope, or chunks."""
    small, large, raw = {"n": 1, "text": "Grüße"}, {"blob": "x" * (2 * MiB)}, os.urandom(MiB // 2)
    expected = {}
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], trace=True, **FAST) as b:
        b.on_message(lambda m: None)
        for value in (small, large, raw):
            handle = a.send("b", value, reliable=True)
            handle.result(20)
            expected[handle.message_id] = len(value if isinstance(value, bytes) else payloads.encode_payload(value))
        a.journal.flush()
        b.journal.flush()
    for name, event in (("a", "sent"), ("b", "delivered")):
        sizes = {r["messageId"]: r["size"] for r in journal(root, name, "message") if r["event"] == event}
        assert sizes == expected, name


def test_a_handler_slower_than_the_timeout_gets_a_retransmission_but_runs_once(root, key):
    release, handled = threading.Event(), []
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], trace=True, **FAST) as b:
        b.on_message(lambda m: (release.wait(30), handled.append(m)))
        handle = a.send("b", b"slow", reliable=True)
        wait_record(a, "message", event="retransmitted", messageId=handle.message_id)
        wait_record(b, "message", event="duplicate", messageId=handle.message_id)  # in its handler: not again
        release.set()
        delivered = handle.result(10)
    assert delivered.transmissions >= 2 and [m.data for m in handled] == [b"slow"]
    assert b.counters()["duplicates"] >= 1 and a.counters()["retransmissions"] >= 1


def test_a_copy_after_delivery_is_acknowledged_again_not_delivered_again(root, key):
    handled = []
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], trace=True, **FAST) as b:
        b.on_message(handled.append)
        forger = Forger(a, b)
        body = payloads.encode_payload({"from": "a", "to": "b", "data": "once", "messageId": "dup-1"})
        forger.deliver(EnvelopeType.MESSAGE, body, FLAG_RELIABLE)
        wait_record(b, "message", event="delivered", messageId="dup-1")

        def acks_sent() -> int:
            b.journal.flush()
            return len([r for r in journal(root, "b", "envelope") if r["type"] == "ACK" and r["outcome"] == "sent"])
        for copies in (1, 2):  # the same message again, each copy sealed anew (as retransmissions are)
            wait_until(lambda: acks_sent() == copies, 10, f"ACK {copies}")
            forger.deliver(EnvelopeType.MESSAGE, body, FLAG_RELIABLE)
        wait_until(lambda: b.counters()["duplicates"] == 2 and acks_sent() == 3, 10, "two duplicates")
        b.journal.flush()
    assert [m.data for m in handled] == ["once"]
    acks = [r for r in journal(root, "b", "envelope") if r["type"] == "ACK" and r["outcome"] == "sent"]
    assert len(acks) == 3 and {r["messageId"] for r in acks} == {"dup-1"}  # its ACK may have been lost: said again
    assert events(root, "b", "dup-1") == ["delivered", "duplicate", "duplicate"]


def test_a_message_still_queued_is_not_copied_and_is_withdrawn_when_the_sender_gives_up(procs, root, key):
    deaf = procs.start("deaf", allow=["a"], extra=["--feature", "reliable"])
    with Node(root, key, "a", allow=["deaf"], trace=True, **FAST) as a:
        with stopped(deaf):  # alive (its lease runs), but it takes nothing from its inbox
            handle = a.send("deaf", {"hello": 1}, reliable=True)
            [(header, plaintext)] = read_inbox(root, "deaf", key)
            with pytest.raises(DeliveryTimeoutError) as info:
                handle.result(30)
            assert "withdrawn and was not delivered" in str(info.value)
            assert inbox(root, "deaf") == [], "withdrawn: the receiver will never handle it"
        a.journal.flush()
    assert header.flags == FLAG_RELIABLE and json.loads(plaintext)["messageId"] == handle.message_id
    assert events(root, "a", handle.message_id) == ["sent", "send-error"]  # no copy while it was queued
    error = [r for r in journal(root, "a", "message") if r["event"] == "send-error"][0]
    assert error["reason"] == "withdrawn" and a.counters()["sendErrors"] == 1
    assert a.extensions["reliable"].pending() == []


def test_a_message_taken_but_never_acknowledged_is_retransmitted_then_fails(root, key):
    release = threading.Event()
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], trace=True, **FAST) as b:
        b.on_message(lambda m: release.wait(60))  # takes it, never returns in time
        handle = a.send("b", {"hello": 1}, reliable=True)
        with pytest.raises(DeliveryTimeoutError) as info:
            handle.result(30)
        assert "after 4 transmissions" in str(info.value) and "may or may not have been handled" in str(info.value)
        assert b.counters()["duplicates"] == 3  # each copy dropped: the first is in its handler
        release.set()
        wait_until(lambda: a.counters()["rejected"].get("unexpected_response"), 10, "the late ACK refused")
        a.journal.flush()
    assert events(root, "a", handle.message_id) == ["sent", "retransmitted", "retransmitted", "retransmitted",
                                                     "send-error"]
    assert [r for r in journal(root, "a", "message") if r["event"] == "send-error"][0]["reason"] == "unacknowledged"


def test_refusals_that_need_no_retransmission_raise_at_once(root, key):
    with Node(root, key, "a", allow=[], **FAST) as a, Node(root, key, "b", allow=["a"], **FAST):
        with pytest.raises(AccessDeniedError) as info:
            a.send("b", 1, reliable=True)
        assert "allow b" in str(info.value)
        with pytest.raises(NodeUnavailableError):
            a.send("nobody", 1, reliable=True)
        assert inbox(root, "b") == [] and a.extensions["reliable"].pending() == []
    with Node(root, key, "c", allow=["b"]) as plain:
        with pytest.raises(Exception) as info:
            plain.send("b", 1, reliable=True)
        assert "features=['reliable']" in str(info.value)


def test_an_ack_from_an_instance_it_never_went_to_is_unexpected(root, key):
    release = threading.Event()
    with Node(root, key, "a", allow=["b", "m"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], **FAST) as b, Node(root, key, "m", allow=["a"], **FAST) as m:
        b.on_message(lambda msg: release.wait(30))  # the genuine ACK waits for the test
        handle = a.send("b", 1, reliable=True)
        forged = reliable.ack("m", "a", 1, handle.message_id, "handled")  # the right id, from a node it never went to
        Forger(m, a).deliver(EnvelopeType.ACK, payloads.encode_payload(forged), FLAG_RELIABLE)
        wait_until(lambda: a.counters()["rejected"].get("unexpected_response") == 1, 10, "the refusal")
        assert not handle.done()
        release.set()
        assert handle.result(20).transmissions >= 1
        other = reliable.ack("b", "a", 1, "other", "handled")  # from the right node, naming no pending message
        Forger(b, a).deliver(EnvelopeType.ACK, payloads.encode_payload(other), FLAG_RELIABLE)
        wait_until(lambda: a.counters()["rejected"].get("unexpected_response") == 2, 10, "the second refusal")


def test_closing_the_sender_fails_and_withdraws_what_is_pending(procs, root, key):
    deaf = procs.start("deaf", allow=["a"], extra=["--feature", "reliable"])
    with stopped(deaf):
        with Node(root, key, "a", allow=["deaf"], trace=True, features=FEATURES) as a:
            handle = a.send("deaf", 1, reliable=True)
            [queued] = inbox(root, "deaf")
        with pytest.raises(NodeClosedError) as info:
            handle.result(10)
        assert "it was withdrawn" in str(info.value) and queued not in inbox(root, "deaf")  # (its leave EVENT stays)
    assert events(root, "a", handle.message_id) == ["sent", "send-error"]


def test_a_leaving_target_gets_nothing_new_and_its_successor_gets_the_retransmission(procs, root, key):
    options = {"features": FEATURES, "trace": True}
    first = procs.start_scripted("r", allow=["s"], options=options)
    with Node(root, key, "s", allow=["r"], trace=True, features=FEATURES, ack_timeout=0.3, max_retransmissions=8,
              max_retransmission_interval=2.0) as s:
        with stopped(first):
            handle = s.send("r", {"n": "once"}, reliable=True)
            entry = json.loads(open(os.path.join(root, "speed_registry", "r.node")).read())
            entry["status"] = "leaving"  # what `r` publishes when it begins a graceful stop
            tmp = os.path.join(root, "speed_registry", ".r.test.tmp")
            with open(tmp, "w") as f:
                json.dump(entry, f)
            os.rename(tmp, os.path.join(root, "speed_registry", "r.node"))
            wait_until(lambda: "leaving" in (s.extensions["reliable"].pending() or [{}])[0].get("lastError", ""), 20,
                       "a retransmission refused by the leaving target")
            assert len(inbox(root, "r")) == 1, "nothing new was written to a leaving target"
            first.proc.kill()  # it never handled the message
            first.proc.wait()
        second = procs.start_scripted("r", allow=["s"], options=options)
        delivered = handle.result(30)
    assert delivered.transmissions >= 2
    got = json.loads(second.read_line(10))
    assert got["data"] == {"n": "once"} and got["messageId"] == handle.message_id


def test_a_receiver_killed_and_restarted_mid_stream_handles_everything_at_least_once(procs, root, key):
    options = {"features": FEATURES}

    def handled_by(proc) -> list[dict]:
        out = []
        while not proc.lines.empty():
            line = proc.lines.get_nowait()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    receiver = procs.start_scripted("r", allow=["s"], delay_ms=2, options=options)
    instances, handles = [receiver], []
    with Node(root, key, "s", allow=["r"], trace=True, features=FEATURES, ack_timeout=0.5, max_retransmissions=8,
              max_retransmission_interval=2.0) as s:
        for n in range(200):
            if n == 100:
                wait_until(lambda: receiver.lines.qsize() >= 50, 30, "half the stream handled")
                receiver.proc.send_signal(signal.SIGKILL)
                receiver.proc.wait()
                receiver = procs.start_scripted("r", allow=["s"], delay_ms=2, options=options)
                instances.append(receiver)
            while True:
                try:
                    handles.append(s.send("r", {"n": n}, reliable=True))
                    break
                except NodeUnavailableError:  # between the kill and the restart: the application retries
                    threading.Event().wait(0.05)
        for handle in handles:
            handle.result(60)
    first, second = handled_by(instances[0]), []

    def all_handled() -> bool:
        second.extend(handled_by(instances[1]))
        return {m["data"]["n"] for m in first + second} == set(range(200))
    wait_until(all_handled, 20, "every message handled at least once")  # each was acknowledged: its line was printed
    for mine in (first, second):
        numbers = [m["data"]["n"] for m in mine]
        assert len(numbers) == len(set(numbers)), "an instance handled a message twice"
    assert {m["messageId"] for m in first + second} == {h.message_id for h in handles}
    # (whether a retransmission was needed depends on how far the first instance got before the
    # kill, which the machine's load decides: under load it had handled and acknowledged the first
    # hundred, and a count asserted here failed CI; retransmission itself is tested
    # deterministically by test_a_handler_slower_than_the_timeout_gets_a_retransmission_but_runs_once)


def test_a_sender_waits_for_room_in_its_window(root, key):
    release = threading.Event()
    with Node(root, key, "a", allow=["b"], reliable_window=2, **FAST) as a, \
            Node(root, key, "b", allow=["a"], **FAST) as b:
        b.on_message(lambda m: release.wait(30))
        first, second = a.send("b", 1, reliable=True), a.send("b", 2, reliable=True)
        with pytest.raises(DeliveryTimeoutError) as info:
            a.send("b", 3, reliable=True, timeout=0.3)
        assert "reliable_window 2" in str(info.value) and "nothing was sent" in str(info.value)
        waiting = threading.Thread(target=lambda: a.send("b", 4, reliable=True, timeout=30))
        waiting.start()
        release.set()
        first.result(20), second.result(20)
        waiting.join(30)
        wait_until(lambda: a.extensions["reliable"].pending() == [], 20, "the fourth acknowledged")
    assert a.counters()["reliableSent"] == 3


def test_one_ack_envelope_settles_every_message_it_names(root, key):
    release = threading.Event()
    with Node(root, key, "a", allow=["b"], trace=True, **FAST) as a, \
            Node(root, key, "b", allow=["a"], **FAST) as b:
        b.on_message(lambda m: release.wait(30))  # b acknowledges nothing by itself during the test
        first, second = a.send("b", 1, reliable=True), a.send("b", 2, reliable=True)
        batch = reliable.ack_batch("b", "a", [(1, first.message_id, "handled", None), (2, "unknown", "handled", None),
                                              (2, second.message_id, "failed", "ValueError: no")])
        Forger(b, a).deliver(EnvelopeType.ACK, payloads.encode_payload(batch), FLAG_RELIABLE)
        assert first.result(10).transmissions >= 1
        with pytest.raises(DeliveryError) as info:
            second.result(10)
        assert "handler failed: ValueError: no" in str(info.value)
        release.set()
    assert a.counters()["acknowledged"] == 2


def test_a_stream_is_acknowledged_with_fewer_envelopes_than_messages_when_acks_pile_up(root, key):
    with Node(root, key, "a", allow=["b"], features=FEATURES) as a, \
            Node(root, key, "b", allow=["a"], trace=True, features=FEATURES) as b:
        b.on_message(lambda m: None)
        handles = [a.send("b", {"n": i}, reliable=True) for i in range(300)]
        assert all(h.result(60).transmissions == 1 for h in handles)
        b.journal.flush()
    acks = [r for r in journal(root, "b", "envelope") if r["type"] == "ACK" and r["outcome"] == "sent"]
    assert 1 <= len(acks) <= 300 and a.counters()["acknowledged"] == 300

