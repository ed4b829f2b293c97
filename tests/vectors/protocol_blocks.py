#!/usr/bin/env python3
"""Print known-answer vectors from tests/vectors/*.json as the `vector` blocks docs/PROTOCOL.md
prints ("Known-answer vectors": `kind:` and `name:` first, then one `FIELD: VALUE` line per input
and output, long hex continued on lines indented by two spaces). A maintainer pastes its output
into PROTOCOL.md; tests/runtime/test_protocol_vectors.py parses every block there and checks it
against the runtime and against these files.

    python tests/vectors/protocol_blocks.py envelope:ack receipt:receipt_1 quota-bucket:bucket_fractional_rate

(`KIND:NAME`; a block's name is its case's name in the file after a prefix per kind, PREFIX.)
"""
from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
HEX_PER_LINE = 64
ENVELOPE_FIELDS = ("key", "type", "flags", "sequence", "timestamp_ms", "source_id", "target_id", "nonce",
                   "payload", "plaintext", "filename", "header", "envelope", "chain")
HEX = {"key", "nonce", "plaintext", "header", "envelope", "chain", "receipt_key", "prev", "input", "mac", "seed",
       "signature"}


def _load(name: str) -> dict:
    return json.loads((HERE / f"{name}_vectors.json").read_text(encoding="utf-8"))


def _key_hex(key_file: str) -> str:
    return base64.b64decode(key_file.split()[1]).hex()


def envelope(name: str) -> dict:
    """An envelope of any of the vector files, by name."""
    v1, chunks, durable, control = _load("envelope"), _load("chunks"), _load("durable"), _load("control")
    cases = {v["name"]: ({"key": v["key_hex"]}, v) for v in v1["vectors"]}
    cases.update({v["name"]: ({"key": _key_hex(chunks["key_file"])}, v) for v in chunks["envelopes"]})
    cases.update({v["name"]: ({"key": durable["key_hex"]}, v) for v in durable["envelopes"]})
    ids = {"source_id": control["requester"]["id"], "target_id": control["target"]["id"]}
    cases.update({f"control_{v['name']}": ({"key": control["key_hex"], **ids}, v) for v in control["cases"]})
    extra, v = cases[name]
    raw = {**v, **extra}
    envelope_hex = raw["envelope_hex"]
    fields = {"key": raw["key"], "type": raw["type"], "flags": raw["flags"], "sequence": raw["sequence"],
              "timestamp_ms": raw["timestamp_ms"], "source_id": raw["source_id"], "target_id": raw["target_id"],
              "nonce": raw["nonce_hex"], "filename": raw["filename"], "header": envelope_hex[:128],
              "envelope": envelope_hex}
    if "payload_utf8" in raw:
        fields["payload"] = raw["payload_utf8"]
    else:
        fields["plaintext"], fields["chain"] = raw["plaintext_hex"], raw["chain"]
    return {k: fields[k] for k in ENVELOPE_FIELDS if k in fields}


def key_fingerprint(_: str) -> dict:
    """The fingerprint of the envelope vectors' key (reading 14), restated with hashlib."""
    key = bytes.fromhex(_load("envelope")["vectors"][0]["key_hex"])
    return {"key": key.hex(), "fingerprint": hashlib.sha256(b"SPEED-KEY-FINGERPRINT\x00" + key).hexdigest()[:16]}


def receipt(index: str) -> dict:
    durable = _load("durable")
    r = next(r for r in durable["receipts"] if r["index"] == int(index))
    return {"key": durable["key_hex"], "receiver": r["receiver"], "sender": r["sender"], "stream": r["stream"],
            "index": r["index"], "id": r["id"], "status": r["status"], "time": r["time"], "prev": r["prev"],
            "input": r["input_hex"], "mac": r["mac"]}


def receipt_key(_: str) -> dict:
    durable = _load("durable")
    return {"key": durable["key_hex"], "receipt_key": durable["receipt_key_hex"]}


def durable_ledger_steps(_: str) -> dict:
    durable = _load("durable")
    return {"receiver": "reports", "sender": "billing", "floor_step": durable["floor_step"],
            "max_streams": durable["max_streams"], "steps": durable["ledger_steps"]}


def control_signature(case: str) -> dict:
    control = _load("control")
    c = next(c for c in control["cases"] if c["name"] == case)
    signature = base64.b64decode(json.loads(c["payload_utf8"])["signature"]).hex()
    op = control["operator"]
    return {"seed": op["seed_hex"], "public_key": op["public_key"], "fingerprint": op["fingerprint"],
            "request": c["request_utf8"], "signature": signature}


def _case(file: str, section: str, name: str) -> dict:
    return next(c for c in _load(file)[section] if c["name"] == name)


def quota_limits(name: str) -> dict:
    c = _case("quota", "limits", name)
    return {"entry": c["entry"], "sender": c["sender"], "expect": c["expect"]}


def quota_admission(name: str) -> dict:
    c = _case("quota", "admission", name)
    return {"limits": c["limits"], "steps": c["steps"], "expect": c["expect"]}


def quota_bucket(name: str) -> dict:
    c = _case("quota", "bucket", name)
    return {"rate": c["rate"], "burst": c["burst"], "times_ms": c["times_ms"], "expect_delay_ms": c["expect_delay_ms"]}


def chunks_advertisement(name: str) -> dict:
    c = _case("chunks", "advertisement", name)
    return {"entry": c["entry"], "own_max_payload": c["own_max_payload"], "own_max_message": c["own_max_message"],
            "expect": c["expect"]}


KINDS = {"envelope": envelope, "key-fingerprint": key_fingerprint, "receipt": receipt, "receipt-key": receipt_key,
         "durable-ledger-steps": durable_ledger_steps,
         "control-signature": control_signature,
         "quota-limits": quota_limits, "quota-admission": quota_admission, "quota-bucket": quota_bucket,
         "chunks-advertisement": chunks_advertisement}


# a block's name is its case's name in the file, after this prefix (names are unique on the page)
PREFIX = {"envelope": "", "key-fingerprint": "", "receipt": "receipt_", "receipt-key": "", "durable-ledger-steps": "", "control-signature":
          "signature_", "quota-limits": "limits_", "quota-admission": "admission_", "quota-bucket": "bucket_",
          "chunks-advertisement": "advertisement_"}


def case_of(kind: str, block_name: str) -> dict:
    """The fields a block of this kind and name states, from the files."""
    return KINDS[kind](block_name.removeprefix(PREFIX[kind]))


def _value(field: str, value) -> str:
    if field in HEX:
        return "\n  ".join(value[i:i + HEX_PER_LINE] for i in range(0, len(value), HEX_PER_LINE))
    if isinstance(value, list) and len(value) > 1 and all(isinstance(v, dict) for v in value):
        items = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in value]
        return "[" + ",\n  ".join(items) + "]"  # one object a line (continuation lines)
    if isinstance(value, (dict, list)) or value is None:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def block(kind: str, name: str) -> str:
    fields = case_of(kind, name)
    lines = [f"kind: {kind}", f"name: {name}"] + [f"{k}: {_value(k, v)}" for k, v in fields.items()]
    return "```vector\n" + "\n".join(lines) + "\n```"


def main(argv: list[str]) -> int:
    for arg in argv:
        kind, _, name = arg.partition(":")
        print(block(kind, name) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
