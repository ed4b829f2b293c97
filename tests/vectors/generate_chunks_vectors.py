#!/usr/bin/env python3
"""Generate tests/vectors/chunks_vectors.json: known answers of the `chunks` and `reliable`
extensions (docs/PROTOCOL.md "### chunks", "### reliable"), from that text alone.

Like generate_vectors.py this is an independent reading written with PyNaCl, struct, json and
hashlib only (it does not import speed_runtime), so the vectors cross-check the Python runtime
(tests/ext/test_chunks_vectors.py) and the C node (`speed_c_node kat-chunks`). Everything is
fixed, so running it again reproduces the file byte for byte.

    python tests/vectors/generate_chunks_vectors.py            # rewrite the file
    python tests/vectors/generate_chunks_vectors.py --check    # exit 1 if the file is out of date
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

OUT = Path(__file__).with_name("chunks_vectors.json")
KEY = bytes(range(0x40, 0x60))
KEY_FILE = "SPEED-KEY-V1\n" + base64.b64encode(KEY).decode("ascii") + "\n"
BILLING = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
REPORTS = "0a1b2c3d-4e5f-4061-8273-9485a6b7c8d9"
BASE_TS = 1_700_000_100_000
HEADER = struct.Struct(">BBHIQQQ16s16s")
MESSAGE, SPC_REQUEST, SPC_RESPONSE, ACK = 1, 2, 3, 8
BINARY, CHUNK, RELIABLE = 0x0002, 0x0004, 0x0008
PIECE = 64  # bytes of the body per chunk in these vectors


def js(obj) -> bytes:
    """Compact UTF-8 JSON, keys in the order given (the vectors' headers are written this way)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sealed(name: str, etype: int, flags: int, seq: int, plaintext: bytes, src: str, dst: str, sender: str) -> dict:
    nonce = hashlib.sha256(name.encode()).digest()[:12]   # fixed per vector
    hdr = HEADER.pack(1, etype, flags, 64, seq, BASE_TS + seq, len(plaintext), uuid.UUID(src).bytes,
                      uuid.UUID(dst).bytes)
    envelope = hdr + nonce + crypto_aead_chacha20poly1305_ietf_encrypt(plaintext, hdr, nonce, KEY)
    return {"name": name, "type": etype, "flags": flags, "sequence": seq, "timestamp_ms": BASE_TS + seq,
            "source_id": src, "target_id": dst, "nonce_hex": nonce.hex(), "plaintext_hex": plaintext.hex(),
            "chain": envelope[-16:].hex(), "envelope_hex": envelope.hex(),
            "filename": f"{sender}.{uuid.UUID(src).hex[:8]}.{seq:020d}.{nonce.hex()[:8]}.env"}


def binary(header: dict, body: bytes) -> bytes:
    return js(header) + b"\x00" + body


def chunk_plaintext(first: dict, message_id: str, body: bytes, index: int, prev: str | None) -> bytes:
    """Chunk `index` of a body cut in PIECE-byte pieces: the first chunk carries `first` (from, to,
    the type's fields, body) then the chunk fields; later ones from, to and the chunk fields with
    chunkPrev, the tag (last 16 bytes, hex) of the envelope that carried the chunk before."""
    count = max(1, -(-len(body) // PIECE))
    base = first if index == 0 else {"from": first["from"], "to": first["to"]}
    header = {**base, "messageId": message_id, "chunkIndex": index, "chunkCount": count, "messageSize": len(body)}
    if prev is not None:
        header["chunkPrev"] = prev
    return binary(header, body[index * PIECE:(index + 1) * PIECE])


def build() -> dict:
    envelopes, messages, invalid = [], [], []
    seq = [0]

    def add(name, etype, flags, plaintext, src=BILLING, dst=REPORTS, sender="billing", **expect):
        seq[0] += 1
        envelopes.append({**sealed(name, etype, flags, seq[0], plaintext, src, dst, sender), **expect})
        return name

    raw = bytes(range(256))[:200] + b"\x00\xff" * 4
    add("binary_bytes", MESSAGE, BINARY, binary({"from": "billing", "to": "reports", "body": "bytes"}, raw),
        layout="binary", value_kind="bytes", value_hex=raw.hex())
    value = {"text": "Grüße", "n": [1, 2.5, None]}
    add("binary_json", MESSAGE, BINARY, binary({"from": "billing", "to": "reports", "body": "json"}, js(value)),
        layout="binary", value_kind="json", value=value)
    add("reliable_v1", MESSAGE, RELIABLE, js({"from": "billing", "to": "reports", "data": {"n": 7},
                                              "messageId": "rel-0001"}), layout="v1", messageId="rel-0001")
    add("reliable_ack", ACK, RELIABLE, js({"from": "reports", "to": "billing", "ackSeq": 3, "messageId": "rel-0001",
                                           "status": "handled"}), src=REPORTS, dst=BILLING, sender="reports",
        layout="v1", messageId="rel-0001", acknowledges=["rel-0001"])
    add("reliable_ack_batch", ACK, RELIABLE,
        js({"from": "reports", "to": "billing", "ackSeq": 3, "messageId": "rel-0001", "status": "handled",
            "acks": [{"ackSeq": 9, "messageId": "rel-0002", "status": "failed", "error": "ValueError: no"}]}),
        src=REPORTS, dst=BILLING, sender="reports", layout="v1", messageId="rel-0001",
        acknowledges=["rel-0001", "rel-0002"])

    def message(name, etype, flags, first, mid, body, order=None, forge=None, **expect):
        """Seal the chunks in chain order (each names the tag of the envelope before); `order`
        lists the chunks in the order a receiver gets them; `forge` changes a chunk's header."""
        names, prev = [], None
        for index in range(max(1, -(-len(body) // PIECE))):
            plaintext = chunk_plaintext(first, mid, body, index, prev)
            if forge and index in forge:
                head, piece = plaintext.split(b"\x00", 1)
                plaintext = binary({**json.loads(head), **forge[index]}, piece)
            names.append(add(f"{name}_{index}", etype, flags, plaintext, layout="chunk"))
            prev = envelopes[-1]["chain"]
        feed = [names[i] for i in (order or range(len(names)))]
        messages.append({"name": name, "envelopes": feed, "messageId": mid, **expect})

    body = bytes((i * 7 + 3) & 0xFF for i in range(200))
    first = {"from": "billing", "to": "reports", "body": "bytes"}
    message("chunked_bytes", MESSAGE, BINARY | CHUNK, first, "msg-0001", body, outcome="delivered",
            value_kind="bytes", size=len(body), chunks=4, value_sha256=hashlib.sha256(body).hexdigest())
    message("chunked_reliable", MESSAGE, BINARY | CHUNK | RELIABLE, first, "rel-0002", body[:130],
            outcome="delivered", value_kind="bytes", size=130, chunks=3,
            value_sha256=hashlib.sha256(body[:130]).hexdigest())
    args = {"blob": "x" * 100, "k": 1}
    request = {"from": "billing", "to": "reports", "requestId": "req-0009", "service": "echo",
               "callerNode": "billing", "timeoutMs": 5000, "body": "json"}
    message("chunked_request", SPC_REQUEST, BINARY | CHUNK, request, "msg-0002", js(args), outcome="delivered",
            value_kind="json", value=args, size=len(js(args)), chunks=2, requestId="req-0009", service="echo")
    message("chunk_missing", MESSAGE, BINARY | CHUNK, first, "msg-0003", body, order=[0, 1, 3],
            outcome="voided", reason="chunk_missing")
    message("chunk_reordered", MESSAGE, BINARY | CHUNK, first, "msg-0004", body, order=[0, 2, 1, 3],
            outcome="voided", reason="chunk_missing")
    message("chunk_duplicated", MESSAGE, BINARY | CHUNK, first, "msg-0005", body, order=[0, 1, 1, 2, 3],
            outcome="voided", reason="chunk_missing")
    message("chunk_chain_forged", MESSAGE, BINARY | CHUNK, first, "msg-0006", body, forge={2: {"chunkPrev": "0" * 32}},
            outcome="voided", reason="chunk_chain")

    for name, etype, flags, plaintext in (
            ("binary_without_separator", MESSAGE, BINARY, js({"from": "billing", "to": "reports", "body": "bytes"})),
            ("chunk_without_binary", MESSAGE, CHUNK, js({"from": "billing", "to": "reports", "data": 1})),
            ("binary_event", 4, BINARY, binary({"from": "billing", "to": "reports", "event": "x"}, b"")),
            ("binary_body_kind", MESSAGE, BINARY, binary({"from": "billing", "to": "reports", "body": "text"}, b"x")),
            ("chunk_index_not_below_count", MESSAGE, BINARY | CHUNK,
             binary({"from": "billing", "to": "reports", "body": "bytes", "messageId": "m", "chunkIndex": 2,
                     "chunkCount": 2, "messageSize": 2}, b"x")),
            ("chunk_prev_on_first", MESSAGE, BINARY | CHUNK,
             binary({"from": "billing", "to": "reports", "body": "bytes", "messageId": "m", "chunkIndex": 0,
                     "chunkCount": 2, "messageSize": 2, "chunkPrev": "0" * 32}, b"x")),
            ("chunk_prev_not_a_tag", MESSAGE, BINARY | CHUNK,
             binary({"from": "billing", "to": "reports", "messageId": "m", "chunkIndex": 1, "chunkCount": 2,
                     "messageSize": 2, "chunkPrev": "0" * 64}, b"x")),
            ("reliable_without_id", MESSAGE, RELIABLE, js({"from": "billing", "to": "reports", "data": 1}))):
        seq[0] += 1
        v = sealed(name, etype, flags, seq[0], plaintext, BILLING, REPORTS, "billing")
        invalid.append({"name": name, "type": etype, "flags": flags, "envelope_hex": v["envelope_hex"],
                        "reason": "bad_payload"})
    # a payload's integer is a number without fraction or exponent; JSON's -0 is the integer 0
    small = body[:50]
    plaintext = chunk_plaintext(first, "msg-0007", small, 0, None).replace(b'"chunkIndex":0,', b'"chunkIndex":-0,', 1)
    messages.append({"name": "minus_zero_is_zero", "envelopes": [add("minus_zero_is_zero_0", MESSAGE, BINARY | CHUNK,
                                                                     plaintext, layout="chunk")],
                     "messageId": "msg-0007", "outcome": "delivered", "value_kind": "bytes", "size": len(small),
                     "chunks": 1, "value_sha256": hashlib.sha256(small).hexdigest(),
                     "handwritten": True})  # no compact JSON writer spells 0 this way: a sender would not
    return {"spec": "SPEED-WIRE-V1 extensions chunks and reliable", "key_file": KEY_FILE, "piece": PIECE,
            "envelopes": envelopes, "messages": messages, "invalid": invalid, "advertisement": advertisement()}


def entry_integer(v):
    """A registry entry's integer (PROTOCOL §9 "Numbers"): a JSON number with an integral value,
    whatever its spelling; beyond a double's range it is missing."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        d = float(v)
    except OverflowError:
        return None
    return int(d) if d == d and abs(d) != float("inf") and d == int(d) else None


def advertisement() -> list:
    """A target's entry -> whether a sender uses chunks towards it, the envelope payload limit and
    the largest message, for a sender whose own limits are OWN_PAYLOAD and OWN_MESSAGE."""
    own_payload, own_message = 1 << 20, 64 << 20
    cases = []
    for name, features, field in (
            ("advertised", '["chunks"]', '{"maxMessage":4194304,"maxEnvelopePayload":65536}'),
            ("integral_spellings", '["chunks"]', '{"maxMessage":4.194304e6,"maxEnvelopePayload":65536.0}'),
            ("larger_than_own", '["chunks"]', '{"maxMessage":1e12,"maxEnvelopePayload":16777216}'),
            ("no_field", '["chunks"]', None),
            ("field_not_object", '["chunks"]', '[4194304,65536]'),
            ("not_numbers", '["chunks"]', '{"maxMessage":"4194304","maxEnvelopePayload":true}'),
            ("zero_and_fraction", '["chunks"]', '{"maxMessage":0,"maxEnvelopePayload":65536.5}'),
            ("beyond_a_double", '["chunks"]', '{"maxMessage":1e400,"maxEnvelopePayload":1' + "0" * 400 + "}"),
            ("not_advertised", '["quota"]', '{"maxMessage":4194304,"maxEnvelopePayload":65536}')):
        entry = ('{"name":"reports","id":"' + REPORTS + '","lastHeartbeat":1700000000.0,"features":' + features
                 + (',"chunks":' + field if field is not None else "") + "}")
        obj = json.loads(entry)
        chunks = obj.get("chunks") if isinstance(obj.get("chunks"), dict) else {}
        theirs, most = (entry_integer(chunks.get(k)) for k in ("maxEnvelopePayload", "maxMessage"))
        theirs = theirs if theirs is not None and theirs >= 1 else 1 << 20
        most = most if most is not None and most >= 1 else own_message
        cases.append({"name": name, "entry": entry, "own_max_payload": own_payload, "own_max_message": own_message,
                      "expect": {"speaks": "chunks" in obj["features"], "envelopeLimit": min(theirs, own_payload),
                                 "maxMessage": min(most, own_message)}})
    return cases


def main() -> int:
    text = json.dumps(build(), indent=1, ensure_ascii=False) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
