"""The durable extension's known-answer vectors (tests/vectors/durable_vectors.json, written by an
independent generator from docs/PROTOCOL.md) against the runtime's code (the vectors printed in
docs/PROTOCOL.md: tests/runtime/test_protocol_vectors.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from speed_runtime.core import durable as d
from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.core.keys import Key

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(REPO, "tests", "vectors", "generate_durable_vectors.py")
VECTORS = json.load(open(os.path.join(REPO, "tests", "vectors", "durable_vectors.json"), encoding="utf-8"))
KEY = Key(bytes.fromhex(VECTORS["key_hex"]))


def test_the_vector_file_is_what_the_generator_writes():
    assert subprocess.run([sys.executable, GENERATOR, "--check"]).returncode == 0


def test_the_receipt_key_is_derived_as_specified():
    assert d.receipt_key(KEY.raw).hex() == VECTORS["receipt_key_hex"]


@pytest.mark.parametrize("r", VECTORS["receipts"], ids=lambda r: f"receipt{r['index']}")
def test_each_receipts_input_and_mac(r):
    rkey = d.receipt_key(KEY.raw)
    data = d.receipt_input(r["receiver"], r["sender"], r["stream"], r["index"], r["id"], r["status"], r["time"],
                           bytes.fromhex(r["prev"]))
    assert data.hex() == r["input_hex"]
    receipt = d.receipt_from_json(r, r["receiver"], r["sender"])
    assert receipt.mac.hex() == r["mac"] and receipt.valid(rkey)


def test_the_vector_chain_verifies_and_breaks_where_it_is_cut():
    rkey = d.receipt_key(KEY.raw)
    receipts = [d.receipt_from_json(r, r["receiver"], r["sender"]) for r in VECTORS["receipts"]]
    [report] = d.verify_chain(receipts, rkey)
    assert report.ok and report.count == 3 and report.handled == 1
    assert d.verify_chain([receipts[0], receipts[2]], rkey)[0].first_break == 2


@pytest.mark.parametrize("v", VECTORS["envelopes"], ids=lambda v: v["name"])
def test_durable_envelopes_seal_and_open_byte_for_byte(v):
    payload = v["payload_utf8"].encode()
    header = Header(v["type"], v["sequence"], v["timestamp_ms"], len(payload), uuid.UUID(v["source_id"]).bytes,
                    uuid.UUID(v["target_id"]).bytes, v["flags"])
    nonce = bytes.fromhex(v["nonce_hex"])
    assert seal(header, payload, KEY, nonce).hex() == v["envelope_hex"]
    assert open_envelope(bytes.fromhex(v["envelope_hex"]), KEY).payload == payload
    obj = json.loads(payload)
    assert envelope_filename(obj["from"], header.source_id, header.sequence, nonce) == v["filename"]
    if "durable" in v:
        assert d.parse_fields(obj) == d.DurableFields(*(v["durable"][k] for k in ("stream", "id", "base", "expiresAt")))
        body = json.dumps({k: obj[k] for k in ("from", "to", "data")}, separators=(",", ":")).encode()
        assert d.add_fields(body, d.parse_fields(obj)) == payload
    else:
        receipt = d.receipt_from_json(obj["receipt"], obj["from"], obj["to"])
        assert receipt.valid(d.receipt_key(KEY.raw))


@pytest.mark.parametrize("case", VECTORS["invalid_durable_fields"], ids=lambda c: c["name"])
def test_invalid_durable_fields_are_refused(case):
    with pytest.raises(EnvelopeError) as info:
        d.parse_fields(case["payload"])
    assert info.value.reason == case["reason"]


def check_ledger_steps(steps: list[dict], floor_step: int, max_streams: int, receiver: str, sender: str) -> None:
    """Authentic copies of one sender applied in order to a fresh ledger: each outcome and the
    stream's floor after it (docs/PROTOCOL.md, durable, "The receiver"; also the printed vector)."""
    assert (d.FLOOR_STEP, d.MAX_STREAMS) == (floor_step, max_streams)
    rkey = d.receipt_key(bytes(32))  # the outcomes do not depend on the key
    streams: dict[str, d.StreamLedger] = {}
    for step in steps:
        ledger = d.stream_of(streams, f"{step['stream']:032x}")
        if ledger is None:
            assert step["outcome"] == "durable_streams_full", step
            continue
        ledger.advance(step["base"])
        outcome = "durable_duplicate" if ledger.seen(step["id"]) else "handled"
        if outcome == "handled":
            ledger.record(ledger.issue(rkey, receiver, sender, step["id"], "handled", 1))
        assert (outcome, ledger.floor) == (step["outcome"], step["floor"]), step


def test_the_ledger_steps_of_the_vectors():
    check_ledger_steps(VECTORS["ledger_steps"], VECTORS["floor_step"], VECTORS["max_streams"], "reports", "billing")

