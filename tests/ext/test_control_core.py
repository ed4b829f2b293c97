"""The `control` extension's pure core: keys, the target's judgement beyond the vectors (limits,
hostile shapes, the memory of request ids), answers, journal records, and who trusts whom."""
import base64
import json
import pickle
import uuid

import pytest

from speed_runtime.core import control
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.errors import ConfigError, KeyFileError
from speed_runtime.core.receiving import Identity
from speed_runtime.core.records import ControlTrace, encode_line, parse_line

OPERATOR = control.OperatorKey(bytes(range(1, 33)))
ME = Identity("billing", uuid.UUID("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9").bytes)
INSTANCE = str(uuid.UUID(bytes=ME.id_bytes))
NOW = 1_700_000_000_000
TRUSTED = {OPERATOR.fingerprint: OPERATOR.public_key}


def request(command="allow", arguments=None, *, request_id="r1", issued=NOW, lifetime=60_000, key=OPERATOR,
            **overrides):
    text = control.request_text(target=overrides.pop("target", "billing"), instance=overrides.pop("instance", INSTANCE),
                                request_id=request_id, requester=overrides.pop("requester", "ops"), command=command,
                                arguments={"peer": "gateway"} if arguments is None else arguments,
                                issued_ms=issued, expires_ms=issued + lifetime)
    payload = json.loads(control.request_payload(key, "ops", "billing", request_id, text))
    payload.update(overrides)
    return payload


def judge(payload, guard=None, now=NOW):
    return control.judge_control(payload, ME, TRUSTED, control.RequestGuard() if guard is None else guard, now)


def test_operator_keys_never_show_or_pickle_the_secret():
    seed_texts = (bytes(range(1, 33)).hex(), base64.b64encode(bytes(range(1, 33))).decode())
    for text in (repr(OPERATOR), str(OPERATOR)):
        assert OPERATOR.fingerprint in text and not any(s in text for s in seed_texts)
    with pytest.raises(TypeError):
        pickle.dumps(OPERATOR)
    assert control.verify(OPERATOR.public_key, OPERATOR.sign(b"m"), b"m")
    assert not control.verify(OPERATOR.public_key, OPERATOR.sign(b"m"), b"n")


@pytest.mark.parametrize("text", ["", "not base64!", base64.b64encode(b"x" * 31).decode(),
                                  base64.b64encode(b"x" * 33).decode(), "A" * 10_000, None, 7])
def test_public_keys_that_are_not_keys_are_one_sentence(text):
    with pytest.raises(ConfigError, match="not an operator public key"):
        control.parse_public_key(text)


@pytest.mark.parametrize("data", [b"", b"SPEED-KEY-V1\nAAAA\n", b"SPEED-OPERATOR-KEY-V1\n",
                                  b"SPEED-OPERATOR-KEY-V1\nAAAA\n", b"\xff\xfe", b"SPEED-OPERATOR-KEY-V1\nA\nB\n"])
def test_operator_key_files_that_are_not_keys(data):
    with pytest.raises(KeyFileError):
        control.parse_operator_key_text(data)


def test_a_valid_request_is_applied_once():
    guard = control.RequestGuard()
    verdict = judge(request(), guard)
    assert verdict.reason is None and verdict.request.command == "allow" and verdict.request.arguments == {"peer": "gateway"}
    again = judge(request(), guard)
    assert again.reason == "control_replayed" and again.request_id == "r1"


def test_request_ids_are_forgotten_only_after_they_expire_and_memory_is_bounded():
    guard = control.RequestGuard(capacity=3)
    for i in range(3):
        assert judge(request(request_id=f"r{i}"), guard).reason is None
    refused = judge(request(request_id="r9"), guard)
    assert refused.reason == "control_refused" and "try again later" in refused.detail
    assert len(guard) == 3
    # after the last moment r0..r2 could pass the expiry check, they make room again
    late = NOW + 60_000 + control.CLOCK_SKEW_MS + 1
    assert judge(request(request_id="r9", issued=late), guard, now=late).reason is None
    assert len(guard) == 1


