"""Key files on disk (wire contract §3): load and generate. The format and the key itself are
pure (`core.keys`); this module is the I/O around them. Errors never show key material.

Both directions refuse anything but a regular file: reading opens with O_NOFOLLOW | O_NONBLOCK
(a FIFO neither blocks nor feeds us), and writing never opens an existing path at all — a new key
goes to a private temporary file that is renamed over the old one, so a FIFO or a symlink at the
path can never receive key material.
"""
from __future__ import annotations

import os
import secrets
import stat

from .core.errors import KeyFileError
from .core.keys import KEY_SIZE, MAX_KEY_FILE_BYTES, Key, format_key_text, parse_key_text
from .fsutil import FileRefused, read_regular

__all__ = ["Key", "load_key", "generate_key_file", "read_private_file", "write_private_file", "parse_key_text",
           "format_key_text"]


def load_key(path: str | os.PathLike, *, allow_insecure: bool = False) -> Key:
    """Read and validate a key file; refuse symlinks, non-regular files and files open to group or others."""
    path = os.fspath(path)
    data = read_private_file(path, what="key file", create_with=f"speed keygen {path}", allow_insecure=allow_insecure)
    try:
        return parse_key_text(data)
    except KeyFileError as exc:
        raise KeyFileError(f"key file {path}: {exc}") from None


def read_private_file(path: str, *, what: str, create_with: str, allow_insecure: bool = False) -> bytes:
    """The bytes of a small private file (a key), read with fsutil.read_regular: opened without
    following links and without blocking (a FIFO never feeds us), refused unless a regular file
    closed to group and others."""
    try:
        return read_regular(path, MAX_KEY_FILE_BYTES, private=not allow_insecure)[0]
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist; create one with `{create_with}`") from None
    except FileRefused as exc:
        raise KeyFileError(f"{what} {path} {_REFUSED[exc.reason].format(exc=exc, path=path)}") from None
    except OSError as exc:
        raise KeyFileError(f"{what} {path} cannot be opened: {exc.strerror}") from None


_REFUSED = {  # what read_regular refused, as the end of a sentence about a key file
    "link": "is a symbolic link; point to the real file instead",
    "not_regular": "is not a regular file",
    "open_to_others": "is readable or writable by group or others (mode {exc.mode:04o}); run `chmod 600 {path}`",
    "too_large": "is too large to be a SPEED key file",
    "unreadable": "cannot be read: {exc.detail}",
}


def write_private_file(path: str, data: bytes, *, overwrite: bool, what: str) -> None:
    """Write `data` as a new 0600 file at `path`. An existing path is refused unless `overwrite`,
    and even then only a regular file is replaced (by rename, never by opening it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise KeyFileError(f"cannot create {what} {path}: {exc.strerror}") from None
    if st is not None:
        if not overwrite:
            raise KeyFileError(f"{what} {path} already exists; remove it first or pass --force")
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{what} {path} exists and is not a regular file; refusing to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise KeyFileError(f"cannot create {what} {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # the umask must not decide
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if overwrite:
            os.rename(tmp, path)
        else:
            os.link(tmp, path)  # never replaces what appeared meanwhile
            os.unlink(tmp)
    except FileExistsError:
        raise KeyFileError(f"{what} {path} already exists; remove it first or pass --force") from None
    except OSError as exc:
        raise KeyFileError(f"cannot write {what} {path}: {exc.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def generate_key_file(path: str | os.PathLike, *, overwrite: bool = False) -> Key:
    """Create a new key file with mode 0600; never replaces an existing file unless asked, and
    never anything but a regular file."""
    key = Key(secrets.token_bytes(KEY_SIZE))
    write_private_file(os.fspath(path), format_key_text(key), overwrite=overwrite, what="key file")
    return key
