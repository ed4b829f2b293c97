"""Adapter between the console and ``speed_runtime``.

The console prefers the runtime's own functions; where the runtime is not importable (or a
function is missing) it falls back to a small implementation of the wire contract
(SPEED-WIRE-V1 §3, §5), so that read-only views keep working.  Nothing here touches widgets.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import stat
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # pragma: no cover - depends on what has landed
    import speed_runtime as _rt
except Exception:  # noqa: BLE001
    _rt = None

KEY_MAGIC = "SPEED-KEY-V1"
HEADER = struct.Struct(">BBHIQQQ16s16s")
HEADER_LEN = 64
NONCE_LEN = 12
TAG_LEN = 16
TYPE_NAMES = {1: "MESSAGE", 2: "SPC_REQUEST", 3: "SPC_RESPONSE", 4: "EVENT",
              5: "DISCOVERY", 6: "HEARTBEAT", 7: "ERROR", 8: "ACK"}


class KeyProblem(Exception):
    """A key file that cannot be used; the message is one sentence, never key material."""


@dataclass(frozen=True)
class KeyInfo:
    path: Path
    secret: bytes
    fingerprint: str
    runtime_key: Any = None

    def __repr__(self) -> str:  # never show the key
        return f"KeyInfo(path={str(self.path)!r}, fingerprint={self.fingerprint!r})"

    __str__ = __repr__


def runtime_available() -> bool:
    return _rt is not None and hasattr(_rt, "Node")


def _fallback_fingerprint(secret: bytes) -> str:
    # same as speed_runtime.keyfile.Key.fingerprint
    return hashlib.sha256(b"SPEED-KEY-FINGERPRINT\x00" + secret).hexdigest()[:16]


def load_key(path: Path | str, allow_insecure: bool = False) -> KeyInfo:
    path = Path(path)
    if _rt is not None and hasattr(_rt, "load_key"):
        try:
            key = _rt.load_key(str(path), allow_insecure=allow_insecure)
        except Exception as exc:  # noqa: BLE001 - the runtime's message is one sentence
            msg = str(exc).splitlines()[0] if str(exc) else f"key file {path} refused"
            raise KeyProblem(msg.replace("`speed keygen", "`speedtui keygen")) from None
        return KeyInfo(path=path, secret=key.raw, fingerprint=key.fingerprint, runtime_key=key)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KeyProblem(f"key file {path} does not exist (create one with `speedtui keygen {path}`)") from None
    except OSError as exc:
        raise KeyProblem(f"key file {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyProblem(f"key file {path} is not a regular file")
    if st.st_mode & 0o077 and not allow_insecure:
        raise KeyProblem(f"key file {path} is readable or writable by others; run `chmod 600 {path}`")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise KeyProblem(f"key file {path} cannot be read as text") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != 2 or lines[0] != KEY_MAGIC:
        raise KeyProblem(f"key file {path} is not a SPEED-KEY-V1 file")
    try:
        secret = base64.b64decode(lines[1], validate=True)
    except (binascii.Error, ValueError):
        raise KeyProblem(f"key file {path} does not hold valid base64") from None
    if len(secret) != 32:
        raise KeyProblem(f"key file {path} does not hold a 32-byte key")
    return KeyInfo(path=path, secret=secret, fingerprint=_fallback_fingerprint(secret))


def generate_key_file(path: Path | str) -> Path:
    path = Path(path)
    if path.exists():
        raise KeyProblem(f"{path} already exists; refusing to overwrite a key")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if _rt is not None and hasattr(_rt, "generate_key_file"):
        try:
            _rt.generate_key_file(str(path))
            return path
        except Exception as exc:  # noqa: BLE001
            raise KeyProblem(str(exc).splitlines()[0]) from None
    data = f"{KEY_MAGIC}\n{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(data)
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
        return TYPE_NAMES.get(self.type, f"UNKNOWN({self.type})")


@dataclass(frozen=True)
class DecodedEnvelope:
    data: bytes
    header: EnvelopeHeader | None
    payload: Any  # parsed JSON, or None
    payload_text: str | None
    tag_ok: bool
    problem: str | None  # why the envelope could not be read/decrypted


def decode_envelope(data: bytes, secret: bytes | None) -> DecodedEnvelope:
    if len(data) < HEADER_LEN + NONCE_LEN + TAG_LEN:
        return DecodedEnvelope(data, None, None, None, False, f"too short ({len(data)} bytes)")
    fields = HEADER.unpack(data[:HEADER_LEN])
    hdr = EnvelopeHeader(
        version=fields[0], type=fields[1], flags=fields[2], header_length=fields[3], seq=fields[4],
        timestamp_ms=fields[5], payload_size=fields[6], source_id=str(uuid.UUID(bytes=fields[7])),
        target_id=str(uuid.UUID(bytes=fields[8])), nonce=data[HEADER_LEN:HEADER_LEN + NONCE_LEN],
    )
    expected = HEADER_LEN + NONCE_LEN + hdr.payload_size + TAG_LEN
    if len(data) != expected:
        return DecodedEnvelope(data, hdr, None, None, False, f"size {len(data)} != {expected} (bad_size)")
    if secret is None:
        return DecodedEnvelope(data, hdr, None, None, False, "no key")
    from nacl.bindings import crypto_aead_chacha20poly1305_ietf_decrypt
    from nacl.exceptions import CryptoError

    try:
        plain = crypto_aead_chacha20poly1305_ietf_decrypt(
            data[HEADER_LEN + NONCE_LEN:], data[:HEADER_LEN], hdr.nonce, secret)
    except CryptoError:
        return DecodedEnvelope(data, hdr, None, None, False, "authentication tag does not verify")
    text = plain.decode("utf-8", errors="replace")
    try:
        import json

        payload = json.loads(text)
    except ValueError:
        payload = None
    return DecodedEnvelope(data, hdr, payload, text, True, None)


def seal_envelope(secret: bytes, etype: int, seq: int, ts_ms: int, source_id: str, target_id: str,
                  payload: bytes, nonce: bytes | None = None, flags: int = 0) -> bytes:
    """Seal per §5 (used by the deterministic fixture and tests; the runtime seals its own)."""
    from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt

    nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_LEN)
    header = HEADER.pack(1, etype, flags, HEADER_LEN, seq, ts_ms, len(payload),
                         uuid.UUID(source_id).bytes, uuid.UUID(target_id).bytes)
    return header + nonce + crypto_aead_chacha20poly1305_ietf_encrypt(payload, header, nonce, secret)


def envelope_filename(sender: str, sender_id: str, seq: int, nonce: bytes) -> str:
    return f"{sender}.{sender_id.replace('-', '')[:8]}.{seq:020d}.{nonce.hex()[:8]}.env"


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
    """Put exact sealed bytes into ``target``'s inbox (tmp + no-replace link), §5.4."""
    if _rt is not None:
        try:
            from speed_runtime import transport

            if hasattr(transport, "inject"):
                transport.inject(str(root), target, filename, data)
                return Path(root) / target / "inbox" / filename
        except ImportError:
            pass
    home = Path(root) / target
    tmp = home / "tmp" / f".inject-{secrets.token_hex(4)}-{filename}"
    final = home / "inbox" / filename
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)
    finally:
        os.unlink(tmp)
    return final
