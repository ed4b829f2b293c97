"""Known-answer vectors: the shared vector file (written from the contract independently of this
runtime) matches the codec byte for byte (the vectors printed in docs/PROTOCOL.md: test_protocol_vectors.py)."""
import json
import os
import uuid

import pytest

from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.keyfile import Key, parse_key_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = json.load(open(os.path.join(REPO, "tests", "vectors", "envelope_vectors.json"), encoding="utf-8"))


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_seal_and_open_match_the_vector(vector):
    key = Key(bytes.fromhex(vector["key_hex"]))
    payload = vector["payload_utf8"].encode("utf-8")
    header = Header(vector["type"], vector["sequence"], vector["timestamp_ms"], len(payload),
                    uuid.UUID(vector["source_id"]).bytes, uuid.UUID(vector["target_id"]).bytes, vector["flags"])
    nonce = bytes.fromhex(vector["nonce_hex"])
    sealed = seal(header, payload, key, nonce)
    assert sealed[:64].hex() == vector["header_hex"]
    assert sealed.hex() == vector["envelope_hex"]
    assert open_envelope(bytes.fromhex(vector["envelope_hex"]), key).payload == payload
    sender = json.loads(payload)["from"]
    assert envelope_filename(sender, header.source_id, header.sequence, nonce) == vector["filename"]


@pytest.mark.parametrize("case", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vectors_are_rejected_for_the_stated_reason(case):
    key = Key(bytes.fromhex(VECTORS["vectors"][0]["key_hex"]))
    with pytest.raises(EnvelopeError) as info:
        open_envelope(bytes.fromhex(case["envelope_hex"]), key)
    assert info.value.reason == case["reason"]


def test_key_file_of_the_vectors_parses():
    assert parse_key_text(VECTORS["key_file"].encode()).raw.hex() == VECTORS["vectors"][0]["key_hex"]
