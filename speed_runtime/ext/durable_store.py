"""The durable extension's files (docs/PROTOCOL.md, durable, "Files and the order of writes"), and the
readers the CLI and the console use (what waits in outboxes, pending copies, receipt chains).

    ROOT/<node>/durable/instances             the instance IDs this name had here (receiver)
    ROOT/<node>/durable/ledger/<sender>.log   claims, receipts and checkpoints per sender (receiver)
    ROOT/<node>/durable/outbox/<target>/      `stream`, and one `<id, 20 digits>.msg` per waiting message (sender)
    ROOT/<node>/durable/receipts/<target>.log the receipts a sender stored, and its expiries (sender)

A file that must survive a power loss is written as: data into a temporary file, fsync(file),
rename over the final name, fsync(directory). An appended record that must survive is followed by
fdatasync(file) before anything that depends on it (the removal of a handled envelope, of a
receipted outbox entry).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import stat
from typing import Iterable, NamedTuple

from ..core.durable import (ChainReport, Receipt, durable_flag, is_stream, outbox_meta, receipt_from_json,
                            receipt_key, verify_chain)
from ..core.envelope import parse_filename
from ..core.errors import ConfigError
from ..fsutil import close_quietly, ensure_private_dir

TMPFS_MAGIC, RAMFS_MAGIC = 0x01021994, 0x858458F6
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


# ----------------------------------------------------------------------------- the file system
def filesystem_type(path: str) -> int:
    """statfs(2)'s f_type for `path` (the first field of struct statfs on Linux)."""
    buf = ctypes.create_string_buffer(256)
    if _libc.statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def check_persistent(path: str, on_tmpfs: bool) -> str | None:
    """Refuse a directory in memory (tmpfs, ramfs) for durable delivery, or, with `on_tmpfs`, return
    the warning to give loudly."""
    if filesystem_type(path) not in (TMPFS_MAGIC, RAMFS_MAGIC):
        return None
    text = (f"the communication directory {path} is on tmpfs (memory): durable messages stored there are "
            "lost at a reboot or power loss")
    if not on_tmpfs:
        raise ConfigError(f"{text}; durable delivery needs a persistent file system (for example a directory "
                          "on disk such as /var/lib/speed), or pass --durable-on-tmpfs (durable_on_tmpfs=True) "
                          "to run anyway")
    return f"WARNING: {text}; running anyway because durable_on_tmpfs was given"


class Syncs:
    """Counts fsync/fdatasync calls (a benchmark figure) through a callback."""

    def __init__(self, count=lambda n: None):
        self.count = count

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.count(1)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)
        self.count(1)


def private_dir(parent_fd: int, parent_path: str, name: str, syncs: Syncs) -> tuple[int, str]:
    """Create (0700) and open a directory; a new one's entry is made durable in its parent."""
    path = os.path.join(parent_path, name)
    fresh = not os.path.lexists(path)
    ensure_private_dir(path, what="durable directory")
    if fresh:
        syncs.fsync(parent_fd)
    return os.open(path, _DIR), path


def write_durably(dir_fd: int, name: str, data: bytes, syncs: Syncs) -> None:
    """tmp file, write, fsync(file), rename over `name`, fsync(directory): after a crash `name` is
    either absent or whole, and once this returns it survives a power loss."""
    tmp = f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.write(fd, view[written:])
        syncs.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    syncs.fsync(dir_fd)


def read_small(dir_fd: int, name: str, limit: int = 64 << 20) -> bytes:
    fd = os.open(name, _READ, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise OSError(f"{name} is not a regular file of at most {limit} bytes")
        chunks, left = [], st.st_size + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class AppendLog:
    """One append-only log of JSON lines. A torn last line (a crash mid-append) is cut off when the
    log is opened, so the next record starts on a line of its own."""

    def __init__(self, dir_fd: int, name: str, syncs: Syncs):
        self.dir_fd, self.name, self.syncs = dir_fd, name, syncs
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
            syncs.fsync(dir_fd)  # a new log's name survives a power loss (its records are synced as appended)
        except FileExistsError:
            self.fd = os.open(name, flags, dir_fd=dir_fd)
        self.lines = self._read_and_mend()
        self.size = os.fstat(self.fd).st_size

    def _read_and_mend(self) -> list[bytes]:
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0) if size else b""
        end = data.rfind(b"\n") + 1
        if end != len(data):
            os.ftruncate(self.fd, end)
        return data[:end].splitlines()

    def append(self, data: bytes, sync: bool) -> None:
        os.write(self.fd, data)
        self.size += len(data)
        if sync:
            self.syncs.fdatasync(self.fd)

    def replace(self, data: bytes) -> None:
        """Rewrite the whole log atomically (compaction)."""
        write_durably(self.dir_fd, self.name, data, self.syncs)
        close_quietly(self.fd)
        self.fd = os.open(self.name, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        self.size = len(data)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        close_quietly(fd)


# ----------------------------------------------------------------------------- readers (CLI, console)
class OutboxItem(NamedTuple):
    node: str          # the sender whose outbox holds it
    target: str
    stream: str
    id: int
    created: float     # Unix seconds
    expires_at: float  # Unix seconds
    size: int          # payload bytes


class PendingCopy(NamedTuple):
    node: str          # the receiver whose inbox holds it
    sender: str
    file: str
    size: int
    arrived: float     # the file's change time (its arrival)


def _node_names(root: str, names: Iterable[str] | None) -> list[str]:
    if names:
        return list(names)
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)
                      and not e.name.startswith("speed_"))
    except OSError:
        return []


