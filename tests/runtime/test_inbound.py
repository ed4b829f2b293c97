"""The inbound state machine (core/inbound.py) without a file system, a thread or a clock: the
order of checks, which rejections count against a sender (issue 26, principle a), the route of an
accepted envelope by type, and the read-ahead's bounds (principle b)."""
from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from speed_runtime.core import payloads
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import EnvelopeType, Header, seal
from speed_runtime.core.inbound import (AnswerProbe, Holding, Inbound, Reject, RegistryHint, ResolveCall, RunHandler,
                                        SettleAck, Settled, SubmitRequest)
from speed_runtime.core.keys import Key
from speed_runtime.core.message import message_of
from speed_runtime.core.receiving import Identity, Verdict
from speed_runtime.core.replay import ReplayGuard

KEY = Key(bytes(range(32)))
OTHER_KEY = Key(bytes(range(1, 33)))
ME = Identity("b", uuid.UUID(int=2, version=4).bytes)
A = RegistryEntry(name="a", id=str(uuid.UUID(int=1, version=4)), last_heartbeat=0.0)
A_BEFORE = RegistryEntry(name="a", id=str(uuid.UUID(int=3, version=4)), last_heartbeat=0.0)
NOW = 1_700_000_000_000
NAME = "a.00000000.00000000000000000001.05050505.env"


def envelope(body=None, *, etype=EnvelopeType.MESSAGE, seq=1, ts=NOW, src=None, key=KEY, nonce=b"\x05" * 12):
    body = payloads.encode_payload(payloads.message("a", "b", 1) if body is None else body)
    return seal(Header(etype, seq, ts, len(body), src or A.id_bytes, ME.id_bytes), body, key, nonce)


def machine(**hooks) -> Inbound:
    return Inbound(ME, KEY, ReplayGuard(), 4096, **hooks)


def never_departed() -> None:
    raise AssertionError("a departed instance is asked for only when the source is not the registered one")


# ------------------------------------------------------------------------------ step 1
def test_a_name_is_admitted_only_while_its_sender_is_allowed_and_never_counts():
    inbound = machine()
    assert inbound.admit(NAME, "a", 1, frozenset({"a"})) is None
    refused = inbound.admit(NAME, "a", 1, frozenset({"c"}))
    assert refused == Reject(NAME, "a", 1, "unauthorized") and not refused.counts_against_sender
    assert not inbound.junk("x", "?", 0).counts_against_sender


def test_the_extensions_admit_after_the_grant_in_order_and_the_first_refusal_wins():
    asked = []

    def quarantine(sender, name):
        asked.append(("quarantine", sender))
        return "quarantined"

    def later(sender, name):
        asked.append(("later", sender))
        return None
    inbound = machine(admit=[quarantine, later])
    assert inbound.admit(NAME, "a", 1, frozenset()).reason == "unauthorized" and asked == []  # the grant first
    refused = inbound.admit(NAME, "a", 1, frozenset({"a"}))
    assert refused.reason == "quarantined" and not refused.counts_against_sender
    assert asked == [("quarantine", "a")]


def test_a_file_refused_on_its_facts_never_counts():
    for reason in ("bad_file", "too_large", "bad_size"):
        assert not Inbound.refused_file(NAME, "a", 1, reason, 10, "UNKNOWN").counts_against_sender


# ------------------------------------------------------------------------------ steps 3–5
def test_an_authentic_envelope_is_accepted_and_recorded_in_the_replay_state_once():
    inbound = machine()
    data = envelope()
    verdict = inbound.judge("a", data, NOW, A, never_departed)
    assert verdict.accepted and verdict.payload["data"] == 1 and verdict.cost > 0
    again = inbound.judge("a", data, NOW, A, never_departed)
    assert again.reason == "replayed_nonce" and Inbound.rejected(NAME, "a", 1, again, data).counts_against_sender


def test_a_sender_departed_since_the_file_arrived_is_judged_as_the_instance_it_was():
    inbound, asked = machine(), []
    data = envelope(src=A_BEFORE.id_bytes)

    def departed():
        asked.append(1)
        return A_BEFORE
    assert inbound.judge("a", data, NOW, A, departed).accepted and asked == [1]
    # with no departed instance it stays unknown_sender, which is exactly the failure to authenticate as a
    unknown = machine().judge("a", envelope(src=A_BEFORE.id_bytes), NOW, A, lambda: None)
    assert unknown.reason == "unknown_sender" and not Inbound.rejected(NAME, "a", 1, unknown, data).counts_against_sender


