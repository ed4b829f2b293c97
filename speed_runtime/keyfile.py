"""Key files (wire contract §3): parse, load, generate. Errors never show key material."""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import stat

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


def load_key(path: str | os.PathLike, *, allow_insecure: bool = False) -> Key:
    """Read and validate a key file; refuse symlinks and files open to group or others."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyFileError(f"key file {path} does not exist; create one with `speed keygen {path}`") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the final component is a symlink
            raise KeyFileError(f"key file {path} is a symbolic link; point to the real file instead") from None
        raise KeyFileError(f"key file {path} cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"key file {path} is not a regular file")
        if st.st_mode & 0o077 and not allow_insecure:
            raise KeyFileError(
                f"key file {path} is readable or writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {path}`"
            )
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"key file {path} is too large to be a SPEED key file")
    try:
        return parse_key_text(data)
    except KeyFileError as exc:
        raise KeyFileError(f"key file {path}: {exc}") from None


def generate_key_file(path: str | os.PathLike, *, overwrite: bool = False) -> Key:
    """Create a new key file with mode 0600; never replaces an existing file unless asked."""
    path = os.fspath(path)
    key = Key(secrets.token_bytes(KEY_SIZE))
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if overwrite else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise KeyFileError(f"key file {path} already exists; remove it first or pass --force") from None
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, format_key_text(key))
    finally:
        os.close(fd)
    return key
