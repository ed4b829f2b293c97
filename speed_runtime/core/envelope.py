"""Envelope codec (wire contract §5). Pure: bytes in, bytes or EnvelopeError out.

Check order is part of the contract as built (docs/PROTOCOL.md): size limit, size, version,
header length, tag, type. Anything authenticated by the tag is judged only after the tag passes,
so a tampered header reads as `bad_tag` unless it breaks the framing first.
"""
from __future__ import annotations

import enum
import re
import struct
from typing import NamedTuple

from . import accel, aead
from .errors import EnvelopeError
from .keys import Key

VERSION = 1
HEADER_SIZE = 64
NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = HEADER_SIZE + NONCE_SIZE + TAG_SIZE
DEFAULT_MAX_PAYLOAD = 1 << 20
# The header's flag bits, the one table of them (§5: bit 0 is v1's "ACK requested"; §9: each other
# bit belongs to one extension, docs/PROTOCOL.md "Flag bits"). Every module that tests a bit
# imports it from here.
FLAG_ACK_REQUESTED = 0x0001   # v1: the receiver answers ACK (or ERROR) once its handler ran
FLAG_BINARY = 0x0002          # chunks: the payload is a JSON header, a NUL byte, then raw bytes
FLAG_CHUNK = 0x0004           # chunks: this envelope is one chunk of a larger message
FLAG_RELIABLE = 0x0008        # reliable: the receiver acknowledges; the sender retransmits
FLAG_DURABLE = 0x0010         # durable: written durably, removed only after it was handled, receipted
FLAG_QUOTA = 0x0020           # quota: reserved for the quota extension
FLAG_CONTROL = 0x0040         # control: a signed operator request in the target's control/ directory
FLAGS = {FLAG_BINARY: "chunks", FLAG_CHUNK: "chunks", FLAG_RELIABLE: "reliable", FLAG_DURABLE: "durable",
         FLAG_QUOTA: "quota", FLAG_CONTROL: "control"}   # an extension's bit -> the feature it belongs to

_HEADER = struct.Struct(">BBHIQQQ16s16s")
assert _HEADER.size == HEADER_SIZE
_U64_MAX = (1 << 64) - 1


class EnvelopeType(enum.IntEnum):
    MESSAGE = 1
    SPC_REQUEST = 2
    SPC_RESPONSE = 3
    EVENT = 4
    DISCOVERY = 5
    HEARTBEAT = 6
    ERROR = 7
    ACK = 8


_TYPE_NAMES = {t.value: t.name for t in EnvelopeType}


def type_name(value: int) -> str:
    return _TYPE_NAMES.get(value) or f"UNKNOWN_{value}"


class Header(NamedTuple):
    """The 64 header bytes as fields (a tuple: cheap to build on every send)."""

    type: int
    sequence: int
    timestamp_ms: int
    payload_size: int
    source_id: bytes
    target_id: bytes
    flags: int = 0
    version: int = VERSION
    header_length: int = HEADER_SIZE

    def encode(self) -> bytes:
        if len(self.source_id) != 16 or len(self.target_id) != 16:
            raise ValueError("node IDs are 16 raw bytes")
        return _HEADER.pack(
            self.version, self.type, self.flags, self.header_length, self.sequence,
            self.timestamp_ms, self.payload_size, self.source_id, self.target_id,
        )

    @property
    def ack_requested(self) -> bool:
        return bool(self.flags & FLAG_ACK_REQUESTED)


