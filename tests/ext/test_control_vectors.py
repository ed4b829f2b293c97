"""The `control` known-answer vectors (tests/vectors/control_vectors.json, written from
docs/PROTOCOL.md by an independent generator) against the runtime's core: keys, fingerprints,
request texts, signatures, sealing, and the target's verdict for every case, in order."""
import json
import os
import subprocess
import sys
import uuid

import pytest

from speed_runtime.core import control
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import Header, envelope_filename, seal
from speed_runtime.core.keys import Key
from speed_runtime.core.receiving import Identity

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(REPO, "tests", "vectors", "generate_control_vectors.py")
VECTORS = json.load(open(os.path.join(REPO, "tests", "vectors", "control_vectors.json"), encoding="utf-8"))
KEY = Key(bytes.fromhex(VECTORS["key_hex"]))
ME = Identity(VECTORS["target"]["name"], uuid.UUID(VECTORS["target"]["id"]).bytes)
REQUESTER = RegistryEntry(name=VECTORS["requester"]["name"], id=VECTORS["requester"]["id"], last_heartbeat=0.0)


def test_the_vector_file_is_what_its_generator_writes():
    assert subprocess.run([sys.executable, GENERATOR, "--check"], capture_output=True).returncode == 0


@pytest.mark.parametrize("who", ["operator", "stranger"])
def test_operator_keys_and_fingerprints(who):
    vector = VECTORS[who]
    key = control.parse_operator_key_text(vector["key_file"].encode())
    assert key.public_text == vector["public_key"] and key.fingerprint == vector["fingerprint"]
    assert control.fingerprint(control.parse_public_key(vector["public_key"])) == vector["fingerprint"]
    assert control.format_operator_key_text(key).decode() == vector["key_file"]
    assert vector["seed_hex"] not in repr(key) and vector["fingerprint"] in repr(key)


def test_the_cases_in_order_get_the_stated_verdicts():
    trusted = {VECTORS["operator"]["fingerprint"]: control.parse_public_key(VECTORS["operator"]["public_key"])}
    guard = control.RequestGuard()
    now = VECTORS["now_ms"]
    seen = []
    for case in VECTORS["cases"]:
        data = bytes.fromhex(case["envelope_hex"])
        sender = case["filename"].split(".")[0]
        opened = control.open_control(sender, data, KEY, ME, REQUESTER, now, VECTORS["window_ms"])
        if opened.accepted:
            verdict = control.judge_control(opened.payload, ME, trusted, guard, now)
            reason = verdict.reason
            if reason is None:
                assert verdict.request.request_id == case["request_id"]
                assert verdict.request.operator == VECTORS["operator"]["fingerprint"]
        else:
            reason = opened.reason
        seen.append((case["name"], reason))
    assert seen == [(case["name"], case["reason"]) for case in VECTORS["cases"]]


@pytest.mark.parametrize("case", [c for c in VECTORS["cases"] if c["name"] in
                                  ("allow_gateway", "status", "revoke_gateway", "stop")], ids=lambda c: c["name"])
def test_the_runtime_writes_the_valid_requests_byte_for_byte(case):
    key = control.parse_operator_key_text(VECTORS["operator"]["key_file"].encode())
    request = json.loads(case["request_utf8"])
    text = control.request_text(target=request["target"], instance=request["instance"],
                                request_id=request["requestId"], requester=request["requester"],
                                command=request["command"], arguments=request["arguments"],
                                issued_ms=request["issuedAt"], expires_ms=request["expiresAt"])
    assert text.decode() == case["request_utf8"]
    body = control.request_payload(key, VECTORS["requester"]["name"], VECTORS["target"]["name"], request["requestId"],
                                   text)
    assert body.decode() == case["payload_utf8"]
    nonce = bytes.fromhex(case["nonce_hex"])
    header = Header(case["type"], case["sequence"], case["timestamp_ms"], len(body), REQUESTER.id_bytes, ME.id_bytes,
                    case["flags"])
    assert seal(header, body, KEY, nonce).hex() == case["envelope_hex"]
    assert envelope_filename(REQUESTER.name, REQUESTER.id_bytes, case["sequence"], nonce) == case["filename"]


def test_the_answers_are_v1_responses_the_client_reads():
    from speed_runtime.core.envelope import EnvelopeType
    from speed_runtime.core.payloads import decode_payload

    applied, refused = (json.loads(a["payload_utf8"]) for a in VECTORS["answers"])
    decode_payload(VECTORS["answers"][0]["payload_utf8"].encode(), EnvelopeType.SPC_RESPONSE)
    decode_payload(VECTORS["answers"][1]["payload_utf8"].encode(), EnvelopeType.SPC_RESPONSE)
    assert applied == control.answer_result("billing", REQUESTER.name, "req-allow-1", applied["result"])
    assert control.refusal_of(refused["errorMessage"]) == ("control_expired", "the request expired by this node's clock")
    assert refused["errorCode"] == control.ERROR_CODES["control_expired"]
