"""Trace journals (wire contract §8): an appending, rotating writer and a tolerant reader."""
from __future__ import annotations

import binascii
import json
import os
import threading
from typing import Iterator

from .fsutil import TRACES_DIR, ensure_private_dir
from .trace import EnvelopeTrace, LeaseTrace, parse_record

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_BACKUPS = 3
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_UNWRITTEN_BYTES = 16 * 1024 * 1024


class JournalWriter:
    """Buffers records and appends them on flush(); rotates at `max_bytes` (name.jsonl.1 …)."""

    def __init__(self, root: str, node: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 backups: int = DEFAULT_BACKUPS, envelope_limit: int = 64 * 1024):
        self.dir = ensure_private_dir(os.path.join(root, TRACES_DIR), what="trace directory")
        self.path = os.path.join(self.dir, f"{node}.jsonl")
        self.max_bytes, self.backups, self.envelope_limit = max_bytes, backups, envelope_limit
        self._lock = threading.Lock()
        self._pending: list[EnvelopeTrace | LeaseTrace] = []
        self._fd = self._open()
        self.records_written = 0
        self._unwritten = b""  # bytes a failed append (ENOSPC, EIO) left over, written first next time
        self.bytes_dropped = 0

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def __call__(self, event: object) -> None:
        """Observer entry point: keep the event; encoding waits for flush(), off the hot path."""
        if isinstance(event, (EnvelopeTrace, LeaseTrace)):
            with self._lock:
                self._pending.append(event)

    def flush(self) -> None:
        with self._lock:
            if not (self._pending or self._unwritten) or self._fd < 0:
                return
            events, self._pending = self._pending, []
            data = self._unwritten + "".join(encode_line(e, self.envelope_limit) for e in events).encode("utf-8")
            view, done = memoryview(data), 0
            try:
                while done < len(data):
                    done += os.write(self._fd, view[done:])
            except OSError:  # a full or failing disk loses no record while it lasts (bounded), nor the thread
                self._unwritten = bytes(view[done:])
                if len(self._unwritten) > MAX_UNWRITTEN_BYTES:
                    self.bytes_dropped += len(self._unwritten)
                    self._unwritten = b""
                return
            self._unwritten = b""
            self.records_written += len(events)
            if os.fstat(self._fd).st_size >= self.max_bytes:
                self._rotate()

    def _rotate(self) -> None:
        os.close(self._fd)
        for i in range(self.backups, 0, -1):
            src = self.path if i == 1 else f"{self.path}.{i - 1}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i}")
        self._fd = self._open()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


_dump = json.dumps


def encode_line(event: EnvelopeTrace | LeaseTrace, envelope_limit: int) -> str:
    """One journal line; the same record as event.to_record(), built without a dict per record.
    Node names, types, outcomes and reasons are the runtime's own tokens; every string that can
    come from a peer goes through json.dumps."""
    if isinstance(event, LeaseTrace):
        return (f'{{"kind":"lease","ts":{event.ts!r},"node":{_dump(event.node)},"subject":{_dump(event.subject)},'
                f'"event":{_dump(event.event)}}}\n')
    e = event
    line = (f'{{"kind":"envelope","ts":{e.ts!r},"node":{_dump(e.node)},"dir":"{e.dir}","peer":{_dump(e.peer)},'
            f'"type":{_dump(e.type)},"seq":{e.seq},"size":{e.size},"outcome":"{e.outcome}"')
    if e.reason is not None:
        line += f',"reason":{_dump(e.reason)}'
    if e.request_id is not None:
        line += f',"requestId":{_dump(e.request_id)}'
    if e.service is not None:
        line += f',"service":{_dump(e.service)}'
    if e.status is not None:
        line += f',"status":{_dump(e.status)}'
    if e.error_code is not None:
        line += f',"errorCode":{_dump(e.error_code)}'
    if e.latency_ms is not None:
        line += f',"latencyMs":{e.latency_ms!r}'
    if e.envelope is not None and len(e.envelope) <= envelope_limit:
        line += ',"envelope":"' + binascii.b2a_base64(e.envelope, newline=False).decode("ascii") + '"'
    return line + "}\n"


def iter_journal_lines(path: str, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """Complete lines from `offset`; a torn last line (no newline yet) is left for later."""
    with open(path, "rb") as f:
        f.seek(offset)
        pos = offset
        for line in f:
            if not line.endswith(b"\n"):
                return
            pos += len(line)
            yield pos, line


def parse_line(line: bytes) -> EnvelopeTrace | LeaseTrace | None:
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        return parse_record(json.loads(line))
    except (ValueError, RecursionError):
        return None


def read_journal(path: str) -> tuple[list[EnvelopeTrace | LeaseTrace], int]:
    """Every valid record of one journal, and how many lines were not valid records."""
    events, bad = [], 0
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            event = parse_line(line)
            if event is None:
                bad += 1
            else:
                events.append(event)
    return events, bad
