#!/usr/bin/env python3
"""Generate tests/vectors/control_vectors.json from docs/PROTOCOL.md "### control" alone.

An independent reading of the `control` extension, written with PyNaCl, struct and json only: it
does not import speed_runtime, so the vectors cross-check the Python runtime
(tests/ext/test_control_vectors.py) and the C node (`speed_c_node kat-control`). Everything is
fixed (keys, seeds, nonces, UUIDs, times; Ed25519 signatures are deterministic), so running the
script again reproduces the file byte for byte.

The cases are judged in order by one target (`billing`, instance TARGET_ID) that trusts one
operator key, with one memory of request ids, at `now_ms`; `reason` null means applied.

    python tests/vectors/generate_control_vectors.py            # rewrite the file
    python tests/vectors/generate_control_vectors.py --check    # exit 1 if the file is out of date
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
import uuid
from pathlib import Path

from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt
from nacl.signing import SigningKey

OUT = Path(__file__).with_name("control_vectors.json")

KEY = bytes(range(0x40, 0x60))              # the environment key of envelope_vectors.json
OPERATOR_SEED = bytes(range(0x01, 0x21))    # the trusted operator
STRANGER_SEED = bytes(range(0x81, 0xA1))    # an operator the target does not trust
TARGET, TARGET_ID = "billing", "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
OTHER_INSTANCE = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0fa"
REQUESTER, REQUESTER_ID = "speed-cli-0badcafe", "0badcafe-1234-4567-89ab-cdef01234567"
NOW = 1_700_000_000_500
SPC_REQUEST, SPC_RESPONSE, FLAG_CONTROL = 2, 3, 0x0040
SIGNING_DOMAIN = b"SPEED-CONTROL-V1\x00"
FINGERPRINT_DOMAIN = b"SPEED-OPERATOR-FINGERPRINT\x00"

HEADER = struct.Struct(">BBHIQQQ16s16s")


def compact(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def fingerprint(public_key: bytes) -> str:
    return hashlib.sha256(FINGERPRINT_DOMAIN + public_key).hexdigest()[:16]


def operator(seed: bytes) -> dict:
    key = SigningKey(seed)
    public = bytes(key.verify_key)
    return {"seed_hex": seed.hex(), "public_key": base64.b64encode(public).decode(),
            "fingerprint": fingerprint(public), "key_file": "SPEED-OPERATOR-KEY-V1\n" + base64.b64encode(seed).decode() + "\n"}


def signed_text(command, arguments, request_id, *, target=TARGET, instance=TARGET_ID, requester=REQUESTER,
                issued=NOW - 500, lifetime=60_000) -> str:
    return compact({"target": target, "instance": instance, "requestId": request_id, "requester": requester,
                    "command": command, "arguments": arguments, "issuedAt": issued, "expiresAt": issued + lifetime})


def payload(text: str, request_id: str, *, seed=OPERATOR_SEED, signature=None, sender=REQUESTER, unsigned=False) -> str:
    key = SigningKey(seed)
    if signature is None:
        signature = key.sign(SIGNING_DOMAIN + text.encode("utf-8")).signature
    body = {"from": sender, "to": TARGET, "requestId": request_id}
    if not unsigned:
        body["operator"] = base64.b64encode(bytes(key.verify_key)).decode()
    body["request"] = text
    if not unsigned:
        body["signature"] = base64.b64encode(signature).decode()
    return compact(body)


def envelope(body: str, seq: int, *, ts=NOW - 400, flags=FLAG_CONTROL, etype=SPC_REQUEST, target_id=TARGET_ID,
             sender=REQUESTER, tamper=False) -> dict:
    nonce = bytes((0xC0 + seq + j) & 0xFF for j in range(12))
    raw = body.encode("utf-8")
    header = HEADER.pack(1, etype, flags, 64, seq, ts, len(raw), uuid.UUID(REQUESTER_ID).bytes,
                         uuid.UUID(target_id).bytes)
    sealed = bytearray(header + nonce + crypto_aead_chacha20poly1305_ietf_encrypt(raw, header, nonce, KEY))
    if tamper:
        sealed[80] ^= 0x01
    return {"sequence": seq, "timestamp_ms": ts, "flags": flags, "type": etype, "nonce_hex": nonce.hex(),
            "filename": f"{sender}.{uuid.UUID(REQUESTER_ID).hex[:8]}.{seq:020d}.{nonce.hex()[:8]}.env",
            "payload_utf8": body, "envelope_hex": bytes(sealed).hex()}


def case(name, reason, text, request_id, seq, **options) -> dict:
    envelope_options = {k: options.pop(k) for k in ("ts", "flags", "etype", "target_id", "tamper") if k in options}
    body = payload(text, request_id, **options)
    return {"name": name, "reason": reason, "request_id": request_id, "request_utf8": text,
            **envelope(body, seq, **envelope_options)}


def flipped(text: str) -> bytes:
    signature = bytearray(SigningKey(OPERATOR_SEED).sign(SIGNING_DOMAIN + text.encode()).signature)
    signature[5] ^= 0x40
    return bytes(signature)


ALLOW = signed_text("allow", {"peer": "gateway"}, "req-allow-1")
# the same request, written with spaces, another key order and escapes: verifiers check the bytes
# they are given and never re-serialise
REORDERED = ('{ "command" : "status", "arguments" : {}, "requestId" : "req-status-2", "requester" : '
             '"speed-cli-0badcafe", "target" : "billing", "instance" : "6F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F9", '
             f'"issuedAt" : {NOW - 500}, "expiresAt" : {NOW + 59_500}, "note" : "gr\\u00fc\\u00dfe" }}')

CASES = [
    case("allow_gateway", None, ALLOW, "req-allow-1", 1),
    case("status", None, signed_text("status", {}, "req-status-1"), "req-status-1", 2),
    case("status_reordered_text", None, REORDERED, "req-status-2", 3),
    case("revoke_gateway", None, signed_text("revoke", {"peer": "gateway"}, "req-revoke-1"), "req-revoke-1", 4),
    case("replayed_request_id", "control_replayed", ALLOW, "req-allow-1", 5),
    case("forged_signature", "control_bad_signature", signed_text("allow", {"peer": "mallory"}, "req-forged"),
         "req-forged", 6, signature=flipped(signed_text("allow", {"peer": "mallory"}, "req-forged"))),
    case("request_changed_after_signing", "control_bad_signature", signed_text("allow", {"peer": "mallory"}, "req-x"),
         "req-x", 7, signature=SigningKey(OPERATOR_SEED).sign(
             SIGNING_DOMAIN + signed_text("allow", {"peer": "gateway"}, "req-x").encode()).signature),
    case("signed_for_another_target", "control_wrong_target",
         signed_text("allow", {"peer": "mallory"}, "req-other-target", target="reports"), "req-other-target", 8),
    case("signed_for_another_instance", "control_wrong_target",
         signed_text("allow", {"peer": "mallory"}, "req-other-id", instance=OTHER_INSTANCE), "req-other-id", 9),
    case("expired", "control_expired", signed_text("allow", {"peer": "mallory"}, "req-old", issued=NOW - 100_000),
         "req-old", 10),
    case("issued_in_the_future", "control_expired",
         signed_text("allow", {"peer": "mallory"}, "req-future", issued=NOW + 40_000), "req-future", 11),
    case("untrusted_operator", "control_untrusted", signed_text("allow", {"peer": "mallory"}, "req-stranger"),
         "req-stranger", 12, seed=STRANGER_SEED),
    case("unsigned", "control_unsigned", signed_text("allow", {"peer": "mallory"}, "req-unsigned"), "req-unsigned",
         13, unsigned=True),
    case("signed_for_another_requester", "control_wrong_requester",
         signed_text("allow", {"peer": "mallory"}, "req-requester", requester="mallory"), "req-requester", 14),
    case("lifetime_too_long", "control_malformed",
         signed_text("allow", {"peer": "mallory"}, "req-long", lifetime=400_000), "req-long", 15),
    case("unknown_command", "control_malformed", signed_text("reboot", {}, "req-reboot"), "req-reboot", 16),
    case("peer_not_a_node_name", "control_malformed", signed_text("allow", {"peer": "../x"}, "req-badpeer"),
         "req-badpeer", 17),
    case("outer_request_id_differs", "control_malformed", signed_text("allow", {"peer": "mallory"}, "req-inner"),
         "req-outer", 18),
    case("without_the_control_flag", "control_malformed", signed_text("allow", {"peer": "mallory"}, "req-noflag"),
         "req-noflag", 19, flags=0),
    case("tampered_ciphertext", "bad_tag", signed_text("allow", {"peer": "mallory"}, "req-tamper"), "req-tamper", 20,
         tamper=True),
    case("stale_envelope_timestamp", "stale_timestamp", signed_text("allow", {"peer": "mallory"}, "req-stale"),
         "req-stale", 21, ts=NOW - 70_000),
    case("envelope_for_another_instance", "wrong_target", signed_text("allow", {"peer": "mallory"}, "req-wrongid"),
         "req-wrongid", 22, target_id=OTHER_INSTANCE),
    case("lift_gateway", None, signed_text("lift", {"sender": "gateway"}, "req-lift-1"), "req-lift-1", 23),
    case("lift_takes_a_sender", "control_malformed", signed_text("lift", {"peer": "gateway"}, "req-lift-bad"),
         "req-lift-bad", 24),
    case("stop", None, signed_text("stop", {}, "req-stop-1"), "req-stop-1", 25),
    case("lift_sender_not_a_node_name", "control_malformed",
         signed_text("lift", {"sender": "../gateway"}, "req-lift-badname"), "req-lift-badname", 26),
]

ANSWERS = [  # SPC_RESPONSE payloads (v1 layout) the target writes back to the requester
    {"name": "applied_allow", "payload_utf8": compact({
        "from": TARGET, "to": REQUESTER, "requestId": "req-allow-1", "status": "SUCCESS",
        "result": {"command": "allow", "peer": "gateway", "changed": True, "published": True, "allow": ["gateway"]}})},
    {"name": "refused_expired", "payload_utf8": compact({
        "from": TARGET, "to": REQUESTER, "requestId": "req-old", "status": "ERROR", "errorCode": "TIMEOUT",
        "errorMessage": "control_expired: the request expired by this node's clock"})},
]


def build() -> str:
    doc = {
        "description": "control extension vectors (docs/PROTOCOL.md ### control); cases are judged in order by "
                       "one target with one memory of request ids",
        "key_hex": KEY.hex(),
        "operator": operator(OPERATOR_SEED),
        "stranger": operator(STRANGER_SEED),
        "target": {"name": TARGET, "id": TARGET_ID},
        "requester": {"name": REQUESTER, "id": REQUESTER_ID},
        "now_ms": NOW,
        "window_ms": 60_000,
        "signing_domain_hex": SIGNING_DOMAIN.hex(),
        "cases": CASES,
        "answers": ANSWERS,
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def main() -> int:
    text = build()
    if "--check" in sys.argv[1:]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(CASES)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
