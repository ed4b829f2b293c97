"""Moving sealed envelopes through inbox directories (wire contract §5.4, §5.5 steps 1–2).

Delivery writes `tmp/<file>` and moves it into `inbox/<file>` with an operation that never
replaces an existing file; reception opens without following links and judges the open
descriptor (`core.receiving.judge_file`), so a file swapped in between is judged as what was
actually opened.

Taking a file is its removal: a receiver dispatches only what its own unlink removed, and a
sender may withdraw a file it delivered by unlinking it (`retract`) — whichever unlink succeeds
decides, so a file is either handled by the receiver or reported as not delivered by the sender,
never both and never neither.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
import stat
import time

from .core import accel
from .core.errors import DeliveryError, EnvelopeError
from .core.receiving import DEFER, FileFacts, header_type, judge_file
from .fsutil import close_quietly, ensure_private_dir

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]


def _ctypes_rename_noreplace(src_fd: int, raw: bytes, dst_fd: int) -> int:
    """renameat2(src_fd, raw, dst_fd, raw, RENAME_NOREPLACE): 0 or the errno."""
    return 0 if _renameat2(src_fd, raw, dst_fd, raw, RENAME_NOREPLACE) == 0 else ctypes.get_errno()


# one a send: the compiled form's call costs a tenth of the ctypes one (docs/BENCHMARKS.md)
_rename_noreplace = (accel.compiled.rename_noreplace if accel.compiled is not None
                     else _ctypes_rename_noreplace if _renameat2 is not None else None)


class NameTaken(Exception):
    """The inbox already has a file of this name: reseal with a new nonce and try again."""


class DirectoryGone(DeliveryError):
    """The target's tmp/ or inbox/ behind our descriptor was removed: reopen and try again."""


def _move_noreplace(name: str, src_fd: int, dst_fd: int) -> bool:
    """tmp/name -> inbox/name, never replacing; renameat2 never shows the file with two links,
    link()+unlink() (the contract's other way) is the fallback where renameat2 is missing.
    Returns True when the temporary name is gone (renamed), False when it still needs unlinking."""
    if _rename_noreplace is not None:
        err = _rename_noreplace(src_fd, os.fsencode(name), dst_fd)
        if err == 0:
            return True
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), name)
    os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    return False


def prepare_home(root: str, name: str) -> tuple[str, str]:
    home = ensure_private_dir(os.path.join(root, name), what="node directory")
    return (ensure_private_dir(os.path.join(home, "inbox"), what="inbox"),
            ensure_private_dir(os.path.join(home, "tmp"), what="tmp directory"))


class TargetDirs:
    """Open descriptors of one target's tmp/ and inbox/, so each delivery skips path lookups.
    `current()` tells whether the paths still name the directories behind the descriptors (an
    operator may replace an inbox: `mv inbox inbox.old; mkdir inbox`). `box` names the directory
    delivered into: `inbox`, or an extension's own (`control`)."""

    def __init__(self, root: str, target: str, box: str = "inbox"):
        self.box = box
        home = os.path.join(root, target)
        self.tmp_path, self.inbox_path = os.path.join(home, "tmp"), os.path.join(home, box)
        try:
            self.tmp_fd = os.open(self.tmp_path, _DIR)
        except OSError as exc:
            raise DeliveryError(f"node {target} has no usable tmp/ directory: {exc.strerror}") from None
        try:
            self.inbox_fd = os.open(self.inbox_path, _DIR)
        except OSError as exc:
            os.close(self.tmp_fd)
            raise DeliveryError(f"node {target} has no usable {box}/ directory: {exc.strerror}") from None
        self._ids = (_dir_id(self.tmp_fd), _dir_id(self.inbox_fd))

    def current(self) -> bool:
        try:
            return (_path_id(self.tmp_path), _path_id(self.inbox_path)) == self._ids
        except OSError:
            return False

    def close(self) -> None:
        fds, self.tmp_fd, self.inbox_fd = (self.tmp_fd, self.inbox_fd), -1, -1
        close_quietly(*fds)