def test_an_extension_rejudges_only_what_was_rejected():
    seen = []

    def rejudge(verdict, sender, data, arrived_ms):
        seen.append(verdict.reason)
        return verdict._replace(reason=None) if verdict.reason == "wrong_target" else verdict
    inbound = machine(rejudge=[rejudge])
    assert inbound.judge("a", envelope(), NOW, A, never_departed).accepted and seen == []
    wrong = envelope(payloads.message("a", "someone", 1), nonce=b"\x06" * 12)
    assert inbound.judge("a", wrong, NOW, A, never_departed).accepted and seen == ["wrong_target"]


def test_a_judgement_of_its_own_replaces_steps_3_to_5():
    calls = []

    def judge(entry, arrived_ms, sender, data):
        calls.append((entry, arrived_ms, sender))
        return Verdict(None, "SPC_REQUEST")
    assert machine().judge("a", b"anything", NOW, A, never_departed, judge).accepted
    assert calls == [(A, NOW, "a")]


ATTRIBUTABLE = {  # a rejection of an envelope sealed under the key by a's registered instance
    "replayed_nonce", "replayed_sequence", "bad_sequence", "stale_timestamp", "wrong_target", "bad_payload",
    "unknown_sender"}


def test_which_rejections_count_against_the_sender():
    """Principle a: only an envelope whose tag passed and whose header names the sender's registered
    instance can count against it."""
    cases = {
        "bad_tag (another key)": (envelope(key=OTHER_KEY), A, False),
        "bad_size (truncated)": (envelope()[:-1], A, False),
        "too_large": (envelope({"from": "a", "to": "b", "data": "x" * 5000}), A, False),
        "unknown_sender (another instance)": (envelope(src=A_BEFORE.id_bytes), A, False),
        "unknown_sender (no entry)": (envelope(), None, False),
        "wrong_target": (envelope(payloads.message("a", "c", 1)), A, True),
        "unknown_sender (from)": (envelope(payloads.message("c", "b", 1)), A, True),
        "stale_timestamp": (envelope(ts=NOW - 120_000), A, True),
        "bad_payload": (envelope({"from": "a", "to": "b"}), A, True),
    }
    for what, (data, entry, counts) in cases.items():
        verdict = machine().judge("a", data, NOW, entry, lambda: None)
        assert verdict.reason is not None, what
        assert (verdict.reason in ATTRIBUTABLE) or not counts, what
        assert Inbound.rejected(NAME, "a", 1, verdict, data).counts_against_sender is counts, what


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=300))
def test_bytes_not_sealed_under_the_key_never_count_against_the_sender_they_name(data):
    verdict = machine().judge("a", data, NOW, A, lambda: A)
    assert not verdict.accepted
    assert not Inbound.rejected(NAME, "a", 1, verdict, data).counts_against_sender


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(envelope()) - 1), st.integers(min_value=1, max_value=255))
def test_a_tampered_byte_never_counts_against_the_sender(position, flip):
    data = bytearray(envelope())
    data[position] ^= flip
    verdict = machine().judge("a", bytes(data), NOW, A, lambda: A)
    assert not verdict.accepted and not Inbound.rejected(NAME, "a", 1, verdict, bytes(data)).counts_against_sender


# ------------------------------------------------------------------------------ step 6
def accepted(body, etype):
    verdict = machine().judge("a", envelope(body, etype=etype), NOW, A, never_departed)
    assert verdict.accepted, verdict
    return verdict


