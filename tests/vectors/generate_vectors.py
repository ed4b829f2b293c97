#!/usr/bin/env python3
"""Generate tests/vectors/envelope_vectors.json from SPEED-WIRE-V1 section 5 alone.

This is an independent reading of the wire contract, written with PyNaCl and struct only:
it deliberately does not import speed_runtime, so that the vectors cross-check both the
Python runtime and the C node (tests/interop/c). Everything is fixed (key, nonces, UUIDs,
timestamps), so running the script again reproduces the file byte for byte.

    python tests/vectors/generate_vectors.py            # rewrite the file
    python tests/vectors/generate_vectors.py --check    # exit 1 if the file is out of date
"""
from __future__ import annotations

import base64
import json
import struct
import sys
import uuid
from pathlib import Path

from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt

OUT = Path(__file__).with_name("envelope_vectors.json")

# Section 5.1
TYPES = {
    "MESSAGE": 1,
    "SPC_REQUEST": 2,
    "SPC_RESPONSE": 3,
    "EVENT": 4,
    "DISCOVERY": 5,
    "HEARTBEAT": 6,
    "ERROR": 7,
    "ACK": 8,
}

KEY = bytes(range(0x40, 0x60))  # 32 fixed bytes
KEY_FILE = "SPEED-KEY-V1\n" + base64.b64encode(KEY).decode("ascii") + "\n"

BILLING = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
REPORTS = "0a1b2c3d-4e5f-4061-8273-9485a6b7c8d9"
GATEWAY = "f0e1d2c3-b4a5-4697-a8b9-cadbecfd0e1f"
BASE_TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z

HEADER = struct.Struct(">BBHIQQQ16s16s")  # section 5: 64 bytes, big-endian
assert HEADER.size == 64


def header(version, etype, flags, hlen, seq, ts, psize, src, dst) -> bytes:
    return HEADER.pack(version, etype, flags, hlen, seq, ts, psize,
                       uuid.UUID(src).bytes, uuid.UUID(dst).bytes)


def seal(hdr: bytes, nonce: bytes, payload: bytes, key: bytes = KEY) -> bytes:
    ct = crypto_aead_chacha20poly1305_ietf_encrypt(payload, hdr, nonce, key)
    return hdr + nonce + ct  # ct already ends with the 16-byte tag


def filename(sender: str, src: str, seq: int, nonce: bytes) -> str:
    """Section 5.4: <sender>.<8 hex of source id>.<20-digit seq>.<8 hex of nonce>.env"""
    return f"{sender}.{uuid.UUID(src).hex[:8]}.{seq:020d}.{nonce.hex()[:8]}.env"


def nonce_for(i: int) -> bytes:
    return bytes((0xA0 + i + j) & 0xFF for j in range(12))


# (name, type, flags, sequence, ts offset ms, sender, sender id, receiver id, payload text).
# The payload text is exactly what is sealed: written out here, never re-serialised.
CASES = [
    ("message_ack_unicode", "MESSAGE", 1, 7, 0, "billing", BILLING, REPORTS,
     '{"from":"billing","to":"reports","data":{"text":"Grüße, 世界 🚀",'
     '"escaped":"tab\\tquote\\" back\\\\slash \\u00e9 \\ud83d\\ude80","n":42,'
     '"pi":3.14159,"neg":-1.5e-3,"ok":true,"none":null,"list":[1,"two",[3]]}}'),
    ("message_empty_object", "MESSAGE", 0, 1, 1, "billing", BILLING, REPORTS,
     '{"from":"billing","to":"reports","data":{}}'),
    ("message_base64", "MESSAGE", 0, 2, 2, "billing", BILLING, REPORTS,
     '{"from":"billing","to":"reports","data":"AAECA/8=","encoding":"base64"}'),
    ("spc_request_calculate_tax", "SPC_REQUEST", 0, 3, 3, "gateway", GATEWAY, BILLING,
     '{"from":"gateway","to":"billing","requestId":"req-0001","service":"calculateTax",'
     '"arguments":{"amount":100},"callerNode":"gateway","timeoutMs":5000}'),
    ("spc_response_success", "SPC_RESPONSE", 0, 4, 4, "billing", BILLING, GATEWAY,
     '{"from":"billing","to":"gateway","requestId":"req-0001","status":"SUCCESS",'
     '"result":{"tax":18.0}}'),
    ("spc_response_error", "SPC_RESPONSE", 0, 5, 5, "billing", BILLING, GATEWAY,
     '{"from":"billing","to":"gateway","requestId":"req-0002","status":"ERROR",'
     '"errorCode":"SERVICE_NOT_FOUND","errorMessage":"no service \'nope\' on billing"}'),
    ("event_leave", "EVENT", 0, 6, 6, "reports", REPORTS, BILLING,
     '{"from":"reports","to":"billing","event":"leave"}'),
    ("discovery_minimal", "DISCOVERY", 0, 1, 7, "reports", REPORTS, GATEWAY,
     '{"from":"reports","to":"gateway"}'),
    ("heartbeat_probe", "HEARTBEAT", 0, 8, 8, "gateway", GATEWAY, REPORTS,
     '{"from":"gateway","to":"reports","reply":false}'),
    ("heartbeat_reply", "HEARTBEAT", 0, 9, 9, "reports", REPORTS, GATEWAY,
     '{"from":"reports","to":"gateway","reply":true}'),
    ("error_envelope", "ERROR", 0, 10, 10, "reports", REPORTS, BILLING,
     '{"from":"reports","to":"billing","errorCode":"INTERNAL_ERROR",'
     '"errorMessage":"disk full","refSeq":7}'),
    ("ack", "ACK", 0, 18446744073709551615, 11, "reports", REPORTS, BILLING,
     '{"from":"reports","to":"billing","ackSeq":7}'),
]


