"""The console's thin adapter to ``speed_runtime``: the shapes the views want (a key with its path,
a decoded envelope for the inspector), built from the runtime's own key reader, codec, registry
and transport. One implementation of the contract, the runtime's; nothing here touches widgets."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speed_runtime import keyfile, transport
from speed_runtime.core.envelope import (HEADER_SIZE, NONCE_SIZE, OVERHEAD, Header, check_framing, decode_header,
                                    envelope_filename as _filename, open_envelope, seal, type_name)
from speed_runtime.core.errors import EnvelopeError, SpeedError
from speed_runtime.core.errors import BadEntryError
from speed_runtime.registry import Registry


class KeyProblem(Exception):
    """A key file that cannot be used; the message is one sentence, never key material."""


@dataclass(frozen=True)
class KeyInfo:
    path: Path
    secret: bytes
    fingerprint: str
    runtime_key: keyfile.Key | None = None

    def __repr__(self) -> str:  # never show the key
        return f"KeyInfo(path={str(self.path)!r}, fingerprint={self.fingerprint!r})"

    __str__ = __repr__


def load_key(path: Path | str, allow_insecure: bool = False) -> KeyInfo:
    path = Path(path)
    try:
        key = keyfile.load_key(str(path), allow_insecure=allow_insecure)
    except SpeedError as exc:  # the runtime's message is one sentence without key material
        raise KeyProblem(str(exc).replace("`speed keygen", "`speedtui keygen")) from None
    return KeyInfo(path=path, secret=key.raw, fingerprint=key.fingerprint, runtime_key=key)


def generate_key_file(path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        keyfile.generate_key_file(str(path))
    except SpeedError as exc:
        raise KeyProblem(str(exc).replace("pass --force", "choose another path")) from None
    return path


# --------------------------------------------------------------------------- envelopes

@dataclass(frozen=True)
class EnvelopeHeader:
    version: int
    type: int
    flags: int
    header_length: int
    seq: int
    timestamp_ms: int
    payload_size: int
    source_id: str
    target_id: str
    nonce: bytes

    @property
    def type_name(self) -> str:
        return type_name(self.type)


@dataclass(frozen=True)
class DecodedEnvelope:
    data: bytes
    header: EnvelopeHeader | None
    payload: Any  # parsed JSON, or None
    payload_text: str | None
    tag_ok: bool
    problem: str | None  # why the envelope could not be read/decrypted


BAD_TAG = "authentication tag does not verify with this console's key"


def decode_envelope(data: bytes, secret: bytes | None) -> DecodedEnvelope:
    """What the inspector shows: the header even when the tag fails, the payload only when it passes."""
    if len(data) < OVERHEAD:
        return DecodedEnvelope(data, None, None, None, False, f"too short ({len(data)} bytes, bad_size)")
    h = decode_header(data)
    hdr = EnvelopeHeader(h.version, h.type, h.flags, h.header_length, h.sequence, h.timestamp_ms, h.payload_size,
                         str(uuid.UUID(bytes=h.source_id)), str(uuid.UUID(bytes=h.target_id)),
                         bytes(data[HEADER_SIZE:HEADER_SIZE + NONCE_SIZE]))
    try:
        check_framing(len(data), h, max(h.payload_size, 0))
    except EnvelopeError as exc:
        return DecodedEnvelope(data, hdr, None, None, False, f"{exc.detail} ({exc.reason})")
    if secret is None:
        return DecodedEnvelope(data, hdr, None, None, False, "no key")
    try:
        plain = open_envelope(data, keyfile.Key(secret), max_payload=h.payload_size).payload
    except EnvelopeError as exc:
        problem = BAD_TAG if exc.reason == "bad_tag" else f"{exc.detail} ({exc.reason})"
        return DecodedEnvelope(data, hdr, None, None, exc.reason != "bad_tag", problem)
    text = plain.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    return DecodedEnvelope(data, hdr, payload, text, True, None)


def key_verifies(data: bytes, secret: bytes) -> bool | None:
    """Does ``secret`` open this envelope?  None when the envelope is malformed (it cannot tell)."""
    dec = decode_envelope(data, secret)
    if dec.problem is None:
        return True
    return False if dec.problem == BAD_TAG else None


def seal_envelope(secret: bytes, etype: int, seq: int, ts_ms: int, source_id: str, target_id: str,
                  payload: bytes, nonce: bytes | None = None, flags: int = 0) -> bytes:
    """Seal per §5 (the deterministic fixture and tests; nodes seal their own)."""
    import os

    header = Header(etype, seq, ts_ms, len(payload), uuid.UUID(source_id).bytes, uuid.UUID(target_id).bytes, flags)
    return seal(header, payload, keyfile.Key(secret), nonce if nonce is not None else os.urandom(NONCE_SIZE))


def envelope_filename(sender: str, sender_id: str, seq: int, nonce: bytes) -> str:
    return _filename(sender, uuid.UUID(sender_id).bytes, seq, nonce)


def hexdump(data: bytes, width: int = 16, limit: int = 4096) -> str:
    lines = []
    for off in range(0, min(len(data), limit), width):
        chunk = data[off:off + width]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexpart:<{width * 3}} {text}")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit} more bytes")
    return "\n".join(lines)


def inject(root: Path, target: str, filename: str, data: bytes) -> Path:
    """Put exact sealed bytes into ``target``'s inbox (tmp + no-replace move, §5.4)."""
    transport.inject(str(root), target, filename, data)
    return Path(root) / target / "inbox" / filename


def read_allow(root: Path, name: str) -> list[str] | None:
    """The `allow` list `name` publishes now, or None without a readable entry."""
    try:
        entry = Registry(str(root), create=False).read(name)
    except (BadEntryError, SpeedError):
        return None
    return None if entry is None else list(entry.allow)