def _dir_id(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _path_id(path: str) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_dev, st.st_ino


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


class NotReady(Exception):
    """A file with extra links that may be a sender between link() and unlink(): look again soon."""


def read_inbox_file(inbox_fd: int, name: str, max_size: int, trusted_uids: frozenset[int],
                    now: float | None = None) -> tuple[bytes, float]:
    """Read one inbox file safely: (bytes, arrival time). The arrival time is the file's change
    time, which the kernel set when the file was moved into the inbox (no sender can set it to
    the past). Or raise EnvelopeError (reason of §5.5 step 2, with the file's size and header type
    whenever known), NotReady for a two-link file still within its grace, or FileNotFoundError."""
    try:
        fd = os.open(name, _OPEN, dir_fd=inbox_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EACCES, errno.EPERM):
            raise FileRejected("bad_file", f"cannot open safely: {exc.strerror}") from None
        raise
    try:
        st = os.fstat(fd)
        facts = FileFacts(st.st_mode, st.st_nlink, st.st_uid, st.st_size, st.st_ctime)
        verdict = judge_file(facts, time.time() if now is None else now, max_size, trusted_uids)
        if verdict == DEFER:
            raise NotReady(name)
        if verdict is not None:
            readable = stat.S_ISREG(st.st_mode) and verdict in ("too_large", "bad_size")
            raise FileRejected(verdict, f"{verdict} ({st.st_size} bytes)",
                               size=st.st_size if stat.S_ISREG(st.st_mode) else 0,
                               type=header_type(os.pread(fd, 64, 0)) if readable else "UNKNOWN")
        data = os.read(fd, st.st_size + 1)
        if len(data) != st.st_size:  # changed under us: judge nothing we did not fully read
            raise FileRejected("bad_size", "the file changed size while being read", size=len(data),
                               type=header_type(data))
        return data, st.st_ctime
    finally:
        os.close(fd)


class FileRejected(EnvelopeError):
    """A file refused at §5.5 step 2, with what is known of it for the journal (§8)."""

    def __init__(self, reason: str, detail: str = "", *, size: int = 0, type: str = "UNKNOWN"):
        super().__init__(reason, detail)
        self.size, self.type = size, type


def retract(dirs: TargetDirs, filename: str) -> bool:
    """Withdraw a file this sender delivered; True if it was still there (the receiver never takes
    it now), False if the receiver already took it."""
    try:
        os.unlink(filename, dir_fd=dirs.inbox_fd)
    except FileNotFoundError:
        return False
    return True


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


TEMPORARY_HOME = re.compile(r"speed-cli-[0-9a-f]{8}")  # homes of one-shot `speed call/send` nodes
TEMPORARY_HOME_GRACE = 60.0


def remove_home(root: str, name: str) -> None:
    """Remove a node's home directory (a temporary node's, on close)."""
    shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def sweep_temporary_homes(root: str, registry, now: float, grace: float = TEMPORARY_HOME_GRACE) -> int:
    """Remove the homes of one-shot CLI nodes that are gone (killed before they could clean up):
    no live registry entry, and older than `grace` (a new one registers within milliseconds)."""
    from .core.errors import BadEntryError
    from .core.liveness import judge
    from .fsutil import local_facts

    removed = 0
    try:
        items = [item for item in os.scandir(root) if TEMPORARY_HOME.fullmatch(item.name)]
    except OSError:
        return 0
    for item in items:
        try:
            if not item.is_dir(follow_symlinks=False) or now - item.stat(follow_symlinks=False).st_mtime < grace:
                continue
            entry = registry.read(item.name)
        except BadEntryError:
            entry = None
        except OSError:
            continue
        if entry is not None and not judge(entry, now, local_facts()).stale:
            continue
        remove_home(root, item.name)
        removed += 1
    return removed


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