@pytest.mark.parametrize("overrides, reason", [
    ({"requestId": None}, "control_malformed"),
    ({"requestId": "x" * 65}, "control_malformed"),
    ({"requestId": "a/b"}, "control_malformed"),
    ({"request": 5}, "control_malformed"),
    ({"request": "x" * (control.MAX_REQUEST_TEXT + 1)}, "control_malformed"),
    ({"request": "é" * (control.MAX_REQUEST_TEXT // 2 + 1)}, "control_malformed"),
    ({"request": '{"a":1}\x00'}, "control_malformed"),
    ({"request": "\ud800"}, "control_malformed"),
    ({"signature": None}, "control_unsigned"),
    ({"operator": None}, "control_unsigned"),
    ({"signature": "AAAA"}, "control_unsigned"),
    ({"operator": base64.b64encode(b"\x00" * 32).decode()}, "control_untrusted"),
    ({"signature": base64.b64encode(b"\x00" * 64).decode()}, "control_bad_signature"),
])
def test_hostile_payload_shapes(overrides, reason):
    verdict = judge({**request(), **overrides})
    assert verdict.reason == reason and verdict.request is None
    # a requester is answered only when the payload names a request id it can match
    assert (verdict.request_id is None) == (overrides.get("requestId", "r1") != "r1")


@pytest.mark.parametrize("text, problem", [
    ("[1]", "not a JSON object"), ("{", "not UTF-8 JSON"), ('{"target":1}', "lacks a string"),
])
def test_signed_texts_that_are_not_requests_are_malformed(text, problem):
    signed = {**request(), "request": text,
              "signature": base64.b64encode(OPERATOR.sign(control.SIGNING_DOMAIN + text.encode())).decode()}
    verdict = judge(signed)
    assert verdict.reason == "control_malformed" and problem in verdict.detail


@pytest.mark.parametrize("command, arguments", [
    ("allow", {}), ("allow", {"peer": "speed_registry"}), ("allow", {"peer": "a", "x": 1}), ("revoke", []),
    ("stop", {"now": True}), ("status", {"x": 1}), ("reboot", {}),
])
def test_arguments_must_fit_the_command_exactly(command, arguments):
    assert judge(request(command, arguments)).reason == "control_malformed"
    assert control.arguments_problem(command, arguments)


@pytest.mark.parametrize("field, value, reason", [
    ("issuedAt", "1", "control_malformed"), ("issuedAt", True, "control_malformed"),
    ("issuedAt", 2 ** 53, "control_malformed"), ("issuedAt", -1, "control_malformed"),
    ("instance", "6f1e2d3c4b5a49788695a4b3c2d1e0f9", "control_malformed"),
    ("instance", "{6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9}", "control_malformed"),
])
def test_signed_fields_of_the_wrong_type(field, value, reason):
    text = json.loads(request()["request"])
    text[field] = value
    raw = json.dumps(text).encode()
    signed = {**request(), "request": raw.decode(),
              "signature": base64.b64encode(OPERATOR.sign(control.SIGNING_DOMAIN + raw)).decode()}
    assert judge(signed).reason == reason


def test_clock_skew_is_tolerated_up_to_its_bound():
    skew = control.CLOCK_SKEW_MS
    assert judge(request(issued=NOW + skew)).reason is None
    assert judge(request(issued=NOW + skew + 1)).reason == "control_expired"
    assert judge(request(issued=NOW - 60_000 - skew)).reason is None
    assert judge(request(issued=NOW - 60_000 - skew - 1)).reason == "control_expired"
    assert judge(request(lifetime=control.MAX_LIFETIME_MS + 1)).reason == "control_malformed"
    assert judge(request(lifetime=-1)).reason == "control_malformed"


def test_answers_name_their_reason():
    answer = control.answer_error("billing", "ops", "r1", "control_untrusted", "operator x is not trusted")
    assert answer["errorCode"] == "ACCESS_DENIED" and answer["status"] == "ERROR"
    assert control.refusal_of(answer["errorMessage"]) == ("control_untrusted", "operator x is not trusted")
    assert control.refusal_of("TIMEOUT: something") is None and control.refusal_of("no colon") is None


def test_control_records_round_trip_through_the_journal_line():
    applied = ControlTrace(1.5, "billing", "ops", "ab" * 8, "r1", "allow", {"peer": "gateway"}, "applied")
    rejected = ControlTrace(2.5, "billing", "?", None, None, None, None, "rejected", "control_malformed",
                            'quote " and \n newline')
    for event in (applied, rejected):
        line = encode_line(event)
        assert line.endswith("\n") and line.count("\n") == 1
        assert parse_line(line.encode()) == event
        assert json.loads(line)["kind"] == "control" and event.to_record()["outcome"] == event.outcome
    assert parse_line(b'{"kind":"control","ts":1,"node":"a"}') is None  # no peer/outcome: not a record


def test_who_trusts_whom_is_read_from_entries():
    def entry(name, features=(), **extra):
        return RegistryEntry(name=name, id=str(uuid.uuid4()), last_heartbeat=1.0, features=features, extra=extra)

    a = entry("a", ("control",), operators=["f1", "f2", 3])
    b = entry("b", (), operators=["f1"])            # advertises no `control`: trusts nobody
    c = entry("c", ("control",), operators="f1")    # garbage
    assert control.trusted_operators(a) == ("f1", "f2") and control.trusted_operators(b) == ()
    assert control.trust_map([a, b, c]) == {"a": ("f1", "f2")}
    assert control.administers(a, "f2") and not control.administers(b, "f1") and not control.administers(None, "f1")


def test_only_canonical_base64_names_a_key_as_libsodium_reads_it():
    text = OPERATOR.public_text
    assert text.endswith("=") and control.parse_public_key(text) == OPERATOR.public_key
    last = text[-2]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    sibling = alphabet[alphabet.index(last) ^ 1]  # differs only in an unused low bit
    with pytest.raises(ConfigError):
        control.parse_public_key(text[:-2] + sibling + "=")


def test_signed_texts_must_be_plain_json():
    for text in ('{"target":"billing","x":NaN}', '{"target":"bill\\u0000ing"}'):
        signed = {**request(), "request": text,
                  "signature": base64.b64encode(OPERATOR.sign(control.SIGNING_DOMAIN + text.encode())).decode()}
        assert judge(signed).reason == "control_malformed"
