"""The `chunks` extension of the wire contract (§9; docs/PROTOCOL.md "### chunks"). Pure.

Two payload layouts, each selected by a flag bit of the header:

- **binary** (`FLAG_BINARY`): the plaintext is a UTF-8 JSON object (the *header*: `from`, `to` and
  the type's fields), one 0x00 byte, then the *body* as raw bytes. `"body": "bytes"` means the body
  is the value itself (raw bytes); `"body": "json"` means it is the UTF-8 JSON text of the value. A
  large value is neither base64-encoded nor escaped into a JSON string.
- **chunk** (`FLAG_CHUNK`, always with `FLAG_BINARY`): one envelope carries one piece of a larger
  body. Its header names the message (`messageId`), the piece (`chunkIndex` of `chunkCount`), the
  whole body's size (`messageSize`) and, from the second piece on, the authentication tag of the
  envelope before it (`chunkPrev`, the last 16 bytes of that file): the tag authenticates that
  envelope's header (sequence number, nonce) and ciphertext, so the pieces form a chain without a
  second pass over the bytes, and a missing, reordered, duplicated or foreign piece voids the
  message; it is never delivered corrupt. The first piece's header also carries the type's fields
  (`body`, `requestId`, `service`, …).

`Reassembly` is the receiver's state machine: at most one message in progress per sender
instance, memory reserved for each message's declared size against a per-sender and a total
budget, and expiry of messages whose next piece does not come.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

from .entry import entry_integer, json_loads
from .envelope import FLAG_BINARY, FLAG_CHUNK, EnvelopeType
from .errors import EnvelopeError
from .payloads import decode_payload, decoded_cost, encode_payload

SEPARATOR = b"\x00"
MAX_HEADER = 65_536        # a binary header longer than this is bad_payload (found without scanning further)
MAX_CHUNKS = 65_536
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
V1_ENVELOPE_LIMIT = 1 << 20  # what a peer that advertises no limit accepts (contract §5: 1 MiB)
MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHAIN = re.compile(r"[0-9a-f]{32}")
TAG_SIZE = 16
# what a logical message's value is called in each type that may carry one
VALUE_FIELD = {EnvelopeType.MESSAGE: "data", EnvelopeType.SPC_REQUEST: "arguments",
               EnvelopeType.SPC_RESPONSE: "result"}
BYTES_LIKE = (bytes, bytearray, memoryview)
# reasons a receiver journals (records.EXTENSION_REASONS["chunks"])
REASONS = ("chunk_missing", "chunk_chain", "chunk_invalid", "chunk_expired", "message_too_large",
           "reassembly_full")


def chain_value(envelope: bytes | memoryview) -> str:
    """What the next chunk's `chunkPrev` names: this sealed envelope's authentication tag (its last
    16 bytes), lowercase hex."""
    return bytes(envelope[-TAG_SIZE:]).hex()


# ---------------------------------------------------------------------------------- encoding
def encode_body(value: Any) -> tuple[bytes | memoryview, str]:
    """A value as a body: (bytes, "bytes") for raw bytes, (UTF-8 JSON text, "json") otherwise."""
    if isinstance(value, BYTES_LIKE):
        return (value if isinstance(value, bytes) else memoryview(value).cast("B")), "bytes"
    return encode_payload(value), "json"


def binary_plaintext(header: dict[str, Any], body: bytes | memoryview) -> bytes:
    return b"".join((encode_payload(header), SEPARATOR, body))


class Piece(NamedTuple):
    """A decoded chunk's bytes of the body: `data`, which is `source[start:]` (the plaintext it
    came from, which payloads.json_structure counts without a copy)."""

    data: memoryview
    source: bytes = b""
    start: int = 0


def value_size(value: Any) -> int:
    """The bytes of a value, as message records count them: raw bytes' length, or the length of
    the compact UTF-8 JSON text of a JSON value (the body it has in the binary layout)."""
    return len(value) if isinstance(value, BYTES_LIKE) else len(encode_payload(value))


def target_limits(advertised: Any, own_payload: int, own_max_message: int) -> tuple[int, int]:
    """(the envelope payload limit towards a target, the largest message both accept), from the
    target's `chunks` field: a value that is not an integer of at least 1 by the entry's rule
    (`65536.0` is one), or a field that is not an object, is as if missing."""
    fields = advertised if isinstance(advertised, dict) else {}
    theirs, most = (entry_integer(fields.get(name)) for name in ("maxEnvelopePayload", "maxMessage"))
    theirs = theirs if theirs is not None and theirs >= 1 else V1_ENVELOPE_LIMIT
    most = most if most is not None and most >= 1 else own_max_message
    return min(theirs, own_payload), min(most, own_max_message)


def decode(plaintext: bytes, etype: int, flags: int) -> tuple[dict[str, Any], Piece | None]:
    """Judge and decode a payload in either layout; anything wrong raises EnvelopeError('bad_payload').
    v1 layout: (payload, None). Binary: the payload with its value in place (bytes or the decoded
    JSON), None. Chunk: the chunk's header, and its Piece."""
    payload, piece, _ = decode_with_cost(plaintext, etype, flags)
    return payload, piece


