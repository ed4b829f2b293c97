"""The sender's half of the durable extension: the persistent outbox, one stream per target.

A durable send assigns the next id of the target's stream and writes the sealed payload to
`outbox/<target>/<id>.msg` (fsync, rename, fsync of the directory) before it returns. The durable
thread delivers what waits to targets that are online and speak `durable`, as ordinary envelopes
sealed for the target's current instance, again after a growing delay while no receipt came. A
receipt is appended to `receipts/<target>.log` and made durable (fdatasync) before the entry is
removed; an entry whose time-to-live ran out while no live instance of the target holds a copy is
recorded as expired the same way and removed (a send error).
"""
from __future__ import annotations

import errno
import json
import os
import threading
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..core.durable import (DurableFields, OutboxFullError, Receipt, compact_receipt_log, is_stream,
                            open_outbox_entry, outbox_meta, seal_outbox_entry)
from ..core.errors import DirectoryError
from ..core.keys import Key
from ..core.names import is_valid_name
from ..fsutil import close_quietly
from .durable_store import AppendLog, StoreError, Syncs, private_dir, read_small, write_durably

WINDOW = 128            # copies delivered to a target and not yet receipted, at most
MAX_RETRY_SECONDS = 60.0
COMPACT_BYTES = 4 << 20  # a receipt log is compacted beyond this size (a checkpoint and what follows it)


@dataclass
class Pending:
    id: int
    created: float
    expires_ms: int
    size: int
    delivered_to: str | None = None  # the target instance holding our latest copy
    next_try: float = 0.0             # monotonic: when to deliver another copy
    copies: int = 0


@dataclass
class TargetOutbox:
    target: str
    stream: str
    pending: "OrderedDict[int, Pending]" = field(default_factory=OrderedDict)

    @property
    def base(self) -> int:
        """The lowest id still pending: every id below it is finished for us."""
        return next(iter(self.pending), 0)


