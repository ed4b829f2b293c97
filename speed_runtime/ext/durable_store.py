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
import errno
import json
import os
import stat
import threading
from collections import OrderedDict
from typing import Iterable, NamedTuple

from ..core.durable import (ChainReport, Receipt, StreamLedger, durable_flag, is_stream, lineage_ids, outbox_meta,
                            receipt_from_json, receipt_key, replay_ledger, verify_chain)
from ..core.envelope import parse_filename
from ..core.errors import ConfigError
from ..core.names import is_valid_name, validate_name
from ..fsutil import FileRefused, close_quietly, ensure_private_dir, read_regular, write_all

TMPFS_MAGIC, RAMFS_MAGIC = 0x01021994, 0x858458F6
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_LOG_BYTES = 16 << 20  # a ledger or receipt log is compacted beyond 4 MiB: far more is not ours
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


class StoreError(OSError):
    """A durable store could not be written (a full disk, a file-size limit, an I/O error). Nothing
    of the record is left in it: every write is whole or absent. One sentence, naming the file."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def write_durably(dir_fd: int, name: str, data: bytes, syncs: Syncs, where: str = "") -> None:
    """tmp file, write, fsync(file), rename over `name`, fsync(directory): after a crash `name` is
    either absent or whole, and once this returns it survives a power loss. On failure the
    temporary file is removed and StoreError raised; `name` is as it was."""
    tmp = f".{name}.tmp"
    renamed = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            write_all(fd, data)
            syncs.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        renamed = True
        syncs.fsync(dir_fd)
    except OSError as exc:
        if not renamed:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        raise StoreError(exc.errno, f"cannot write {os.path.join(where, name)}: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_small(dir_fd: int, name: str, limit: int = 64 << 20, close_dir: bool = False) -> bytes:
    """A regular file's bytes (fsutil.read_regular: opened without following a link or blocking on
    a FIFO; at most `limit` bytes, else OSError). With `close_dir`, `dir_fd` is closed too."""
    try:
        return read_regular(name, limit, dir_fd=dir_fd)[0]
    except FileRefused as exc:
        if exc.reason == "link":  # (as the open itself says it)
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        if exc.reason == "unreadable":
            raise
        raise OSError(f"{name} is not a regular file of at most {limit} bytes") from None
    finally:
        if close_dir:
            os.close(dir_fd)


class AppendLog:
    """One append-only log of JSON lines, whole records only. A torn last line (a crash mid-append)
    is cut off when the log is opened, so the next record starts on a line of its own; an append
    that fails (a short write that cannot be continued, a failed fdatasync) is cut off again at
    once and raises StoreError, so a record is in the log whole or not at all. The file must be a
    regular file of this user with one link and at most MAX_LOG_BYTES (anything else put in its
    place is refused with StoreError, never followed, read or written)."""

    def __init__(self, dir_fd: int, name: str, syncs: Syncs, where: str = "", read: bool = True):
        self.dir_fd, self.name, self.syncs = dir_fd, name, syncs
        self.path = os.path.join(where, name)
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            try:
                self.fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
                syncs.fsync(dir_fd)  # a new log's name survives a power loss (its records are synced as appended)
            except FileExistsError:
                self.fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            raise StoreError(exc.errno, f"cannot open {self.path}: {_why(exc)}") from None
        try:
            self._check()
            self.lines = self._read_and_mend() if read else self._mend_tail()
        except OSError as exc:
            close_quietly(self.fd)
            self.fd = -1
            if isinstance(exc, StoreError):
                raise
            raise StoreError(exc.errno, f"cannot read {self.path}: {_why(exc)}") from None
        self.size = os.fstat(self.fd).st_size
        self._torn = False  # an append failed and could not be cut off: cut before the next one

    def _check(self) -> None:
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise StoreError(errno.EPERM, f"{self.path} is not a regular file of this user with one link; "
                                          "it was left alone (remove it to let the node write its own)")
        if st.st_size > MAX_LOG_BYTES:
            raise StoreError(errno.EFBIG, f"{self.path} holds {st.st_size} bytes, more than a log of this node "
                                          f"ever does ({MAX_LOG_BYTES}); it was left alone")

    def _read_and_mend(self) -> list[bytes]:
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0) if size else b""
        end = data.rfind(b"\n") + 1
        if end != len(data):
            os.ftruncate(self.fd, end)
        return data[:end].splitlines()

    def _mend_tail(self) -> list[bytes]:
        """Cut a torn last line without reading the whole log (an append-only opening)."""
        size = end = os.fstat(self.fd).st_size
        while end > 0:
            start = max(0, end - 65536)
            chunk = os.pread(self.fd, end - start, start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end != size:
            os.ftruncate(self.fd, end)
        return []

    def in_place(self) -> None:
        """StoreError unless the log's name still names the file this log holds open (one lstat and
        one fstat): a log removed or replaced while open (by another file, a directory, a symbolic
        link) is never appended to, since what went into it would vanish with the descriptor."""
        if self.fd < 0:
            raise StoreError(errno.EBADF, f"cannot write {self.path}: it is not open")
        try:
            here = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
            held = os.fstat(self.fd)
            same = (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)
        except OSError:
            same = False
        if not same:
            raise StoreError(errno.ESTALE, f"{self.path} was removed or replaced while this node held it open")

    def append(self, data: bytes, sync: bool) -> None:
        """Append one or more whole records (with sync: fdatasync before returning); StoreError,
        and the log as it was before, when that cannot be done."""
        start = self.size
        if self._torn and not self._cut(start):
            raise StoreError(errno.EIO, f"cannot write {self.path}: a failed record could not be cut off")
        try:
            write_all(self.fd, data)
            if sync:
                self.syncs.fdatasync(self.fd)
        except OSError as exc:
            self._cut(start)
            raise StoreError(exc.errno, f"cannot write {self.path}: {_why(exc)}") from None
        self.size = start + len(data)

    def _cut(self, size: int) -> bool:
        """Back to `size` bytes: a record that was not written whole is not in the log (False when
        even that failed: the next append tries again first)."""
        try:
            os.ftruncate(self.fd, size)
        except OSError:
            self._torn = True
            return False
        self._torn = False
        return True

    def replace(self, data: bytes) -> None:
        """Rewrite the whole log atomically (compaction); StoreError leaves the log as it was."""
        where = os.path.dirname(self.path)
        write_durably(self.dir_fd, self.name, data, self.syncs, where)
        close_quietly(self.fd)
        try:
            self.fd = os.open(self.name, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        except OSError as exc:
            self.fd = -1
            raise StoreError(exc.errno, f"cannot open {self.path}: {_why(exc)}") from None
        self.size = len(data)
        self._torn = False

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        close_quietly(fd)


class Lineage:
    """The instance IDs each sender name had in this directory, as that sender recorded them
    (`ROOT/<sender>/durable/instances`, appended by every durable node at its start): a durable
    copy sealed by an earlier instance of its sender still counts as that sender's. Each file is
    opened without following a link, must be a regular file of a trusted owner and small; it is
    read again only when it changed; at most CACHED senders are remembered."""

    CACHED = 256
    MAX_BYTES = 64 << 10   # 1,024 lines of 33 bytes, with room

    def __init__(self, root: str, uids: frozenset[int], limit: int):
        self.root, self.uids, self.limit = root, uids, limit
        self._cache: "OrderedDict[str, tuple[tuple[int, int, int], frozenset[bytes]]]" = OrderedDict()
        self._lock = threading.Lock()

    def ids(self, sender: str) -> frozenset[bytes]:
        fds: list[int] = []
        try:
            fds.append(os.open(self.root, _DIR))
            for part in (sender, "durable"):
                fds.append(os.open(part, _DIR, dir_fd=fds[-1]))
            fds.append(os.open("instances", _READ, dir_fd=fds[-1]))
            st = os.fstat(fds[-1])
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in self.uids or st.st_size > self.MAX_BYTES:
                return frozenset()
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                cached = self._cache.get(sender)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            ids = lineage_ids(os.pread(fds[-1], self.MAX_BYTES, 0), self.limit)
        except OSError:
            return frozenset()
        finally:
            close_quietly(*reversed(fds))
        with self._lock:
            self._cache[sender] = (stamp, ids)
            self._cache.move_to_end(sender)
            while len(self._cache) > self.CACHED:
                self._cache.popitem(last=False)
        return ids


# ----------------------------------------------------------------------------- readers (CLI, console)
class OutboxItem(NamedTuple):
    node: str          # the sender whose outbox holds it
    target: str
    stream: str
    id: int
    created: float     # Unix seconds
    expires_at: float  # Unix seconds
    size: int          # payload bytes
    # what the target's ledger says of it: "" none (it waits for the target), else the receipt's status
    # ("handled", "failed", "expired") or "finished" (at or below the ledger's floor, its receipt no
    # longer kept): the target took it, and the sender has not taken the receipt yet (it gets it again
    # with its next copy, the next time it runs)
    receipted: str = ""

    @property
    def state(self) -> str:
        """What became of it, in the words of `speed outbox` and the console's Durable view."""
        if not self.receipted:
            return "waiting for its target"
        how = "receipted" if self.receipted == "finished" else f"receipted {self.receipted}"
        return f"{how}, receipt not taken by {self.node}"


