"""Every known-answer vector printed in docs/PROTOCOL.md is machine-readable in the one format the
page defines ("Known-answer vectors": a `vector` block, `kind:` and `name:` first, every input
stated), and each is checked here against the runtime — sealing, opening and decoding envelopes,
receipt MACs, operator signatures, quota limits, admission and buckets, chunks advertisements —
and against the vector files of tests/vectors/ (so the page and the files say the same)."""
from __future__ import annotations

import base64
import json
import os
import re
import uuid

import pytest

from speed_runtime.core import chunks, control, durable, reliable
from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.core.keys import Key
from speed_runtime.core.payloads import decode_payload

from ..ext.test_chunks_vectors import check_advertisement
from ..ext.test_durable_vectors import check_ledger_steps
from ..ext.test_quota_vectors import check_admission, check_bucket, check_limits
from ..vectors import protocol_blocks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = open(os.path.join(REPO, "docs", "PROTOCOL.md"), encoding="utf-8").read()
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)

HEX = protocol_blocks.HEX
INTEGER = {"type", "flags", "sequence", "timestamp_ms", "index", "id", "time", "burst", "own_max_payload",
           "own_max_message", "floor_step", "max_streams"}
NUMBER = {"rate"}
UUID = {"source_id", "target_id"}
JSON = {"expect", "limits", "steps", "times_ms", "expect_delay_ms"}
TEXT = {"payload", "filename", "receiver", "sender", "stream", "status", "public_key", "fingerprint", "request",
        "entry"}
# kind -> (the fields it must state, the fields it may state)
KINDS = {
    "envelope": ({"key", "type", "flags", "sequence", "timestamp_ms", "source_id", "target_id", "nonce", "filename",
                  "envelope"}, {"payload", "plaintext", "header", "chain"}),
    "key-fingerprint": ({"key", "fingerprint"}, set()),
    "receipt-key": ({"key", "receipt_key"}, set()),
    "receipt": ({"key", "receiver", "sender", "stream", "index", "id", "status", "time", "prev", "input", "mac"},
                set()),
    "durable-ledger-steps": ({"receiver", "sender", "floor_step", "max_streams", "steps"}, set()),
    "control-signature": ({"seed", "public_key", "fingerprint", "request", "signature"}, set()),
    "quota-limits": ({"entry", "sender", "expect"}, set()),
    "quota-admission": ({"limits", "steps", "expect"}, set()),
    "quota-bucket": ({"rate", "burst", "times_ms", "expect_delay_ms"}, set()),
    "chunks-advertisement": ({"entry", "own_max_payload", "own_max_message", "expect"}, set()),
}


def parse_block(text: str) -> dict:
    """The page's grammar: `FIELD: VALUE` lines; a line that starts with two spaces continues the
    value before it (hex ignores the white space); `kind` then `name` first; each field once."""
    raw: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("  ") and last is not None:
            raw[last] += " " + line[2:]
            continue
        field, sep, value = line.partition(": ")
        assert sep and re.fullmatch(r"[a-z][a-z0-9_]*", field), f"not FIELD: VALUE: {line!r}"
        assert field not in raw, f"{field} twice"
        raw[field], last = value, field
    assert list(raw)[:2] == ["kind", "name"], "a vector block begins with kind and name"
    fields: dict = {"kind": raw.pop("kind"), "name": raw.pop("name")}
    for field, value in raw.items():
        if field in HEX:
            value = "".join(value.split())
            assert re.fullmatch(r"(?:[0-9a-f]{2})*", value), f"{field} is not lowercase hex"
            fields[field] = bytes.fromhex(value)
        elif field in INTEGER:
            assert re.fullmatch(r"0|[1-9][0-9]*", value), f"{field} is not a decimal integer"
            fields[field] = int(value)
        elif field in NUMBER:
            fields[field] = float(value)
        elif field in UUID:
            fields[field] = uuid.UUID(value)
            assert str(fields[field]) == value, f"{field} is not a canonical UUID"
        elif field in JSON:
            fields[field] = json.loads(value)
        else:
            assert field in TEXT, f"unknown field {field}"
            fields[field] = value
    return fields


def _blocks() -> list[tuple[str, str]]:
    return [(info.strip(), body) for info, body in FENCE.findall(DOC)]


VECTORS = [parse_block(body) for info, body in _blocks() if info == "vector"]


