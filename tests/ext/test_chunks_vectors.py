"""Known answers of the chunks and reliable extensions: tests/vectors/chunks_vectors.json (written
from docs/PROTOCOL.md by an independent generator) matches what the runtime seals, decodes, chains,
reassembles and reads from an advertisement (the vectors printed in docs/PROTOCOL.md:
tests/runtime/test_protocol_vectors.py)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid

import pytest

from speed_runtime.core import chunks, reliable
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.core.keys import parse_key_text
from speed_runtime.core.reassembly import COMPLETE, REFUSED, Reassembly
from speed_runtime.ext import speaks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(REPO, "tests", "vectors", "generate_chunks_vectors.py")
VECTORS = json.load(open(os.path.join(REPO, "tests", "vectors", "chunks_vectors.json"), encoding="utf-8"))
KEY = parse_key_text(VECTORS["key_file"].encode())
BY_NAME = {v["name"]: v for v in VECTORS["envelopes"]}


def test_the_vector_file_is_what_the_generator_writes():
    done = subprocess.run([sys.executable, GENERATOR, "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("v", VECTORS["envelopes"], ids=lambda v: v["name"])
def test_each_envelope_seals_opens_and_decodes_as_stated(v):
    plaintext = bytes.fromhex(v["plaintext_hex"])
    header = Header(v["type"], v["sequence"], v["timestamp_ms"], len(plaintext), uuid.UUID(v["source_id"]).bytes,
                    uuid.UUID(v["target_id"]).bytes, v["flags"])
    nonce = bytes.fromhex(v["nonce_hex"])
    assert seal(header, plaintext, KEY, nonce).hex() == v["envelope_hex"]
    opened = open_envelope(bytes.fromhex(v["envelope_hex"]), KEY)
    assert opened.payload == plaintext and opened.header.flags == v["flags"]
    payload, piece = chunks.decode(plaintext, v["type"], v["flags"])
    assert envelope_filename(payload["from"], header.source_id, header.sequence, nonce) == v["filename"]
    if v["layout"] == "binary":
        assert payload["data"] == (bytes.fromhex(v["value_hex"]) if v["value_kind"] == "bytes" else v["value"])
    elif v["layout"] == "chunk":
        assert piece.data.tobytes() == plaintext[plaintext.index(b"\x00") + 1:]
        assert chunks.chain_value(bytes.fromhex(v["envelope_hex"])) == v["chain"] == v["envelope_hex"][-32:]
    elif v["type"] == 8:
        assert [a[0] for a in reliable.read_acks(payload)] == v["acknowledges"]
    else:
        assert reliable.message_id(payload) == v["messageId"]


@pytest.mark.parametrize("m", VECTORS["messages"], ids=lambda m: m["name"])
def test_each_message_reassembles_or_is_voided_as_stated(m):
    r = Reassembly(64 << 20, 256 << 20, 128 << 20, 30_000)
    steps = []
    for name in m["envelopes"]:
        v = BY_NAME[name]
        plaintext = bytes.fromhex(v["plaintext_hex"])
        header, piece = chunks.decode(plaintext, v["type"], v["flags"])
        steps.append(r.feed(uuid.UUID(v["source_id"]).bytes, "billing", v["type"], v["flags"], header, piece,
                            v["chain"], len(plaintext) + 92, 0))
    if m["outcome"] == "delivered":
        assert [s.kind for s in steps].count(COMPLETE) == 1 and steps[-1].kind == COMPLETE
        done = steps[-1]
        value = done.payload[chunks.VALUE_FIELD[v["type"]]]
        if m["value_kind"] == "bytes":
            assert hashlib.sha256(value).hexdigest() == m["value_sha256"]
        else:
            assert value == m["value"]
        assert (done.message.size, done.message.count, done.payload["messageId"]) == (m["size"], m["chunks"],
                                                                                      m["messageId"])
    else:
        refused = [s for s in steps if s.kind == REFUSED]
        assert refused and refused[0].reason == m["reason"] and not any(s.kind == COMPLETE for s in steps)


@pytest.mark.parametrize("m", [m for m in VECTORS["messages"] if m["outcome"] == "delivered" and not m.get("handwritten")],
                         ids=lambda m: m["name"])
def test_the_runtime_cuts_and_chains_a_body_into_the_same_chunks(m):
    vectors = [BY_NAME[n] for n in m["envelopes"]]
    plaintexts = [bytes.fromhex(v["plaintext_hex"]) for v in vectors]
    first, _ = chunks.decode(plaintexts[0], vectors[0]["type"], chunks.FLAG_BINARY | chunks.FLAG_CHUNK)
    body = b"".join(p[p.index(b"\x00") + 1:] for p in plaintexts)
    first = {k: v for k, v in first.items() if k not in ("messageId", "chunkIndex", "chunkCount", "messageSize")}
    cutter = chunks.Chunker(first, m["messageId"], body, 1 << 20, VECTORS["piece"])
    made = [cutter.plaintext(i, vectors[i - 1]["chain"] if i else None) for i in range(cutter.count)]
    assert made == plaintexts


def check_advertisement(case: dict) -> None:
    """A target's entry -> whether the runtime sends it chunks, and the limits it keeps to."""
    entry = RegistryEntry.from_json(case["entry"].encode())
    limit, most = chunks.target_limits(entry.extra.get("chunks"), case["own_max_payload"], case["own_max_message"])
    assert {"speaks": speaks(entry, "chunks"), "envelopeLimit": limit, "maxMessage": most} == case["expect"]


@pytest.mark.parametrize("case", VECTORS["advertisement"], ids=lambda c: c["name"])
def test_a_targets_advertisement_is_read_by_the_entrys_rule_for_numbers(case):
    """`65536.0` is an integer and `1e400` is missing, as in every number of an entry."""
    check_advertisement(case)


@pytest.mark.parametrize("case", VECTORS["invalid"], ids=lambda c: c["name"])
def test_invalid_payloads_are_refused_for_the_stated_reason(case):
    opened = open_envelope(bytes.fromhex(case["envelope_hex"]), KEY)
    with pytest.raises(EnvelopeError) as info:
        payload, _ = chunks.decode(opened.payload, case["type"], case["flags"])
        if case["flags"] & reliable.FLAG_RELIABLE:
            reliable.message_id(payload)
    assert info.value.reason == case["reason"]
