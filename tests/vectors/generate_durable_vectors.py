#!/usr/bin/env python3
"""Generate tests/vectors/durable_vectors.json from docs/PROTOCOL.md ("### durable") alone.

An independent reading of the durable extension, with PyNaCl, struct and json only (it does not
import speed_runtime): the receipt key, a chain of receipts (the bytes each MAC covers, the MACs),
a durable MESSAGE envelope and a receipt envelope (sealed byte for byte), and durable fields a
receiver must refuse. Everything is fixed, so running it again reproduces the file.

    python tests/vectors/generate_durable_vectors.py            # rewrite the file
    python tests/vectors/generate_durable_vectors.py --check    # exit 1 if the file is out of date
"""
from __future__ import annotations

import json
import struct
import sys
import uuid
from pathlib import Path

from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt, crypto_generichash_blake2b_salt_personal

OUT = Path(__file__).with_name("durable_vectors.json")
KEY = bytes(range(0x40, 0x60))          # the key of envelope_vectors.json
BILLING = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
REPORTS = "0a1b2c3d-4e5f-4061-8273-9485a6b7c8d9"
STREAM = "5f0c2a9e7d1b4c3a8e6f0d2b4a6c8e1f"
FLAG_DURABLE = 0x0010
STATUS = {"handled": 1, "failed": 2, "expired": 3}
HEADER = struct.Struct(">BBHIQQQ16s16s")


def blake2b(data: bytes, key: bytes) -> bytes:
    """Keyed BLAKE2b-256 (libsodium's crypto_generichash with a 32-byte key)."""
    return crypto_generichash_blake2b_salt_personal(data, digest_size=32, key=key)


def receipt_key(env_key: bytes) -> bytes:
    return blake2b(b"SPEED-DURABLE-RECEIPT-KEY-V1", env_key)


def name(n: str) -> bytes:
    raw = n.encode()
    return bytes([len(raw)]) + raw


def receipt_input(receiver, sender, stream, index, msg_id, status, time_ms, prev) -> bytes:
    return (b"SPEED-RECEIPT-V1" + name(receiver) + name(sender) + bytes.fromhex(stream)
            + struct.pack(">QQ", index, msg_id) + bytes([STATUS[status]]) + struct.pack(">Q", time_ms) + prev)


def seal(etype, flags, seq, ts, src, dst, nonce, text: str) -> tuple[str, str]:
    payload = text.encode()
    hdr = HEADER.pack(1, etype, flags, 64, seq, ts, len(payload), uuid.UUID(src).bytes, uuid.UUID(dst).bytes)
    env = hdr + nonce + crypto_aead_chacha20poly1305_ietf_encrypt(payload, hdr, nonce, KEY)
    return hdr.hex(), env.hex()


FLOOR_STEP, MAX_STREAMS = 16, 8
TOP = 2**63 - 1


def ledger_steps(copies: list[tuple[int, int, int]]) -> list[dict]:
    """What a receiver does with authentic copies (stream number, id, base) of one sender, read
    from "The receiver": the floor rises to min(base - 1, floor + 16, the highest id receipted
    before), never falls; an id at or below the floor, or receipted, is a duplicate; a sender's
    ninth stream is refused."""
    streams: dict[int, dict] = {}
    out = []
    for number, msg_id, base in copies:
        st = streams.get(number)
        if st is None and len(streams) == MAX_STREAMS:
            out.append({"stream": number, "id": msg_id, "base": base, "outcome": "durable_streams_full"})
            continue
        st = streams.setdefault(number, {"floor": 0, "high": 0, "done": set()})
        st["floor"] = max(st["floor"], min(base - 1, st["floor"] + FLOOR_STEP, st["high"]))
        if msg_id <= st["floor"] or msg_id in st["done"]:
            outcome = "durable_duplicate"
        else:
            outcome = "handled"
            st["done"].add(msg_id)
            st["high"] = max(st["high"], msg_id)
        out.append({"stream": number, "id": msg_id, "base": base, "outcome": outcome, "floor": st["floor"]})
    return out


LEDGER_COPIES = [
    (1, 1, 1), (1, 2, 1), (1, 3, 3), (1, 2, 2),          # in order; a copy below the floor
    (1, TOP, TOP),                                       # forged: the floor stays at what was receipted
    (1, 4, 4),                                           # the honest sender goes on
    (1, TOP - 1, TOP - 1),                               # a second forged copy: 16 ids further, no more
    (1, 5, 5), (1, 20, 20),                              # 5 is lost to it, 20 is not
    (1, 100, 100), (1, 101, 101), (1, 60, 1), (1, 100, 1),  # a gap crossed 16 ids a copy; below: new ids
] + [(n, 1, 1) for n in range(2, 10)]                    # a sender's ninth stream


