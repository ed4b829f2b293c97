"""JSON payloads of every envelope type (wire contract §5.2). Pure."""
from __future__ import annotations

import base64
import json
import re
from json.encoder import c_make_encoder, encode_basestring
from typing import Any

from . import accel
from .entry import long_int
from .envelope import EnvelopeType
from .errors import SPC_ERROR_CODES, EnvelopeError

_REQUIRED: dict[int, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    EnvelopeType.MESSAGE: (("data", object),),
    EnvelopeType.SPC_REQUEST: (("requestId", str), ("service", str), ("arguments", object), ("callerNode", str)),
    EnvelopeType.SPC_RESPONSE: (("requestId", str), ("status", str)),
    EnvelopeType.EVENT: (("event", str),),
    EnvelopeType.HEARTBEAT: (("reply", bool),),
    EnvelopeType.ERROR: (("errorCode", str), ("errorMessage", str)),
    EnvelopeType.ACK: (("ackSeq", int),),
    EnvelopeType.DISCOVERY: (),
}


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)  # one, not one per call
_SCAN = json.JSONDecoder().scan_once
_SCAN_LONG = json.JSONDecoder(parse_int=long_int).scan_once  # … where an integer is too long for int()
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json.decoder skips it


def encode_payload(payload: dict[str, Any]) -> bytes:
    """`_ENCODER.encode(payload)`, less the three Python-level calls around the C encoder it builds
    (every envelope is encoded once; a fresh `markers` dict keeps the circular-reference check)."""
    if c_make_encoder is None:
        return _ENCODER.encode(payload).encode("utf-8")
    encode = c_make_encoder({}, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False)
    return "".join(encode(payload, 0)).encode("utf-8")


def _loads(text: str) -> Any:
    """json.loads(text), straight to its scanner (json.loads is three Python calls around it)."""
    start = _SPACE.match(text, 0).end()
    try:
        try:
            value, end = _SCAN(text, start)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer beyond int()'s limit of digits: ±infinity, as 1e400 (entry.long_int)
            value, end = _SCAN_LONG(text, start)
    except StopIteration:
        raise ValueError("no JSON value") from None
    if _SPACE.match(text, end).end() != len(text):
        raise ValueError("extra data after the JSON value")
    return value


# ---------------------------------------------------------------------------------- memory
# What a JSON text costs once decoded by this runtime (CPython's json, 64-bit), as an upper bound
# that needs no decoding: C-level counts of the structural characters, each weighted by the most
# that one occurrence can add (an object, a slot in its container, a number after a separator),
# and the text's width (1, 2 or 4 bytes per character of a str). Checked against the resident
# memory of real decodings in tests/runtime/test_payload_cost.py; docs/PROTOCOL.md (reading 24)
# states the formula.
QUOTE_BASE, QUOTE_PER_WIDTH = 32, 8   # per '"': half a str object's header
JSON_OVERHEAD = 128            # the top-level value
WORST_PER_BYTE = 209           # json_cost can never exceed this per byte (width 4, every byte a "{")
SMALL_TEXT = 1024              # texts up to this size are charged the worst case, uncounted (cheaper)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'{}[],:"')
_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")  # UTF-8 of the characters beyond U+FFFF


def json_structure(text: bytes | bytearray) -> tuple[int, int]:
    """(weighted structural characters, quotes) of `text`: additive over the pieces of a text (a
    "{}" cut in two counts as a non-empty object, which only overestimates). One pass keeps the
    structural characters (bytes.translate), the counts run over those alone."""
    marks = text.translate(None, _NOT_STRUCTURE)
    dicts = marks.count(b"{")  # a dict; one with a key (its '"' kept) with its first key table
    weight = 80 * dicts + 120 * (dicts - marks.count(b"{}"))
    # a list, with its first slots (every one: its values may be all digits, which are not kept)
    weight += 120 * marks.count(b"[")
    # a list slot or a dict entry, each with room for a number object after it
    weight += 48 * marks.count(b",") + 96 * marks.count(b":")
    return weight, marks.count(b'"')


def json_width(text: bytes | bytearray) -> int:
    """Bytes per character of the widest str its decoding can make: 1 (ASCII, no \\u escape),
    4 (a character beyond U+FFFF, raw or as an escaped surrogate), else 2. Single-byte searches
    (memchr) first: the costly two-byte ones only for a text with a backslash."""
    escaped = b"\\" in text
    if text.isascii():
        if not escaped or b"\\u" not in text:
            return 1
    elif any(lead in text for lead in _ASTRAL_LEADS):
        return 4
    return 4 if escaped and (b"\\ud" in text or b"\\uD" in text) else 2