def decode_with_cost(plaintext: bytes, etype: int, flags: int) -> tuple[dict[str, Any], Piece | None, int]:
    """`decode`, and what the decoded payload costs in memory (payloads.decoded_cost; a chunk's
    piece is counted by the reassembly that keeps it, so a chunk costs its header only)."""
    if not flags & FLAG_BINARY:
        if flags & FLAG_CHUNK:
            raise EnvelopeError("bad_payload", "a chunk must use the binary layout (flag 0x0002)")
        return decode_payload(plaintext, etype), None, decoded_cost(plaintext)
    if etype not in VALUE_FIELD:
        raise EnvelopeError("bad_payload", f"a {EnvelopeType(etype).name} cannot use the binary layout")
    end = plaintext.find(SEPARATOR, 0, MAX_HEADER + 1)
    if end < 0:
        raise EnvelopeError("bad_payload", "a binary payload needs a JSON header ended by a 0x00 byte")
    view = memoryview(plaintext)
    header = _header(view[:end])
    head_cost = decoded_cost(plaintext[:end])
    body = view[end + 1:]
    if flags & FLAG_CHUNK:
        check_chunk_header(header, etype)
        return header, Piece(body, plaintext, end + 1), head_cost
    check_first_fields(header, etype)
    kind = header["body"]
    header[VALUE_FIELD[etype]] = decode_value(kind, body)
    return header, None, head_cost + (len(body) if kind == "bytes" else decoded_cost(plaintext, end + 1))


