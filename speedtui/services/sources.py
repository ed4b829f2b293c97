"""Background readers: the registry directory and the trace journals.

Each is a daemon thread woken by watchdog events (hints) and by a periodic timeout (the
backstop); results go to the Bridge.  Nothing here touches widgets.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from .bridge import Bridge
from ..models.registry import REGISTRY_DIR
from .registry import read_registry
from ..models.traces import TraceRecord, parse_record

TRACES_DIR = "speed_traces"

try:
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer
except Exception:  # noqa: BLE001  pragma: no cover
    Observer = None  # type: ignore[assignment]
    FileSystemEventHandler = object  # type: ignore[assignment,misc]


class _Wake(FileSystemEventHandler):  # type: ignore[misc]
    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    # our own reads cause "opened"/"closed_no_write" events: those must not wake us
    WAKE_ON = frozenset({"created", "modified", "moved", "deleted", "closed"})

    def on_any_event(self, event) -> None:  # noqa: ANN001
        if event.event_type in self.WAKE_ON:
            self.event.set()


class _Loop:
    min_gap = 0.05  # coalesce bursts of events: at most ~20 passes a second

    def __init__(self, bridge: Bridge, watch_dir: Path, interval: float) -> None:
        self.bridge = bridge
        self.watch_dir = watch_dir
        self.interval = interval
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.observer = None
        self.passes = 0

    def _watch(self) -> None:
        if Observer is None or self.observer is not None or not self.watch_dir.is_dir():
            return
        try:
            obs = Observer()
            obs.schedule(_Wake(self.wake), str(self.watch_dir), recursive=False)
            obs.daemon = True
            obs.start()
            self.observer = obs
        except Exception:  # noqa: BLE001 - inotify limits etc.: the periodic pass still runs
            self.observer = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            self._watch()
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - a reader never dies
                self.bridge.push_note(("error", f"{type(self).__name__}: {exc}"))
            self.passes += 1
            if self.stop_event.wait(self.min_gap):
                break
            self.wake.wait(self.interval)
            self.wake.clear()

    def step(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def poke(self) -> None:
        self.wake.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        if self.observer is not None:
            try:
                self.observer.stop()
                self.observer.join(timeout=2)
            except Exception:  # noqa: BLE001
                pass
        if self.thread is not None:
            self.thread.join(timeout=2)


class RegistrySource(_Loop):
    """Re-reads speed_registry/ on every watchdog event and at least once per interval."""

    min_gap = 0.2  # at most ~5 scans a second, however busy the directory is

    def __init__(self, bridge: Bridge, root: Path, interval: float = 1.0) -> None:
        super().__init__(bridge, Path(root) / REGISTRY_DIR, interval)
        self.root = Path(root)
        self.cache: dict = {}
        self._last: list | None = None

    def step(self) -> None:
        entries = read_registry(self.root, self.cache)
        if self._last is None or len(entries) != len(self._last) or any(
                a is not b for a, b in zip(entries, self._last)):
            self._last = entries
            self.bridge.push_registry(entries)


class JournalTailer(_Loop):
    """Follows every ``*.jsonl`` in speed_traces/ (rotation aware), new bytes only."""

    def __init__(self, bridge: Bridge, root: Path, interval: float = 0.5,
                 start_at_end_bytes: int = 4 << 20) -> None:
        super().__init__(bridge, Path(root) / TRACES_DIR, interval)
        self.offsets: dict[str, tuple[int, int]] = {}  # name -> (inode, offset)
        self.partial: dict[str, bytes] = {}
        self.start_at_end_bytes = start_at_end_bytes  # history read at start: last N bytes per file

    def step(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.watch_dir) if n.endswith(".jsonl"))
        except OSError:
            return
        batch: list[TraceRecord] = []
        bad = 0
        for name in names:
            recs, b = self._read(name)
            batch.extend(recs)
            bad += b
        if batch or bad:
            batch.sort(key=lambda r: r.ts)  # interleave the journals of one pass by time
            self.bridge.push_records(batch, bad)

    def _read(self, name: str) -> tuple[list[TraceRecord], int]:
        path = self.watch_dir / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return [], 0
        records: list[TraceRecord] = []
        bad = 0
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            inode, off = self.offsets.get(name, (st.st_ino, -1))
            if inode != st.st_ino or (off >= 0 and st.st_size < off):
                off = 0  # rotated or truncated
                self.partial.pop(name, None)
            if off < 0:  # first sight: read the tail only
                off = max(0, st.st_size - self.start_at_end_bytes)
                skip_first = off > 0
            else:
                skip_first = False
            if st.st_size == off:
                self.offsets[name] = (st.st_ino, off)
                return [], 0
            fh.seek(off)
            chunk = fh.read(min(st.st_size - off, 16 << 20))
            off += len(chunk)
            self.offsets[name] = (st.st_ino, off)
        data = self.partial.pop(name, b"") + chunk
        lines = data.split(b"\n")
        tail = lines.pop()
        if tail:
            self.partial[name] = tail
        if skip_first and lines:
            lines.pop(0)
        for ln in lines:
            if not ln.strip():
                continue
            try:
                rec = parse_record(json.loads(ln))
            except ValueError:
                rec = None
            if rec is None:
                bad += 1
            else:
                records.append(rec)
        return records, bad