class PendingCopy(NamedTuple):
    node: str          # the receiver whose inbox holds it
    sender: str
    file: str
    size: int
    arrived: float     # the file's change time (its arrival)


def _node_names(root: str, names: Iterable[str] | None) -> list[str]:
    """The names given (each a node name, or InvalidNameError: never a path out of ROOT), or every
    node directory of ROOT: directories (never links) whose names are node names (anything else a
    member put in ROOT is not listed, let alone shown)."""
    if names:
        return [validate_name(name) for name in names]
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)
                      and is_valid_name(e.name))
    except OSError:
        return []


def list_outboxes(root: str, names: Iterable[str] | None = None) -> list[OutboxItem]:
    """Every message waiting in the outboxes of `names` (default: every node of ROOT), oldest id
    first per target, each with what the target's ledger says of it (`OutboxItem.receipted`). Reads
    the entries' clear header lines and the ledgers' clear lines only: no key needed, no payload read
    (`verify_receipts` checks the receipts' MACs)."""
    out = []
    for node in _node_names(root, names):
        base = os.path.join(root, node, "durable", "outbox")
        try:
            targets = sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False)
                             and is_valid_name(e.name))
        except OSError:
            continue
        for target in targets:
            try:
                fd = os.open(os.path.join(base, target), _DIR)
            except OSError:
                continue
            try:
                files = sorted(n for n in os.listdir(fd) if n.endswith(".msg") and not n.startswith("."))
                ledger: dict[str, StreamLedger] | None = None  # the target's, read once there is an entry
                for name in files:
                    try:
                        meta = outbox_meta(read_small(fd, name, 2 << 20))
                    except (OSError, ValueError):
                        continue
                    if ledger is None:
                        ledger = read_ledger(root, target, node)
                    out.append(OutboxItem(node, target, meta["stream"], meta["id"], meta.get("created", 0.0),
                                          meta.get("expiresAt", 0) / 1000, meta.get("size", 0),
                                          _receipted(ledger, meta["stream"], meta["id"])))
            finally:
                os.close(fd)
    return out


