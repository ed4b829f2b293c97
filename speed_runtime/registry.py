"""The registry directory (wire contract §4.2): the lock, the one reader of entries, and the
writes (register, renew, deregister, reap).

POSIX record locks belong to a process, not to a file descriptor or a thread: two threads of one
process would both "hold" the lock, and closing any descriptor of `.lock` drops every lock the
process holds. So each process keeps one descriptor per registry and a thread lock beside it.
The wait for the lock is bounded (contract 1.1): a process stopped inside the lock (SIGSTOP,
Ctrl-Z) must not freeze the environment, so writers poll F_SETLK, answer signals meanwhile, and
give up with the holder's pid (F_GETLK) in the error.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .core import accel
from .core.entry import MAX_ENTRY_BYTES, RegistryEntry
from .core.errors import (BadEntryError, DirectoryError, EntryTooLargeError, EntryUnreadableError, LeaseLostError,
                          NameInUseError, RegistryLockError)
from .core.liveness import HostFacts, judge
from .fsutil import (FILE_TIME_UNCERTAINTY, REGISTRY_DIR, FileRefused, check_private_dir, ensure_private_dir, local_facts,
                     prepare_root, read_regular, why_not_written, write_all)

SUFFIX = ".node"
LOCK_NAME = ".lock"
DEFAULT_LOCK_TIMEOUT = 10.0
FileStamp = tuple[int, int, int]  # inode, modification time (ns), size: every write renames a new file in
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux (x86_64, aarch64): type, whence, start, len, pid
_process_locks: dict[str, tuple[threading.Lock, int]] = {}
_process_locks_guard = threading.Lock()


def _lock_for(directory: str) -> tuple[threading.Lock, int]:
    with _process_locks_guard:
        found = _process_locks.get(directory)
        if found is None:
            path = os.path.join(directory, LOCK_NAME)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                kind = {errno.EISDIR: "a directory", errno.ELOOP: "a symbolic link"}.get(exc.errno)
                if kind:
                    raise DirectoryError(f"registry lock {path} is {kind}, not a regular file; remove it "
                                         "(the runtime creates a new one)") from None
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise DirectoryError(f"registry lock {path} is not a regular file; remove it "
                                     "(the runtime creates a new one)")
            found = _process_locks[directory] = (threading.Lock(), fd)
        return found


def lock_holder(fd: int) -> int | None:
    """The pid of another process holding a lock on `fd`'s file (F_GETLK), None if nobody does."""
    result = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    l_type, _, _, _, pid = _FLOCK.unpack(result)
    return None if l_type == fcntl.F_UNLCK else pid


def _pure_file_stamp(path: str) -> FileStamp | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


# Entries this process has parsed, by path. Every node watches the registry and reads each entry
# that changed, so N nodes in one process read and parsed every heartbeat N times: with 60 idle
# nodes 750 reads a second, each a handful of system calls that give up the GIL and wait to take it
# back from 180 threads. A version already parsed is recognised by one lstat: an entry is renamed
# over (a new inode, §4), and a chmod, chown or write in place changes the change time. Times come
# from the kernel's coarse clock and a file system may give a freed inode number again, so two
# versions written within one tick could look alike: only a version whose change time was already
# FILE_TIME_UNCERTAINTY old when it was read is kept (any later one has a later change time).
# Bounded, whatever members write: at most MAX_PARSED entries of at most PARSED_ENTRY_BYTES (a
# usual entry is 1-2 KB; a larger one is read each time, as before), forgotten when their file goes.
MAX_PARSED, PARSED_ENTRY_BYTES = 1024, 8192
_parsed: dict[str, tuple[tuple[int, int, int, int, int], RegistryEntry]] = {}
_parsed_lock = threading.Lock()