def json_cost(size: int, structure: tuple[int, int], width: int) -> int:
    """The most memory decoding a JSON text of `size` bytes takes, and its value holds at most: the
    bytes, the text as a str (`width`·size) and the value (`width`·size of characters and digits
    plus the weighted structure), counted as if all three lived at once (what is freed first may
    stay resident: an allocator keeps freed blocks for later)."""
    weight, quotes = structure
    value = width * size + weight + (QUOTE_BASE + QUOTE_PER_WIDTH * width) * quotes + JSON_OVERHEAD
    return (1 + width) * size + value


def decoded_cost(text: bytes | bytearray, start: int = 0) -> int:
    """json_cost of the JSON text text[start:], its structure and width judged on the whole of
    `text` (what comes before `start`, a header, can only add to it); for a small text its worst
    case, which costs no pass over it (a small payload's bound then stays below what the
    read-ahead's count bounds allow anyway)."""
    size = len(text) - start
    if size <= SMALL_TEXT:
        return WORST_PER_BYTE * size + JSON_OVERHEAD
    return json_cost(size, json_structure(text), json_width(text))


def decode_payload(data: bytes, etype: int) -> dict[str, Any]:
    """Parse and validate a payload; anything wrong raises EnvelopeError('bad_payload')."""
    try:
        obj = _loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise EnvelopeError("bad_payload", "the payload is not UTF-8 JSON") from None
    if not isinstance(obj, dict):
        raise EnvelopeError("bad_payload", "the payload is not a JSON object")
    for field in ("from", "to"):
        if not isinstance(obj.get(field), str):
            raise EnvelopeError("bad_payload", f"the payload lacks a string {field!r}")
    for field, kind in _REQUIRED.get(etype, ()):
        if field not in obj or (kind is not object and not _is(obj[field], kind)):
            raise EnvelopeError("bad_payload", f"a {EnvelopeType(etype).name} payload needs {field!r}")
    if etype == EnvelopeType.SPC_RESPONSE:
        status = obj["status"]
        if status == "ERROR":
            if obj.get("errorCode") not in SPC_ERROR_CODES or not isinstance(obj.get("errorMessage", ""), str):
                raise EnvelopeError("bad_payload", "an ERROR response needs a standard errorCode")
        elif status != "SUCCESS" or "result" not in obj:
            raise EnvelopeError("bad_payload", "a response is SUCCESS with a result or ERROR with a code")
    if etype == EnvelopeType.SPC_REQUEST and obj["callerNode"] != obj["from"]:
        raise EnvelopeError("bad_payload", "callerNode differs from the sender")
    return obj


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return isinstance(value, kind)


# The compiled form (core/accel.py) reads and writes the common JSON in C and checks the fields
# there: the same bytes, objects and errors. The pure functions stay as the reference and handle
# what it hands back (other types, errors: json's own behaviour).
pure_encode_payload, pure_decode_payload = encode_payload, decode_payload
if accel.compiled is not None:
    for _name, _value in (("SPC_ERROR_CODES", SPC_ERROR_CODES), ("EnvelopeError", EnvelopeError),
                          ("decode_payload", decode_payload), ("encode_payload", encode_payload)):
        accel.compiled.bind(_name, _value)
    encode_payload, decode_payload = accel.compiled.encode_payload, accel.compiled.decode_payload


def message(sender: str, target: str, data: Any) -> dict[str, Any]:
    return v1_form({"from": sender, "to": target, "data": data})


def v1_form(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload as v1 carries it: raw bytes in `data` as base64 with `"encoding": "base64"`."""
    data = payload.get("data")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return {**payload, "data": base64.b64encode(data).decode("ascii"), "encoding": "base64"}
    return payload


def spc_request(sender: str, target: str, request_id: str, service: str, arguments: Any,
                timeout_ms: int | None) -> dict[str, Any]:
    payload = {"from": sender, "to": target, "requestId": request_id, "service": service,
               "arguments": arguments, "callerNode": sender}
    if timeout_ms is not None:
        payload["timeoutMs"] = timeout_ms
    return payload


def spc_success(sender: str, target: str, request_id: str, result: Any) -> dict[str, Any]:
    return {"from": sender, "to": target, "requestId": request_id, "status": "SUCCESS", "result": result}


def spc_failure(sender: str, target: str, request_id: str, code: str, text: str) -> dict[str, Any]:
    return {"from": sender, "to": target, "requestId": request_id, "status": "ERROR",
            "errorCode": code, "errorMessage": text}


def ack(sender: str, target: str, seq: int) -> dict[str, Any]:
    return {"from": sender, "to": target, "ackSeq": seq}


def event(sender: str, target: str, name: str) -> dict[str, Any]:
    return {"from": sender, "to": target, "event": name}


def heartbeat(sender: str, target: str, reply: bool) -> dict[str, Any]:
    return {"from": sender, "to": target, "reply": reply}