class Outbox:
    """All of a node's outbox directories, loaded at start. Thread-safe. No descriptor is kept per
    target: a target's directory and receipt log are opened for each store, read and batch of
    receipts and closed again, so a node with any number of targets holds four descriptors here."""

    def __init__(self, home_fd: int, home: str, key: Key, syncs: Syncs, limit: int, max_bytes: int):
        self.key, self.syncs = key, syncs
        self.limit, self.max_bytes = limit, max_bytes
        self.lock = threading.Lock()
        self.dir_fd, self.path = private_dir(home_fd, home, "outbox", syncs)
        self.receipts_fd, self.receipts_path = private_dir(home_fd, home, "receipts", syncs)
        self.targets: dict[str, TargetOutbox] = {}
        self.next_id: dict[str, int] = {}
        self.bytes = 0
        self.skipped: list[str] = []  # what was found and left alone (the extension reports it)
        self.waiting = 0  # messages in all targets' pending (kept, not summed at each store)
        for target in sorted(os.listdir(self.dir_fd)):
            if not is_valid_name(target):
                continue  # not a target's directory: nothing of ours (a name is never shown as given)
            try:
                self._load(target)
            except OSError as exc:
                self.skipped.append(f"{os.path.join(self.path, target)}: {exc.strerror or exc}")

    # ------------------------------------------------------------------ loading
    def _load(self, target: str) -> None:
        with self._target_dir(target) as dir_fd:
            try:
                stream = read_small(dir_fd, "stream", 64).decode().strip()
            except (OSError, UnicodeDecodeError):
                return  # created but its stream never written: nothing was ever stored there
            if not is_stream(stream):
                return
            box = TargetOutbox(target, stream)
            highest = 0
            for name in sorted(os.listdir(dir_fd)):
                if name.startswith("."):  # a write cut short by a crash: never confirmed to anyone
                    try:
                        os.unlink(name, dir_fd=dir_fd)
                    except OSError:
                        pass  # not a file of ours (a directory…): left alone
                    continue
                if not name.endswith(".msg"):
                    continue
                try:
                    meta = outbox_meta(read_small(dir_fd, name, 4 << 20))
                except (OSError, ValueError):
                    continue
                if meta["stream"] == stream:
                    box.pending[meta["id"]] = Pending(meta["id"], meta.get("created", 0.0), meta["expiresAt"],
                                                      meta.get("size", 0))
                    self.bytes += meta.get("size", 0)
                    highest = max(highest, meta["id"])
        box.pending = OrderedDict(sorted(box.pending.items()))
        lines: list[bytes] = []
        if os.path.lexists(os.path.join(self.receipts_path, f"{target}.log")):  # (written at the first receipt)
            log = self._receipt_log(target, read=True)
            lines = log.lines
            log.close()
        for line in lines:  # ids already receipted or expired are never given again
            try:
                kind, obj = next(iter(json.loads(line).items()))
                if obj.get("stream") == stream:
                    highest = max(highest, int(obj["maxId"] if kind == "checkpoint" else obj["id"]))
            except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
                continue
        self.targets[target] = box
        self.waiting += len(box.pending)
        self.next_id[target] = highest + 1

    @contextmanager
    def _target_dir(self, target: str) -> Iterator[int]:
        """The target's outbox directory, opened for one operation (created 0700 when missing;
        a link or anything not a directory of ours in its place is refused)."""
        try:
            fd, _ = private_dir(self.dir_fd, self.path, target, self.syncs)
        except (OSError, DirectoryError) as exc:
            raise StoreError(getattr(exc, "errno", None) or errno.EPERM,
                             f"cannot open {os.path.join(self.path, target)}: {getattr(exc, 'strerror', None) or exc}")\
                from None
        try:
            yield fd
        finally:
            os.close(fd)

    def _receipt_log(self, target: str, read: bool = False) -> AppendLog:
        return AppendLog(self.receipts_fd, f"{target}.log", self.syncs, self.receipts_path, read=read)

    def _create(self, target: str) -> TargetOutbox:
        stream = uuid.uuid4().hex
        with self._target_dir(target) as dir_fd:
            write_durably(dir_fd, "stream", (stream + "\n").encode(), self.syncs, os.path.join(self.path, target))
        self.next_id[target] = 1
        box = self.targets[target] = TargetOutbox(target, stream)
        return box

    # ------------------------------------------------------------------ storing
    def store(self, target: str, body: bytes, ttl: float, now: float) -> tuple[str, int]:
        """Write one message durably; returns (stream, id). Raises OutboxFullError, or StoreError
        (nothing stored) when the entry cannot be written."""
        with self.lock:
            waiting = self.waiting
            if waiting >= self.limit or self.bytes + len(body) > self.max_bytes:
                raise OutboxFullError(
                    f"the outbox holds {waiting} messages ({self.bytes} bytes), its limit is {self.limit} "
                    f"messages and {self.max_bytes} bytes; nothing was stored: wait until targets come "
                    "online and take what waits, or raise outbox_limit / outbox_max_bytes")
            box = self.targets.get(target) or self._create(target)
            msg_id = self.next_id[target]
            expires_ms = int((now + ttl) * 1000)
            meta = {"target": target, "stream": box.stream, "id": msg_id, "created": now, "expiresAt": expires_ms,
                    "size": len(body), "type": "MESSAGE"}
            with self._target_dir(target) as dir_fd:
                write_durably(dir_fd, f"{msg_id:020d}.msg", seal_outbox_entry(meta, body, self.key, os.urandom(12)),
                              self.syncs, os.path.join(self.path, target))
            self.next_id[target] = msg_id + 1
            box.pending[msg_id] = Pending(msg_id, now, expires_ms, len(body))
            self.waiting += 1
            self.bytes += len(body)
            return box.stream, msg_id

    def payload(self, box: TargetOutbox, msg_id: int) -> tuple[bytes, DurableFields]:
        with self._target_dir(box.target) as dir_fd:
            meta, body = open_outbox_entry(read_small(dir_fd, f"{msg_id:020d}.msg", 4 << 20), self.key)
        with self.lock:
            base = min(box.base or msg_id, msg_id)
        return body, DurableFields(box.stream, msg_id, base, meta["expiresAt"])

    # ------------------------------------------------------------------ finishing
    def finish(self, items: Iterable[tuple[TargetOutbox, int, dict]]
               ) -> tuple[list[tuple[TargetOutbox, Pending, dict]], StoreError | None]:
        """Record receipts and expiries (per target one append of all its records and one
        fdatasync: whole or absent), then remove their entries. Each item is (box, id, log record);
        items whose id no longer waits are skipped. Returns what was finished and the first store
        failure: a target whose log cannot be written keeps its entries (its receipts come again
        with the next copy, its expiries are tried again)."""
        done: list[tuple[TargetOutbox, Pending, dict]] = []
        failed: StoreError | None = None
        with self.lock:
            batches: dict[str, list[tuple[TargetOutbox, Pending, dict]]] = {}
            for box, msg_id, record in items:
                p = box.pending.get(msg_id)
                if p is not None and all(q.id != msg_id for _, q, _ in batches.get(box.target, ())):
                    batches.setdefault(box.target, []).append((box, p, record))
            for target, batch in batches.items():
                data = b"".join((json.dumps(record, separators=(",", ":")) + "\n").encode() for _, _, record in batch)
                try:
                    log = self._receipt_log(target)
                except StoreError as exc:
                    failed = failed or exc
                    continue
                try:
                    log.append(data, sync=True)
                except StoreError as exc:
                    log.close()
                    failed = failed or exc
                    continue
                try:
                    if log.size > COMPACT_BYTES:
                        log.replace(compact_receipt_log(read_small(self.receipts_fd, log.name, 2 * COMPACT_BYTES)
                                                        .splitlines()))
                except OSError as exc:  # the records are on disk all the same: only the compaction waits
                    failed = failed or StoreError(exc.errno, f"cannot compact {log.path}: {exc.strerror or exc}")
                finally:
                    log.close()
                for box, p, record in batch:
                    del box.pending[p.id]
                    self.waiting -= 1
                    self.bytes -= p.size
                done += batch
        for target in {box.target for box, _, _ in done}:  # after the records are on disk: a crash in between only repeats a copy
            try:
                with self._target_dir(target) as dir_fd:
                    for box, p, _ in done:
                        if box.target == target:
                            try:
                                os.unlink(f"{p.id:020d}.msg", dir_fd=dir_fd)
                            except FileNotFoundError:
                                pass
            except OSError:
                pass  # an entry left behind is finished: its receipt is recorded (a duplicate at the next start)
        return done, failed

    def items(self) -> list[tuple[str, Pending]]:
        with self.lock:
            return [(t, p) for t, box in self.targets.items() for p in box.pending.values()]

    def close(self) -> None:
        with self.lock:
            self.targets.clear()
            close_quietly(self.dir_fd, self.receipts_fd)


def receipt_record(receipt: Receipt) -> dict:
    return {"receipt": receipt.to_json()}


def expiry_record(stream: str, msg_id: int, reason: str, now: float) -> dict:
    return {"expired": {"stream": stream, "id": msg_id, "reason": reason, "time": int(now * 1000)}}


def next_retry(retry_seconds: float, copies: int) -> float:
    return min(MAX_RETRY_SECONDS, retry_seconds * 2 ** max(0, copies - 1))