def build() -> dict:
    rkey = receipt_key(KEY)
    receipts, prev = [], bytes(32)
    for index, (msg_id, status, time_ms) in enumerate([(1, "handled", 1_700_000_001_000),
                                                       (3, "failed", 1_700_000_001_250),
                                                       (2, "expired", 1_700_000_001_500)], start=1):
        data = receipt_input("reports", "billing", STREAM, index, msg_id, status, time_ms, prev)
        mac = blake2b(data, rkey)
        receipts.append({"receiver": "reports", "sender": "billing", "stream": STREAM, "index": index, "id": msg_id,
                         "status": status, "time": time_ms, "prev": prev.hex(), "input_hex": data.hex(),
                         "mac": mac.hex()})
        prev = mac
    message_text = ('{"from":"billing","to":"reports","data":{"invoice":42},"durable":{"stream":"' + STREAM
                    + '","id":3,"base":2,"expiresAt":1700086400000}}')
    nonce = bytes(range(0xC0, 0xCC))
    m_hdr, m_env = seal(1, FLAG_DURABLE, 5, 1_700_000_000_500, BILLING, REPORTS, nonce, message_text)
    r = receipts[1]
    receipt_json = {k: r[k] for k in ("stream", "index", "id", "status", "time", "prev", "mac")}
    ack_text = '{"from":"reports","to":"billing","ackSeq":5,"receipt":' + json.dumps(receipt_json, separators=(",", ":")) + "}"
    nonce2 = bytes(range(0xD0, 0xDC))
    a_hdr, a_env = seal(8, FLAG_DURABLE, 9, 1_700_000_001_260, REPORTS, BILLING, nonce2, ack_text)
    bad = [
        ("no durable object", {}),
        ("stream not hex", {"stream": STREAM.upper(), "id": 1, "base": 1, "expiresAt": 1}),
        ("stream too short", {"stream": STREAM[:30], "id": 1, "base": 1, "expiresAt": 1}),
        ("id zero", {"stream": STREAM, "id": 0, "base": 1, "expiresAt": 1}),
        ("id not an integer", {"stream": STREAM, "id": 1.5, "base": 1, "expiresAt": 1}),
        ("id 2^63", {"stream": STREAM, "id": 2**63, "base": 1, "expiresAt": 1}),
        ("base above id", {"stream": STREAM, "id": 2, "base": 3, "expiresAt": 1}),
        ("base zero", {"stream": STREAM, "id": 2, "base": 0, "expiresAt": 1}),
        ("expiresAt missing", {"stream": STREAM, "id": 2, "base": 1}),
        ("expiresAt negative", {"stream": STREAM, "id": 2, "base": 1, "expiresAt": -1}),
        ("id a boolean", {"stream": STREAM, "id": True, "base": 1, "expiresAt": 1}),
    ]
    return {
        "spec": "SPEED-WIRE-V1 durable",
        "key_hex": KEY.hex(),
        "receipt_key_context": "SPEED-DURABLE-RECEIPT-KEY-V1",
        "receipt_key_hex": rkey.hex(),
        "receipts": receipts,
        "envelopes": [
            {"name": "durable_message", "type": 1, "flags": FLAG_DURABLE, "sequence": 5, "timestamp_ms": 1_700_000_000_500,
             "source_id": BILLING, "target_id": REPORTS, "nonce_hex": nonce.hex(), "payload_utf8": message_text,
             "header_hex": m_hdr, "envelope_hex": m_env,
             "filename": f"billing.{uuid.UUID(BILLING).hex[:8]}.{5:020d}.{nonce.hex()[:8]}.env",
             "durable": {"stream": STREAM, "id": 3, "base": 2, "expiresAt": 1700086400000}},
            {"name": "receipt_ack", "type": 8, "flags": FLAG_DURABLE, "sequence": 9, "timestamp_ms": 1_700_000_001_260,
             "source_id": REPORTS, "target_id": BILLING, "nonce_hex": nonce2.hex(), "payload_utf8": ack_text,
             "header_hex": a_hdr, "envelope_hex": a_env,
             "filename": f"reports.{uuid.UUID(REPORTS).hex[:8]}.{9:020d}.{nonce2.hex()[:8]}.env"},
        ],
        "floor_step": FLOOR_STEP,
        "max_streams": MAX_STREAMS,
        "ledger_steps": ledger_steps(LEDGER_COPIES),
        "invalid_durable_fields": [
            {"name": n, "payload": {"from": "billing", "to": "reports", "data": 1, **({"durable": f} if f else {})},
             "reason": "bad_payload"} for n, f in bad],
    }


def main() -> int:
    text = json.dumps(build(), indent=1, ensure_ascii=False) + "\n"
    if sys.argv[1:] == ["--check"]:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