def decode_header(data: bytes) -> Header:
    """Decode the 64 header bytes without judging them."""
    if len(data) < HEADER_SIZE:
        raise EnvelopeError("bad_size", f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    version, etype, flags, hlen, seq, ts, psize, src, dst = _HEADER.unpack_from(data, 0)
    return Header(etype, seq, ts, psize, src, dst, flags, version, hlen)


class OpenedEnvelope(NamedTuple):
    header: Header
    nonce: bytes
    payload: bytes  # plaintext: handle with care, never log


def seal(header: Header, payload: bytes, key: Key, nonce: bytes) -> bytes:
    """Seal `payload` under `header` (payload_size is taken from the payload)."""
    if len(nonce) != NONCE_SIZE:
        raise ValueError("the nonce is 12 bytes")
    if header.payload_size != len(payload):
        header = header._replace(payload_size=len(payload))
    ad = header.encode()
    sealed = aead.encrypt(payload, ad, nonce, key.raw)
    return b"".join((ad, nonce, sealed))


def check_framing(data_len: int, header: Header, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
    """Framing checks that need no key, in the contract's order (§5.5 step 3: size, version,
    header length), the size limit first of all because it decides how much is read."""
    if header.payload_size > max_payload:
        raise EnvelopeError("too_large", f"payload of {header.payload_size} bytes exceeds the limit of {max_payload}")
    if data_len != OVERHEAD + header.payload_size:
        raise EnvelopeError("bad_size", f"file of {data_len} bytes does not match a payload of {header.payload_size}")
    if header.version != VERSION:
        raise EnvelopeError("bad_version", f"version {header.version}, expected {VERSION}")
    if header.header_length != HEADER_SIZE:
        raise EnvelopeError("bad_version", f"header length {header.header_length}, expected {HEADER_SIZE}")


def open_envelope(data: bytes, key: Key, max_payload: int = DEFAULT_MAX_PAYLOAD) -> OpenedEnvelope:
    """Judge and decrypt one envelope file's bytes."""
    if len(data) < OVERHEAD:
        raise EnvelopeError("bad_size", f"{len(data)} bytes is shorter than the {OVERHEAD}-byte minimum")
    if len(data) > OVERHEAD + max_payload:
        raise EnvelopeError("too_large", f"{len(data)} bytes exceeds the envelope size limit")
    header = decode_header(data)
    check_framing(len(data), header, max_payload)
    ad = bytes(data[:HEADER_SIZE])
    nonce = bytes(data[HEADER_SIZE:HEADER_SIZE + NONCE_SIZE])
    payload = aead.decrypt(bytes(data[HEADER_SIZE + NONCE_SIZE:]), ad, nonce, key.raw)
    if payload is None:
        raise EnvelopeError("bad_tag", "authentication failed: wrong key or tampered envelope")
    if header.type not in _TYPE_NAMES:
        raise EnvelopeError("bad_payload", f"unknown envelope type {header.type}")
    return OpenedEnvelope(header, nonce, payload)


_FILENAME = re.compile(
    r"(?P<sender>[A-Za-z0-9_][A-Za-z0-9_-]{0,63})\.(?P<id8>[0-9a-fA-F]{8})\.(?P<seq>[0-9]{20})"
    r"\.(?P<nonce8>[0-9a-fA-F]{8})\.env"
)


def envelope_filename(sender: str, source_id: bytes, sequence: int, nonce: bytes) -> str:
    return f"{sender}.{source_id.hex()[:8]}.{sequence:020d}.{nonce.hex()[:8]}.env"


class FileName(NamedTuple):  # a tuple: made for every file name the receiver meets, cheaply
    sender: str
    id8: str
    sequence: int
    nonce8: str


def parse_filename(name: str) -> FileName | None:
    """The parts of an inbox file name, or None if it is not an envelope name."""
    match = _FILENAME.fullmatch(name)
    if match is None:
        return None
    seq = int(match["seq"])
    if seq > _U64_MAX:
        return None
    return FileName(match["sender"], match["id8"].lower(), seq, match["nonce8"].lower())


# The compiled form (core/accel.py) takes over these three: the same results and errors, faster.
# The pure functions stay as the reference and handle what the compiled fast path hands back.
pure_parse_filename, pure_seal, pure_open_envelope = parse_filename, seal, open_envelope
if accel.compiled is not None:
    for _name, _value in (("Header", Header), ("FileName", FileName), ("OpenedEnvelope", OpenedEnvelope),
                          ("EnvelopeError", EnvelopeError), ("parse_filename", parse_filename), ("seal", seal),
                          ("open_envelope", open_envelope)):
        accel.compiled.bind(_name, _value)
    parse_filename, seal, open_envelope = (accel.compiled.parse_filename, accel.compiled.seal,
                                           accel.compiled.open_envelope)