def test_every_vector_on_the_page_is_a_vector_block_with_every_input_stated():
    infos = {info for info, _ in _blocks()}
    assert not {i for i in infos if "vector" in i} - {"vector"}, "one format: the info string is `vector`"
    assert "..." not in "".join(body for info, body in _blocks() if info in ("vector", "json")).replace("…", "...")
    names = [v["name"] for v in VECTORS]
    assert len(names) == len(set(names)), "names are unique on the page"
    for v in VECTORS:
        required, optional = KINDS[v["kind"]]
        stated = set(v) - {"kind", "name"}
        assert required <= stated <= required | optional, (v["name"], required - stated, stated - required - optional)
    assert {v["kind"] for v in VECTORS} == set(KINDS), "the page prints a vector of every kind"


def test_every_json_block_on_the_page_parses():
    for info, body in _blocks():
        if info == "json":
            json.loads(body)


def _check_envelope(v: dict) -> None:
    key = Key(v["key"])
    body = v["payload"].encode("utf-8") if "payload" in v else v["plaintext"]
    assert ("payload" in v) != ("plaintext" in v), "the plaintext is stated once, as text or as hex"
    header = Header(v["type"], v["sequence"], v["timestamp_ms"], len(body), v["source_id"].bytes,
                    v["target_id"].bytes, v["flags"])
    sealed = seal(header, body, key, v["nonce"])
    assert sealed == v["envelope"] and sealed[:64] == v.get("header", sealed[:64])
    assert open_envelope(sealed, key).payload == body
    if v["flags"] & (chunks.FLAG_BINARY | chunks.FLAG_CHUNK):  # decoded as a receiver that enables chunks
        payload, _ = chunks.decode(body, v["type"], v["flags"])
    elif v["flags"] & control.FLAG_CONTROL:  # a control request has its own payload (its judgement needs a target)
        payload = json.loads(body)
    else:
        payload = decode_payload(body, v["type"])
    if v["flags"] & reliable.FLAG_RELIABLE:
        (reliable.read_acks if v["type"] == 8 else reliable.message_id)(payload)
    if v["flags"] & durable.FLAG_DURABLE and v["type"] == 8:
        assert durable.receipt_from_json(payload["receipt"], payload["from"], payload["to"]).valid(
            durable.receipt_key(key.raw))
    elif v["flags"] & durable.FLAG_DURABLE:
        durable.parse_fields(payload)
    if v["flags"] & control.FLAG_CONTROL:
        assert control.verify(control.parse_public_key(payload["operator"]), base64.b64decode(payload["signature"]),
                              control.SIGNING_DOMAIN + payload["request"].encode("utf-8"))
    assert v["filename"] == envelope_filename(payload["from"], header.source_id, header.sequence, v["nonce"])
    if "chain" in v:
        assert chunks.chain_value(sealed) == v["chain"].hex()


def _check_receipt(v: dict) -> None:
    args = (v["receiver"], v["sender"], v["stream"], v["index"], v["id"], v["status"], v["time"], v["prev"])
    assert durable.receipt_input(*args) == v["input"]
    assert durable.receipt_mac(durable.receipt_key(v["key"]), *args) == v["mac"]


def _check_ledger_steps(v: dict) -> None:
    check_ledger_steps(v["steps"], v["floor_step"], v["max_streams"], v["receiver"], v["sender"])


def _check_signature(v: dict) -> None:
    key = control.OperatorKey(v["seed"])
    assert (key.public_text, key.fingerprint) == (v["public_key"], v["fingerprint"])
    message = control.SIGNING_DOMAIN + v["request"].encode("utf-8")
    assert key.sign(message) == v["signature"]  # Ed25519 signatures are deterministic
    assert control.verify(control.parse_public_key(v["public_key"]), v["signature"], message)


CHECKS = {
    "envelope": _check_envelope,
    "key-fingerprint": lambda v: Key(v["key"]).fingerprint == v["fingerprint"] or pytest.fail("fingerprint"),
    "receipt-key": lambda v: durable.receipt_key(v["key"]) == v["receipt_key"] or pytest.fail("receipt key"),
    "receipt": _check_receipt,
    "durable-ledger-steps": _check_ledger_steps,
    "control-signature": _check_signature,
    "quota-limits": check_limits,
    "quota-admission": check_admission,
    "quota-bucket": check_bucket,
    "chunks-advertisement": check_advertisement,
}


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v["name"])
def test_each_vector_on_the_page_holds_for_the_runtime(v):
    CHECKS[v["kind"]](v)


def _as_printed(v: dict) -> dict:
    return {k: val.hex() if isinstance(val, bytes) else str(val) if isinstance(val, uuid.UUID) else val
            for k, val in v.items() if k not in ("kind", "name")}


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v["name"])
def test_each_vector_on_the_page_is_the_one_of_the_vector_files(v):
    """Field for field what tests/vectors/protocol_blocks.py prints from the files (which the C
    node checks), so that the page, the files and both implementations say the same."""
    assert _as_printed(v) == json.loads(json.dumps(protocol_blocks.case_of(v["kind"], v["name"])))
