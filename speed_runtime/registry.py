"""The registry directory (wire contract §4.2): lock, register, renew, deregister, reap, scan.

POSIX record locks belong to a process, not a file descriptor or a thread: two threads of one
process would both "hold" the lock, and closing any descriptor of `.lock` drops every lock the
process holds. So each process keeps one descriptor per registry and a thread lock beside it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .errors import DirectoryError, LeaseLostError, NameInUseError
from .fsutil import (BOOT_ID, HOSTNAME, REGISTRY_DIR, boottime, check_private_dir, ensure_private_dir, pid_exists,
                     prepare_root)
from .lease import MAX_ENTRY_BYTES, BadEntryError, RegistryEntry, is_stale

SUFFIX = ".node"
FileStamp = tuple[int, int, int]  # inode, modification time (ns), size
_process_locks: dict[str, tuple[threading.Lock, int]] = {}
_process_locks_guard = threading.Lock()


def _lock_for(directory: str) -> tuple[threading.Lock, int]:
    with _process_locks_guard:
        found = _process_locks.get(directory)
        if found is None:
            fd = os.open(os.path.join(directory, ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            found = _process_locks[directory] = (threading.Lock(), fd)
        return found


@dataclass(frozen=True)
class RegistryRecord:
    """One `.node` file as a reader sees it: an entry, or the reason it is unreadable."""

    name: str
    entry: RegistryEntry | None
    error: str | None = None


class Registry:
    def __init__(self, root: str, *, create: bool = True):
        self.root = root
        self.dir = os.path.join(root, REGISTRY_DIR)
        if create:
            ensure_private_dir(self.dir, what="registry directory")
        else:  # readers and reapers refuse what a node would refuse (§1): symlink, foreign owner, loose mode
            prepare_root(root, create=False)
            if not os.path.lexists(self.dir):
                raise DirectoryError(f"{root} has no {REGISTRY_DIR}/ directory: no SPEED node has run there")
            check_private_dir(self.dir, what="registry directory")

    @contextmanager
    def locked(self) -> Iterator[None]:
        thread_lock, fd = _lock_for(self.dir)
        with thread_lock:
            fcntl.lockf(fd, fcntl.LOCK_EX)  # fcntl(F_SETLKW) on the whole file
            try:
                yield
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name + SUFFIX)

    def read(self, name: str) -> RegistryEntry | None:
        """The entry of `name`, None if there is none; BadEntryError if it is unreadable."""
        return self.read_stamped(name)[0]

    def stamp(self, name: str) -> FileStamp | None:
        """What identifies the current version of `name`'s file, None if there is none. Every
        write renames a new file over the old one, so a new version has a new inode."""
        try:
            st = os.stat(self.path(name), follow_symlinks=False)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def read_stamped(self, name: str) -> tuple[RegistryEntry | None, FileStamp | None]:
        """`read`, with the stamp of the version read (taken from the open descriptor)."""
        try:
            fd = os.open(self.path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadEntryError(f"registry entry {name} is a symbolic link") from None
            raise BadEntryError(f"registry entry {name} cannot be opened: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadEntryError(f"registry entry {name} is not a regular file")
            if st.st_size > MAX_ENTRY_BYTES:
                raise BadEntryError(f"registry entry {name} is larger than {MAX_ENTRY_BYTES} bytes")
            data = os.read(fd, MAX_ENTRY_BYTES + 1)
        finally:
            os.close(fd)
        entry = RegistryEntry.from_json(data)
        if entry.name != name:
            raise BadEntryError(f"registry file {name}{SUFFIX} holds an entry named {entry.name!r}")
        return entry, (st.st_ino, st.st_mtime_ns, st.st_size)

    def _write(self, entry: RegistryEntry) -> None:
        tmp = os.path.join(self.dir, f".{entry.name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            data = entry.to_json()
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "short write")
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, self.path(entry.name))

    def _remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass

    def register(self, entry: RegistryEntry, now: float) -> bool:
        """Write `entry` if its name is free; returns True when a stale entry was reclaimed."""
        with self.locked():
            try:
                current = self.read(entry.name)
            except BadEntryError:
                current, reclaim = None, True
            else:
                reclaim = current is not None
            if current is not None and not entry_is_dead(current, now):
                raise NameInUseError(entry.name, current.pid, current.host)
            if reclaim:
                self._remove(entry.name)
            self._write(entry)
            return reclaim

    def renew(self, entry: RegistryEntry) -> None:
        """Publish `entry` if we still own the name (fencing by instance id)."""
        with self.locked():
            try:
                current = self.read(entry.name)
            except BadEntryError:
                current = None
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

    def reap(self, name: str, now: float) -> bool:
        """Remove `name`'s entry if it is stale or unreadable; a live entry is never touched."""
        with self.locked():
            try:
                current = self.read(name)
            except BadEntryError:
                self._remove_any(name)
                return True
            if current is None or not entry_is_dead(current, now):
                return False
            self._remove(name)
            return True

    def _remove_any(self, name: str) -> None:
        path = self.path(name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            pass

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

    def names(self) -> list[str]:
        try:
            files = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(f[:-len(SUFFIX)] for f in files if f.endswith(SUFFIX) and not f.startswith("."))

    def scan(self) -> list[RegistryRecord]:
        out = []
        for name in self.names():
            try:
                entry = self.read(name)
            except BadEntryError as exc:
                out.append(RegistryRecord(name, None, str(exc)))
                continue
            if entry is not None:
                out.append(RegistryRecord(name, entry))
        return out


def process_gone(entry: RegistryEntry) -> bool:
    """A same-host, same-boot entry whose process no longer exists (§4.1: MAY be treated as stale).
    A process that exists proves nothing: PIDs are reused."""
    same_boot = entry.host == HOSTNAME and BOOT_ID is not None and entry.boot_id == BOOT_ID
    return same_boot and not pid_exists(entry.pid)


def entry_is_dead(entry: RegistryEntry, now: float) -> bool:
    """Stale by lease (boot-time aware), or its process is gone."""
    return is_stale(entry, now, BOOT_ID, boottime()) or process_gone(entry)


def scan_registry(root: str) -> list[RegistryRecord]:
    return Registry(root, create=False).scan()