def list_outboxes(root: str, names: Iterable[str] | None = None) -> list[OutboxItem]:
    """Every message waiting in the outboxes of `names` (default: every node of ROOT), oldest id
    first per target. Reads the entries' clear header lines only: no key needed, no payload read."""
    out = []
    for node in _node_names(root, names):
        base = os.path.join(root, node, "durable", "outbox")
        try:
            targets = sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for target in targets:
            try:
                fd = os.open(os.path.join(base, target), _DIR)
            except OSError:
                continue
            try:
                files = sorted(n for n in os.listdir(fd) if n.endswith(".msg") and not n.startswith("."))
                for name in files:
                    try:
                        meta = outbox_meta(read_small(fd, name, 2 << 20))
                    except (OSError, ValueError):
                        continue
                    out.append(OutboxItem(node, target, meta["stream"], meta["id"], meta.get("created", 0.0),
                                          meta.get("expiresAt", 0) / 1000, meta.get("size", 0)))
            finally:
                os.close(fd)
    return out


def list_pending(root: str, names: Iterable[str] | None = None) -> list[PendingCopy]:
    """Durable copies waiting in inboxes (the header's durable flag, read without the key)."""
    out = []
    for node in _node_names(root, names):
        inbox = os.path.join(root, node, "inbox")
        try:
            fd = os.open(inbox, _DIR)
        except OSError:
            continue
        try:
            for name in sorted(os.listdir(fd)):
                parsed = parse_filename(name)
                if parsed is None:
                    continue
                try:
                    f = os.open(name, _READ, dir_fd=fd)
                except OSError:
                    continue
                try:
                    st = os.fstat(f)
                    if stat.S_ISREG(st.st_mode) and durable_flag(os.pread(f, 4, 0)):
                        out.append(PendingCopy(node, parsed.sender, name, st.st_size, st.st_ctime))
                finally:
                    os.close(f)
        finally:
            os.close(fd)
    return out


def _log_receipts(path: str, receiver: str, sender: str) -> tuple[list[Receipt], dict[str, tuple[int, bytes, int]]]:
    """The receipts of one log (a sender's stored receipts or a receiver's ledger) and the
    checkpoints a compacted log starts from: (position, MAC, handled before it)."""
    receipts, starts = [], {}
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return [], {}
    for line in lines:
        try:
            kind, obj = next(iter(json.loads(line).items()))
            if kind == "receipt":
                receipts.append(receipt_from_json(obj, receiver, sender))
            elif kind == "checkpoint" and is_stream(obj.get("stream")) and obj["stream"] not in starts:
                starts[obj["stream"]] = (int(obj["index"]), bytes.fromhex(obj["mac"]), int(obj.get("handled", 0)))
        except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
            continue
    return receipts, starts


def verify_receipts(root: str, key: bytes, receiver: str, senders: Iterable[str] | None = None,
                    ledger: bool = True) -> list[tuple[str, ChainReport]]:
    """Verify the receipt chains that `receiver` issued: as each sender stored them
    (ROOT/<sender>/durable/receipts/<receiver>.log) and, with `ledger`, as the receiver's own ledger
    holds them. Returns (where, report) per chain; a report names its first break."""
    rkey = receipt_key(key)
    out = []

    def check(where: str, path: str, sender: str) -> None:
        receipts, starts = _log_receipts(path, receiver, sender)
        for r in verify_chain(receipts, rkey, {k: v[:2] for k, v in starts.items()}):
            index, _, handled = starts.get(r.stream, (0, b"", 0))  # what a checkpoint stands for
            out.append((where, r._replace(count=r.count + index, handled=r.handled + handled)))

    for sender in _node_names(root, senders):
        check(f"stored by {sender}", os.path.join(root, sender, "durable", "receipts", f"{receiver}.log"), sender)
    if ledger:
        base = os.path.join(root, receiver, "durable", "ledger")
        try:
            logs = sorted(n for n in os.listdir(base) if n.endswith(".log"))
        except OSError:
            logs = []
        for log in logs:
            sender = log[:-4]
            if senders and sender not in senders:
                continue
            check(f"ledger of {receiver}", os.path.join(base, log), sender)
    return out