def _version(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode


# taken twice a send (the entry judged current before the seal, unchanged after the delivery): the
# compiled form's twin builds no os.stat_result, a sixth of the cost (tests/runtime/test_compiled_form.py)
_file_stamp = accel.compiled.file_stamp if accel.compiled is not None else _pure_file_stamp


def check_size(name: str, data: bytes) -> None:
    """EntryTooLargeError when `data`, node `name`'s entry as written, is more than every reader
    accepts: published, it would be unreadable, to its own node too (which then stops, its lease
    taken for lost)."""
    if len(data) > MAX_ENTRY_BYTES:
        raise EntryTooLargeError(
            f"node {name}'s registry entry would be {len(data):,} bytes, more than the {MAX_ENTRY_BYTES:,} every "
            f"reader accepts: allow fewer names (a group grants many at once) or offer fewer services")


@dataclass(frozen=True)
class RegistryRecord:
    """One `.node` file as a reader sees it: an entry, or the reason it is unreadable."""

    name: str
    entry: RegistryEntry | None
    error: str | None = None
    stamp: FileStamp | None = None


class RegistryGoneError(OSError):
    """A renewal found no registry directory (ROOT moved away or removed): a failed renewal, not
    the name taken. `mv ROOT elsewhere` for a few seconds stopped every node for good, told that
    "the registry entry now belongs to nobody"."""


class Registry:
    def __init__(self, root: str, *, create: bool = True, lock_timeout: float = DEFAULT_LOCK_TIMEOUT):
        self.root = root
        self.dir = os.path.join(root, REGISTRY_DIR)
        self._prefix = os.path.join(self.dir, "")  # path() is on every receive: no join each time
        self.lock_timeout = lock_timeout
        if create:
            ensure_private_dir(self.dir, what="registry directory")
        else:  # readers and reapers refuse what a node would refuse (§1): symlink, foreign owner, loose mode
            prepare_root(root, create=False)
            if not os.path.lexists(self.dir):
                raise DirectoryError(f"{root} has no {REGISTRY_DIR}/ directory: no SPEED node has run there")
            check_private_dir(self.dir, what="registry directory")

    # ------------------------------------------------------------------ the lock
    @contextmanager
    def locked(self) -> Iterator[None]:
        thread_lock, fd = _lock_for(self.dir)
        deadline = time.monotonic() + self.lock_timeout
        if not thread_lock.acquire(timeout=self.lock_timeout):
            raise RegistryLockError(f"another thread of this process kept the registry lock for "
                                    f"{self.lock_timeout:g} s")
        try:
            delay = 0.0005
            while True:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fcntl(F_SETLK) on the whole file
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EACCES, errno.EAGAIN):
                        raise
                if time.monotonic() >= deadline:
                    holder = lock_holder(fd)
                    who = f"pid {holder}" if holder else "another process"
                    raise RegistryLockError(
                        f"the registry lock {os.path.join(self.dir, LOCK_NAME)} is held by {who}, which kept "
                        f"it for more than {self.lock_timeout:g} s; is it stopped? (resume it with "
                        f"`kill -CONT {holder or 'PID'}` or end it)", holder_pid=holder)
                time.sleep(delay)  # signal handlers run here
                delay = min(delay * 2, 0.05)
            try:
                yield
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            thread_lock.release()

    def directory_gone(self) -> bool:
        """Whether the registry directory is not there (ROOT moved away or removed); a directory
        that cannot be looked at (ROOT at mode 000) is not known to be gone."""
        try:
            return not stat.S_ISDIR(os.stat(self.dir).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError:
            return False

    def lock_holder(self) -> int | None:
        """Who holds the registry lock now (another process), for the console's warning."""
        return lock_holder(_lock_for(self.dir)[1])

    # ------------------------------------------------------------------ reading (no lock: renames are atomic)
    def path(self, name: str) -> str:
        return self._prefix + name + SUFFIX

    def read(self, name: str) -> RegistryEntry | None:
        """The entry of `name`, None if there is none; BadEntryError if it is unreadable."""
        return self.read_stamped(name)[0]

    def stamp(self, name: str) -> FileStamp | None:
        """What identifies the current version of `name`'s file, None if there is none."""
        return _file_stamp(self.path(name))

    def read_stamped(self, name: str) -> tuple[RegistryEntry | None, FileStamp | None]:
        """`read`, with the stamp of the version read (taken from the open descriptor). Anything
        but a regular file (a FIFO, a device, a directory, a symlink) is reported, never read.
        A version this process has already read is known by one lstat (`_parsed`)."""
        path = self.path(name)
        try:
            seen = os.stat(path, follow_symlinks=False)
        except OSError:
            seen = None  # gone, or not ours to stat: the read below says which
        else:
            known = _parsed.get(path)
            if known is not None and known[0] == _version(seen):
                return known[1], (seen.st_ino, seen.st_mtime_ns, seen.st_size)
        try:
            data, st = read_regular(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            _parsed.pop(path, None)
            return None, None
        except FileRefused as exc:
            raise BadEntryError(f"registry entry {name} " + {
                "link": "is a symbolic link", "not_regular": "is not a regular file",
                "too_large": f"is larger than {MAX_ENTRY_BYTES} bytes"}.get(exc.reason, f"cannot be read: {exc.detail}")
            ) from None
        except OSError as exc:
            raise EntryUnreadableError(f"registry entry {name} cannot be opened: {exc.strerror}", exc.errno) from None
        entry = RegistryEntry.from_json(data)
        if entry.name != name:
            raise BadEntryError(f"registry file {name}{SUFFIX} holds an entry named {entry.name!r}")
        if (seen is not None and _version(seen) == _version(st)  # (the lstat was of the file read)
                and time.time() - st.st_ctime > FILE_TIME_UNCERTAINTY and st.st_size <= PARSED_ENTRY_BYTES):
            with _parsed_lock:
                if len(_parsed) >= MAX_PARSED:
                    _parsed.clear()
                _parsed[path] = (_version(st), entry)
        return entry, (st.st_ino, st.st_mtime_ns, st.st_size)

    def read_record(self, name: str) -> RegistryRecord | None:
        """One entry as a record (never raises for a bad entry); None if the file is gone."""
        try:
            entry, stamp = self.read_stamped(name)
        except BadEntryError as exc:
            return RegistryRecord(name, None, str(exc), self.stamp(name))
        return None if entry is None else RegistryRecord(name, entry, None, stamp)

    def names(self) -> list[str]:
        try:
            files = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(f[:-len(SUFFIX)] for f in files if f.endswith(SUFFIX) and not f.startswith("."))

    def stamps(self) -> dict[str, FileStamp]:
        """The current version of every entry file, by one lstat each (no reads)."""
        out: dict[str, FileStamp] = {}
        try:
            it = os.scandir(self.dir)
        except FileNotFoundError:
            return out
        with it:
            for item in it:
                name = item.name
                if name.endswith(SUFFIX) and not name.startswith("."):
                    try:
                        st = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out[name[:-len(SUFFIX)]] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return out

    def scan(self, previous: dict[str, RegistryRecord] | None = None) -> list[RegistryRecord]:
        """Every entry, sorted by name. With the records of a previous scan, a file whose stamp did
        not change is not read again (its record object is reused)."""
        out = []
        for name, stamp in sorted(self.stamps().items()):
            old = previous.get(name) if previous else None
            if old is not None and old.stamp == stamp:
                out.append(old)
                continue
            record = self.read_record(name)
            if record is not None:
                out.append(record)
        return out

    # ------------------------------------------------------------------ writing (under the lock)
    def _write(self, entry: RegistryEntry) -> None:
        data = entry.to_json()
        check_size(entry.name, data)  # never an entry that its readers (ourselves included) refuse
        tmp = os.path.join(self.dir, f".{entry.name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, data)
        except BaseException as exc:
            os.close(fd)
            os.unlink(tmp)
            if isinstance(exc, OSError):  # it said "short write" under `ulimit -f`
                raise OSError(exc.errno, f"cannot write the registry entry of {entry.name}, {len(data)} bytes "
                                         f"({why_not_written(exc)})") from None
            raise
        os.close(fd)
        os.rename(tmp, self.path(entry.name))

    def _remove(self, name: str) -> None:
        """Remove whatever sits at the entry's path (a file, a symlink, an empty directory)."""
        path = self.path(name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            pass  # a non-empty directory: left for the operator; the name stays unusable

    def register(self, entry: RegistryEntry, now: float, facts: HostFacts | None = None) -> bool:
        """Write `entry` if its name is free; returns True when a stale or unreadable entry was reclaimed."""
        facts = facts or local_facts()
        with self.locked():
            try:
                current = self.read(entry.name)
            except EntryUnreadableError as exc:  # not known to be free: a live node's, maybe
                raise OSError(exc.errno, str(exc)) from None
            except BadEntryError:
                current, reclaim = None, True
            else:
                reclaim = current is not None
            if current is not None and not judge(current, now, facts).stale:
                raise NameInUseError(entry.name, current.pid, current.host)
            if reclaim and current is None:
                self._remove(entry.name)  # unreadable: a symlink or a directory is not renamed over
            self._write(entry)  # renamed over a stale entry: readers never see the name missing
            return reclaim

    def renew(self, entry: RegistryEntry) -> None:
        """Publish `entry` if we still own the name (fencing by instance id)."""
        with self.locked():
            try:
                current = self.read(entry.name)
            except EntryUnreadableError as exc:  # a failed renewal (retried), not a lease lost:
                # one second of a registry at mode 000, or of EMFILE, stopped every node for good
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                raise OSError(exc.errno, f"its entry cannot be read ({why})") from None
            except BadEntryError:
                current = None
            if current is None and self.directory_gone():  # ROOT moved or removed: nobody took the name
                raise RegistryGoneError(errno.ENOENT, f"its registry directory {self.dir} is gone")
            if current is None or current.id != entry.id:
                holder = "nobody" if current is None else f"pid {current.pid} on {current.host}"
                raise LeaseLostError(f"node {entry.name} lost its lease: the registry entry now belongs to {holder}")
            self._write(entry)

    def deregister(self, name: str, node_id: str) -> bool:
        with self.locked():
            try:
                current = self.read(name)
            except BadEntryError:
                return False
            if current is None or current.id != node_id:
                return False
            self._remove(name)
            return True

    def reap(self, name: str, now: float, facts: HostFacts | None = None) -> bool:
        """Remove `name`'s entry if it is stale or unreadable; a live entry is never touched."""
        facts = facts or local_facts()
        with self.locked():
            try:
                current = self.read(name)
            except EntryUnreadableError:
                return False  # what could not be read may be a live node's
            except BadEntryError:
                self._remove(name)
                return True
            if current is None or not judge(current, now, facts).stale:
                return False
            self._remove(name)
            return True

    def sweep_temporaries(self, older_than: float, now: float | None = None) -> int:
        """Remove temporaries that writers killed mid-write left behind (§4.2 writes a dot-file and
        renames it, under the lock). Under the lock no writer is mid-write, so an old one is an orphan."""
        now = time.time() if now is None else now
        try:
            candidates = [n for n in os.listdir(self.dir) if n.startswith(".") and n.endswith(".tmp")]
        except FileNotFoundError:
            return 0
        if not candidates:
            return 0
        removed = 0
        with self.locked():
            for name in candidates:
                path = os.path.join(self.dir, name)
                try:
                    st = os.lstat(path)
                    if stat.S_ISREG(st.st_mode) and now - st.st_mtime > older_than:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed
