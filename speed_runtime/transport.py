"""Moving sealed envelopes through inbox directories (wire contract §5.4, §5.5 steps 1–2).

Delivery writes `tmp/<file>` and hard-links it into `inbox/<file>`, which never replaces an
existing file; reception opens without following links and judges the open descriptor, so a
file swapped in between is judged as what was actually opened.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import time

from .envelope import OVERHEAD
from .errors import DeliveryError, EnvelopeError
from .fsutil import ensure_private_dir

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


RENAME_NOREPLACE = 1
LINK_GRACE_SECONDS = 2.0
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]


class NameTaken(Exception):
    """The inbox already has a file of this name: reseal with a new nonce and try again."""


class DirectoryGone(DeliveryError):
    """The target's tmp/ or inbox/ behind our descriptor was removed: reopen and try again."""


class NotReady(Exception):
    """A file with extra links that may be a sender between link() and unlink(): look again soon."""


def _move_noreplace(name: str, src_fd: int, dst_fd: int) -> bool:
    """tmp/name -> inbox/name, never replacing; renameat2 never shows the file with two links,
    link()+unlink() (the contract's other way) is the fallback where renameat2 is missing.
    Returns True when the temporary name is gone (renamed), False when it still needs unlinking."""
    if _renameat2 is not None:
        raw = os.fsencode(name)
        if _renameat2(src_fd, raw, dst_fd, raw, RENAME_NOREPLACE) == 0:
            return True
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), name)
    os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    return False


def prepare_home(root: str, name: str) -> tuple[str, str]:
    home = ensure_private_dir(os.path.join(root, name), what="node directory")
    return (ensure_private_dir(os.path.join(home, "inbox"), what="inbox"),
            ensure_private_dir(os.path.join(home, "tmp"), what="tmp directory"))


class TargetDirs:
    """Open descriptors of one target's tmp/ and inbox/, so each delivery skips path lookups."""

    def __init__(self, root: str, target: str):
        home = os.path.join(root, target)
        try:
            self.tmp_fd = os.open(os.path.join(home, "tmp"), _DIR)
        except OSError as exc:
            raise DeliveryError(f"node {target} has no usable tmp/ directory: {exc.strerror}") from None
        try:
            self.inbox_fd = os.open(os.path.join(home, "inbox"), _DIR)
        except OSError as exc:
            os.close(self.tmp_fd)
            raise DeliveryError(f"node {target} has no usable inbox/ directory: {exc.strerror}") from None

    def close(self) -> None:
        for fd in (self.tmp_fd, self.inbox_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def deliver(dirs: TargetDirs, filename: str, data: bytes) -> None:
    """Write `data` as `filename` into the target's inbox, or raise NameTaken / DeliveryError."""
    try:
        fd = os.open(filename, _CREATE, 0o600, dir_fd=dirs.tmp_fd)
    except FileExistsError:
        raise NameTaken(filename) from None
    except FileNotFoundError:  # creating in a removed directory fails: nothing is lost
        raise DirectoryGone("the target's tmp/ directory was removed") from None
    except OSError as exc:
        raise DeliveryError(f"cannot create {filename} in the target's tmp/: {exc.strerror}") from None
    moved = False
    try:
        try:
            view, written = memoryview(data), 0
            while written < len(data):
                written += os.write(fd, view[written:])
        finally:
            os.close(fd)
        moved = _move_noreplace(filename, dirs.tmp_fd, dirs.inbox_fd)
    except FileExistsError:
        raise NameTaken(filename) from None
    except FileNotFoundError:
        raise DirectoryGone("the target's inbox/ directory was removed") from None
    except OSError as exc:
        raise DeliveryError(f"delivery of {filename} failed, nothing was delivered: {exc.strerror}") from None
    finally:
        if not moved:  # a failure, or the link() fallback: the temporary must go
            try:
                os.unlink(filename, dir_fd=dirs.tmp_fd)
            except FileNotFoundError:
                pass


def inject(root: str, target: str, filename: str, data: bytes) -> None:
    """Deliver exact bytes without any registry or access check (replay tools, tests)."""
    dirs = TargetDirs(root, target)
    try:
        deliver(dirs, filename, data)
    except NameTaken:
        raise DeliveryError(f"node {target}'s inbox already holds {filename}") from None
    finally:
        dirs.close()


def read_inbox_file(inbox_fd: int, name: str, max_size: int, trusted_uids: frozenset[int],
                    now: float | None = None) -> bytes:
    """Read one inbox file safely, or raise EnvelopeError('bad_file' | 'too_large' | 'bad_size'),
    or NotReady for a freshly hard-linked file that its sender has not unlinked from tmp/ yet."""
    try:
        fd = os.open(name, _OPEN, dir_fd=inbox_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EACCES, errno.EPERM):
            raise EnvelopeError("bad_file", f"cannot open safely: {exc.strerror}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EnvelopeError("bad_file", "not a regular file")
        if st.st_nlink != 1:
            if (time.time() if now is None else now) - st.st_ctime < LINK_GRACE_SECONDS:
                raise NotReady(name)
            raise EnvelopeError("bad_file", f"the file has {st.st_nlink} links")
        if st.st_uid not in trusted_uids:
            raise EnvelopeError("bad_file", f"owned by untrusted uid {st.st_uid}")
        if st.st_size > max_size:
            raise EnvelopeError("too_large", f"{st.st_size} bytes exceeds the limit of {max_size}")
        if st.st_size < OVERHEAD:
            raise EnvelopeError("bad_size", f"{st.st_size} bytes is shorter than any envelope")
        data = os.read(fd, st.st_size + 1)
        if len(data) != st.st_size:  # changed under us: judge nothing we did not fully read
            raise EnvelopeError("bad_size", "the file changed size while being read")
        return data
    finally:
        os.close(fd)


def remove_entry(dir_fd: int, dir_path: str, name: str) -> bool:
    """Remove whatever sits at `name` (file, link, FIFO or directory) without following links;
    False if nothing was there."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        shutil.rmtree(os.path.join(dir_path, name), ignore_errors=True)
    except PermissionError:  # EPERM from unlink on a directory (Linux)
        path = os.path.join(dir_path, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
    return True


def sweep_orphans(tmp_dir: str, older_than: float, now: float | None = None) -> int:
    """Remove temporaries that a crashed sender left behind; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(tmp_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > older_than:
                os.unlink(entry.path)
                removed += 1
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
    return removed