def build() -> dict:
    vectors = []
    for i, (name, tname, flags, seq, dt, sender, src, dst, text) in enumerate(CASES):
        payload = text.encode("utf-8")
        json.loads(text)  # the payload must be valid JSON
        nonce = nonce_for(i)
        ts = BASE_TS + dt
        hdr = header(1, TYPES[tname], flags, 64, seq, ts, len(payload), src, dst)
        env = seal(hdr, nonce, payload)
        assert len(env) == 64 + 12 + len(payload) + 16
        vectors.append({
            "name": name,
            "key_hex": KEY.hex(),
            "version": 1,
            "type": TYPES[tname],
            "type_name": tname,
            "flags": flags,
            "header_length": 64,
            "sequence": seq,
            "timestamp_ms": ts,
            "source_id": src,
            "target_id": dst,
            "nonce_hex": nonce.hex(),
            "payload_utf8": text,
            "header_hex": hdr.hex(),
            "envelope_hex": env.hex(),
            "filename": filename(sender, src, seq, nonce),
        })

    base = bytes.fromhex(vectors[0]["envelope_hex"])

    def flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
        b = bytearray(data)
        b[index] ^= mask
        return bytes(b)

    def resealed(version: int, hlen: int) -> bytes:
        """A correctly sealed envelope whose header carries a bad version/header length."""
        payload = CASES[0][8].encode("utf-8")
        hdr = header(version, 1, 1, hlen, 7, BASE_TS, len(payload), BILLING, REPORTS)
        return seal(hdr, nonce_for(0), payload)

    invalid = [
        ("flipped_tag_bit", flip(base, len(base) - 1), "bad_tag"),
        ("flipped_ciphertext_bit", flip(base, 64 + 12 + 3), "bad_tag"),
        ("flipped_header_byte_timestamp", flip(base, 23), "bad_tag"),
        ("flipped_header_byte_target_id", flip(base, 63, 0x80), "bad_tag"),
        ("flipped_nonce_bit", flip(base, 64), "bad_tag"),
        ("flipped_flags_bit", flip(base, 3, 0x02), "bad_tag"),
        ("wrong_key", seal(base[:64], base[64:76], CASES[0][8].encode(), bytes(32)), "bad_tag"),
        ("truncated_by_one", base[:-1], "bad_size"),
        ("truncated_to_header", base[:64], "bad_size"),
        ("empty_file", b"", "bad_size"),
        ("appended_byte", base + b"\x00", "bad_size"),
        ("version_2", resealed(2, 64), "bad_version"),
        ("version_2_unsealed", flip(base, 0, 0x03), "bad_version"),
        ("header_length_65", resealed(1, 65), "bad_version"),
    ]
    return {
        "spec": "SPEED-WIRE-V1",
        "generator": "tests/vectors/generate_vectors.py (PyNaCl + struct; independent of speed_runtime)",
        "key_file": KEY_FILE,
        "vectors": vectors,
        "invalid": [{"name": n, "envelope_hex": d.hex(), "reason": r} for n, d, r in invalid],
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"{OUT} is up to date")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(build()['vectors'])} vectors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