def read_ledger(root: str, receiver: str, sender: str) -> dict[str, StreamLedger]:
    """What `receiver`'s ledger of `sender` holds, per stream (as the receiver rebuilds it when it
    starts: `core.durable.replay_ledger`); empty when there is none or it cannot be read."""
    try:  # never through a link, never a FIFO (it would block), never more than a log can hold
        lines = read_small(os.open(os.path.join(root, receiver, "durable", "ledger"), _DIR), f"{sender}.log",
                           MAX_LOG_BYTES, close_dir=True).splitlines()
    except OSError:
        return {}
    return replay_ledger(lines, receiver, sender)


def _receipted(ledger: dict[str, StreamLedger], stream: str, msg_id: int) -> str:
    book = ledger.get(stream)
    seen = book.seen(msg_id) if book is not None else False
    if seen is False:
        return ""
    return "finished" if seen is True else seen.status


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
    try:  # never through a link, never a FIFO (it would block), never more than a log can hold
        lines = read_small(os.open(os.path.dirname(path), _DIR), os.path.basename(path), MAX_LOG_BYTES,
                           close_dir=True).splitlines()
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
    validate_name(receiver)  # (ROOT/<receiver>/… is read: never a path out of ROOT)
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
            if (senders and sender not in senders) or not is_valid_name(sender):
                continue
            check(f"ledger of {receiver}", os.path.join(base, log), sender)
    return out
