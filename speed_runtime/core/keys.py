"""The pre-shared key (wire contract §3): its text form and its fingerprint. Pure: no I/O;
`speed_runtime.keyfile` reads and writes key files. Nothing here ever shows key material."""
from __future__ import annotations

import base64
import binascii
import hashlib
import secrets

from .errors import KeyFileError

KEY_HEADER = "SPEED-KEY-V1"
KEY_SIZE = 32
MAX_KEY_FILE_BYTES = 4096


class Key:
    """A 32-byte pre-shared key. Its text forms show only a fingerprint."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes):
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_SIZE:
            raise KeyFileError(f"a SPEED key must be exactly {KEY_SIZE} bytes")
        self._raw = bytes(raw)

    @property
    def raw(self) -> bytes:
        return self._raw

    @property
    def fingerprint(self) -> str:
        """First 16 hex digits of SHA-256 over a domain tag and the key: safe to show."""
        return hashlib.sha256(b"SPEED-KEY-FINGERPRINT\x00" + self._raw).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Key(fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and secrets.compare_digest(self._raw, other._raw)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __reduce__(self):  # never pickle key material by accident
        raise TypeError("a Key cannot be pickled")


def parse_key_text(text: bytes) -> Key:
    """Parse key-file bytes. Pure: no I/O."""
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError("the key file is not a SPEED key file: it contains non-ASCII bytes") from None
    lines = [line.strip("\r") for line in decoded.split("\n")]
    content = [line for line in lines if line.strip() != ""]
    if not content:
        raise KeyFileError("the key file is empty; create one with `speed keygen PATH`")
    if content[0] != KEY_HEADER:
        raise KeyFileError(f"the key file does not start with the line {KEY_HEADER!r}; create one with `speed keygen PATH`")
    if len(content) != 2:
        raise KeyFileError(f"the key file must hold exactly two lines, {KEY_HEADER!r} and the base64 key")
    try:
        raw = base64.b64decode(content[1].strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError("the key line of the key file is not valid standard base64") from None
    if len(raw) != KEY_SIZE:
        raise KeyFileError(f"the key file holds {len(raw)} bytes of key; a SPEED key is exactly {KEY_SIZE} bytes")
    return Key(raw)


def format_key_text(key: Key) -> bytes:
    return f"{KEY_HEADER}\n{base64.b64encode(key.raw).decode('ascii')}\n".encode("ascii")