def _header(text: memoryview) -> dict[str, Any]:
    try:
        obj = json_loads(text.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise EnvelopeError("bad_payload", "the binary header is not UTF-8 JSON") from None
    if not isinstance(obj, dict):
        raise EnvelopeError("bad_payload", "the binary header is not a JSON object")
    for field in ("from", "to"):
        if not isinstance(obj.get(field), str):
            raise EnvelopeError("bad_payload", f"the binary header lacks a string {field!r}")
    return obj


def decode_value(kind: str, body: bytes | memoryview) -> Any:
    if kind == "bytes":
        return bytes(body)
    try:
        text = str(body, "utf-8")
    except UnicodeDecodeError:
        raise EnvelopeError("bad_payload", "the body is not UTF-8 JSON") from None
    return decode_json(text)


def decode_json(text: str) -> Any:
    """A body's JSON text (already a str: its bytes may be given back before the value is built);
    EnvelopeError('bad_payload') when it is not JSON. A MemoryError is this node's, and passes."""
    try:
        return json_loads(text)
    except (ValueError, RecursionError):
        raise EnvelopeError("bad_payload", "the body is not UTF-8 JSON") from None


def _uint(obj: dict, field: str, most: int) -> int:
    value = obj.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise EnvelopeError("bad_payload", f"{field!r} must be an integer from 0 to {most}")
    return value


def check_first_fields(header: dict[str, Any], etype: int) -> None:
    """The type's fields, on a binary envelope or on the first chunk (where `body` says what the
    body is)."""
    kinds = ("json",) if etype == EnvelopeType.SPC_REQUEST else ("bytes", "json")
    if header.get("body") not in kinds:
        raise EnvelopeError("bad_payload", f"'body' must be one of {', '.join(kinds)}")
    if etype == EnvelopeType.SPC_REQUEST:
        for field in ("requestId", "service", "callerNode"):
            if not isinstance(header.get(field), str):
                raise EnvelopeError("bad_payload", f"a SPC_REQUEST needs {field!r}")
        if header["callerNode"] != header["from"]:
            raise EnvelopeError("bad_payload", "callerNode differs from the sender")
    elif etype == EnvelopeType.SPC_RESPONSE:
        if not isinstance(header.get("requestId"), str) or header.get("status") != "SUCCESS":
            raise EnvelopeError("bad_payload", "a binary SPC_RESPONSE needs 'requestId' and status SUCCESS")


def check_chunk_header(header: dict[str, Any], etype: int) -> None:
    if not isinstance(header.get("messageId"), str) or not MESSAGE_ID.fullmatch(header["messageId"]):
        raise EnvelopeError("bad_payload", "'messageId' must be 1 to 64 letters, digits, '_' or '-'")
    count = _uint(header, "chunkCount", MAX_CHUNKS)
    index = _uint(header, "chunkIndex", MAX_CHUNKS - 1)
    _uint(header, "messageSize", 2**53)
    if not index < count:
        raise EnvelopeError("bad_payload", "'chunkIndex' must be below 'chunkCount'")
    prev = header.get("chunkPrev")
    if index == 0:
        if "chunkPrev" in header:  # present at all, null included (the text: "a chunkPrev on the first chunk")
            raise EnvelopeError("bad_payload", "the first chunk has no 'chunkPrev'")
        check_first_fields(header, etype)
    elif not isinstance(prev, str) or not CHAIN.fullmatch(prev):
        raise EnvelopeError("bad_payload", "'chunkPrev' must be 32 lowercase hex digits")


# ---------------------------------------------------------------------------------- splitting
class Plan(NamedTuple):
    piece: int     # bytes of the body per chunk (the last one may be shorter)
    count: int


def plan(size: int, limit: int, header_room: int, chunk_size: int) -> Plan:
    """How to cut a body of `size` bytes into pieces so that each chunk's plaintext (header of at
    most `header_room` bytes, the separator, the piece) stays within `limit` bytes."""
    piece = min(chunk_size, limit - header_room - 1)
    if piece < 1:
        raise ValueError("the envelope limit leaves no room for a chunk's piece")
    return Plan(piece, max(1, -(-size // piece)))


def chunk_header(first: dict[str, Any], message_id: str, index: int, count: int, size: int,
                 prev: str | None) -> dict[str, Any]:
    """The header of chunk `index`: `first` is the first chunk's header without the chunk fields
    (`from`, `to` and the type's fields); later chunks keep only `from` and `to`."""
    base = first if index == 0 else {"from": first["from"], "to": first["to"]}
    header = {**base, "messageId": message_id, "chunkIndex": index, "chunkCount": count, "messageSize": size}
    if prev is not None:
        header["chunkPrev"] = prev
    return header


def header_room(first: dict[str, Any], message_id: str, count_bound: int, size: int) -> int:
    """The longest chunk header of a message (the first, or a later one with the largest index)."""
    prev = "0" * (2 * TAG_SIZE)
    return max(len(encode_payload(chunk_header(first, message_id, 0, count_bound, size, None))),
               len(encode_payload(chunk_header(first, message_id, count_bound - 1, count_bound, size, prev))))


class Chunker:
    """Cuts `body` into the chunks of one message. Chunk `index`'s plaintext needs the chain value
    of the envelope that carried chunk `index - 1` (its tag), so chunks are built one at a time,
    each after the one before was sealed: `plaintext(index, prev)`."""

    def __init__(self, first: dict[str, Any], message_id: str, body: bytes | memoryview, limit: int,
                 chunk_size: int):
        self.first, self.message_id = first, message_id
        self.view = memoryview(body).cast("B") if not isinstance(body, bytes) else memoryview(body)
        self.size = len(self.view)
        self.piece, self.count = plan(self.size, limit, header_room(first, message_id, MAX_CHUNKS, self.size),
                                      chunk_size)
        if self.count > MAX_CHUNKS:
            raise ValueError(f"{self.size} bytes would need {self.count} chunks; at most {MAX_CHUNKS} are allowed")

    def plaintext(self, index: int, prev: str | None) -> bytes:
        header = chunk_header(self.first, self.message_id, index, self.count, self.size, prev)
        return binary_plaintext(header, self.view[index * self.piece:(index + 1) * self.piece])