def test_the_route_of_each_type():
    msg = accepted(payloads.message("a", "b", {"x": 1}), EnvelopeType.MESSAGE)
    assert Inbound.route(msg, 123, False) == RunHandler(123, msg.cost)
    assert Inbound.route(msg, 123, True) == RunHandler(123, 0)  # an assembled value's memory is the reassembly's
    req = accepted(payloads.spc_request("a", "b", "r1", "echo", {}, 5000), EnvelopeType.SPC_REQUEST)
    assert Inbound.route(req, 1, False) == SubmitRequest(NOW + 5000, req.cost)
    resp = accepted(payloads.spc_success("a", "b", "r1", 7), EnvelopeType.SPC_RESPONSE)
    assert Inbound.route(resp, 1, False) == ResolveCall("r1")
    assert Inbound.route(accepted(payloads.ack("a", "b", 9), EnvelopeType.ACK), 1, False) == SettleAck(9, None)
    error = accepted({"from": "a", "to": "b", "errorCode": "EXECUTION_FAILED", "errorMessage": "boom", "refSeq": 4},
                     EnvelopeType.ERROR)
    assert Inbound.route(error, 1, False) == SettleAck(4, "EXECUTION_FAILED: boom")
    probe = accepted(payloads.heartbeat("a", "b", False), EnvelopeType.HEARTBEAT)
    assert Inbound.route(probe, 1, False) == AnswerProbe()
    assert Inbound.route(accepted(payloads.heartbeat("a", "b", True), EnvelopeType.HEARTBEAT), 1, False) == Settled()
    leave = accepted(payloads.event("a", "b", "leave"), EnvelopeType.EVENT)
    assert Inbound.route(leave, 1, False) == RegistryHint("a.node")


def test_an_answer_nothing_awaits_counts_and_says_whether_it_is_late():
    resp = accepted(payloads.spc_success("a", "b", "r1", 7), EnvelopeType.SPC_RESPONSE)
    data = envelope(payloads.spc_success("a", "b", "r1", 7), etype=EnvelopeType.SPC_RESPONSE)
    late = Inbound.unexpected(NAME, "a", resp, data, late=True)
    assert late.reason == "unexpected_response" and late.counts_against_sender and late.detail == "late"
    assert Inbound.unexpected(NAME, "a", resp, data, late=False).detail == ""


def test_a_message_is_what_the_application_receives():
    msg = accepted({"from": "a", "to": "b", "data": "aGk=", "encoding": "base64", "messageId": "m1"},
                   EnvelopeType.MESSAGE)
    got = message_of(msg, "a", 99)
    assert (got.sender, got.data, got.seq, got.timestamp_ms, got.size, got.message_id) == ("a", b"hi", 1, NOW, 99, "m1")
    bad = msg._replace(payload={**msg.payload, "data": "not base64!"})
    assert message_of(bad, "a", 1).data == "not base64!"


# ------------------------------------------------------------------------------ step 0: room
def test_the_read_ahead_holds_no_file_while_a_bound_is_reached_and_wakes_at_half():
    held = Holding(per_sender=4, total=6, bytes_per_sender=100, bytes_total=150)
    for _ in range(4):
        assert held.has_room("a")
        held.add("a", 10)
    assert not held.has_room("a") and held.has_room("b")  # a's count, not b's
    assert [held.remove("a", 10) for _ in range(2)] == [False, True]  # woken at half of a's bound
    held.add("b", 100)
    assert not held.has_room("b") and held.has_room("a")  # b's bytes
    held.add("a", 60)
    assert held.full() and not held.room_for_any(["a", "b", "c"])  # all senders' bytes: 170 >= 150


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(min_value=0, max_value=80), st.booleans()),
                max_size=200))
def test_what_is_held_never_exceeds_the_byte_bound_plus_one_envelope(steps):
    """Principle b: taking only while there is room, what is held stays within bytes_total plus the
    cost of one envelope (and per sender within bytes_per_sender plus one)."""
    held, costs = Holding(per_sender=8, total=12, bytes_per_sender=100, bytes_total=200), {"a": [], "b": [], "c": []}
    for sender, cost, take in steps:
        if take and held.has_room(sender):
            held.add(sender, cost)
            costs[sender].append(cost)
        elif not take and costs[sender]:
            held.remove(sender, costs[sender].pop())
        assert sum(map(sum, costs.values())) <= 200 + 80
        assert all(sum(c) <= 100 + 80 and len(c) <= 8 for c in costs.values())
        assert sum(map(len, costs.values())) <= 12
        assert held.cost_total == sum(map(sum, costs.values()))
