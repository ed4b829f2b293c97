"""Background readers: the registry directory and the trace journals, each with the runtime's
reader (``Registry.scan``, ``JournalTail``).

Each is a daemon thread woken by watchdog events (hints) and by a periodic timeout (the
backstop); results go to the Bridge.  Nothing here touches widgets.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from speed_runtime.fsutil import REGISTRY_DIR, TRACES_DIR
from speed_runtime.journal import JournalTail

from ..models.traces import TraceRecord, record_of
from .bridge import Bridge
from .registry import LockWatch, RegistryReader

try:
    from watchdog.events import (DirCreatedEvent, DirDeletedEvent, DirModifiedEvent, DirMovedEvent, FileClosedEvent,
                                 FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent,
                                 FileSystemEventHandler)
    from watchdog.observers import Observer
    # what wakes a reader, and all the kernel is asked to report: every change, but not our own
    # opens and closes of the files we read (with 5,000 journals read twice a second, 20,000 events
    # a second kept three of watchdog's threads at a third of a core in all, only to be dropped)
    EVENTS = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileDeletedEvent, FileClosedEvent,
              DirCreatedEvent, DirModifiedEvent, DirMovedEvent, DirDeletedEvent]
except Exception:  # noqa: BLE001  pragma: no cover
    Observer = None  # type: ignore[assignment]
    FileSystemEventHandler = object  # type: ignore[assignment,misc]
    EVENTS = []


class _Wake(FileSystemEventHandler):  # type: ignore[misc]
    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def on_any_event(self, event) -> None:  # noqa: ANN001  (only the EVENTS the watch was scheduled for)
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
            obs.schedule(_Wake(self.wake), str(self.watch_dir), recursive=False, event_filter=EVENTS)
            obs.daemon = True
            obs.start()
            self.observer = obs
        except Exception:  # noqa: BLE001 - inotify limits etc.: the periodic pass still runs
            self.observer = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
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
        finally:
            # The thread that starts the observer stops it: a stop() from another thread could
            # find no observer yet while this one was still starting it, and leave it running.
            self._unwatch()

    def _unwatch(self) -> None:
        observer, self.observer = self.observer, None
        if observer is None:
            return
        try:
            observer.stop()
            observer.join()
        except Exception:  # noqa: BLE001 - a watch that cannot be stopped is a daemon: the process ends it
            pass

    def step(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def poke(self) -> None:
        self.wake.set()

    def stop(self) -> None:
        """Ask the thread to end and wait a bounded time; it stops its observer as it ends."""
        self.stop_event.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


class RegistrySource(_Loop):
    """Scans speed_registry/ on every watchdog event and at least once per interval, and asks
    who holds the registry lock at most once a second."""

    min_gap = 0.2  # at most ~5 scans a second, however busy the directory is

    def __init__(self, bridge: Bridge, root: Path, interval: float = 1.0) -> None:
        super().__init__(bridge, Path(root) / REGISTRY_DIR, interval)
        self.root = Path(root)
        self.reader = RegistryReader(self.root)
        self.lock = LockWatch(self.reader)
        self._last: list | None = None
        self._lock_state = self.lock.state
        self._problem: str | None = None

    def step(self) -> None:
        records = self.reader.scan()
        if self._last is None or len(records) != len(self._last) or any(
                a is not b for a, b in zip(records, self._last)):
            self._last = records
            self.bridge.push_registry(records)
        if self.reader.problem != self._problem:
            self._problem = self.reader.problem
            self.bridge.push_problem("registry", self._problem)
        lock = self.lock.poll()
        if lock != self._lock_state:
            self._lock_state = lock
            self.bridge.push_lock(lock)


class JournalTailer(_Loop):
    """Follows every ``*.jsonl`` in speed_traces/ with the runtime's ``JournalTail`` (appends,
    rotation, truncation, torn last lines; lines bounded, an over-long one is one malformed
    line). A path that is not a regular file (a FIFO, a symlink) is reported, never read."""

    per_pass = 5_000  # records per journal per pass: a large backlog is read over several passes

    def __init__(self, bridge: Bridge, root: Path, interval: float = 0.5,
                 start_at_end_bytes: int = 4 << 20) -> None:
        super().__init__(bridge, Path(root) / TRACES_DIR, interval)
        self.tails: dict[str, JournalTail] = {}
        self.start_at_end_bytes = start_at_end_bytes  # history read at start: the last N bytes per file
        self.problems: dict[str, str] = {}

    def _tail(self, name: str) -> JournalTail:
        tail = self.tails.get(name)
        if tail is None:
            tail = self.tails[name] = JournalTail(str(self.watch_dir / name))
            tail.start_near_end(self.start_at_end_bytes)
        return tail

    def step(self) -> None:
        try:
            with os.scandir(self.watch_dir) as it:
                found = {e.name: e for e in it if e.name.endswith(".jsonl")}
        except OSError:
            return
        names = sorted(found)
        for gone in set(self.tails) - set(names):
            del self.tails[gone]
        batch: list[TraceRecord] = []
        bad = 0
        more = False
        for name in names:
            tail = self._tail(name)
            try:
                if tail.unchanged(found[name].stat(follow_symlinks=False)):
                    continue  # as the last read left it (a stat instead of opening and reading it)
            except OSError:
                pass  # gone meanwhile: the read says so
            before = tail.bad_lines
            events = tail.read(self.per_pass)
            more = more or len(events) >= self.per_pass
            bad += tail.bad_lines - before
            for e in events:
                r = record_of(e)
                if r is not None:
                    batch.append(r)
            self._report(name, tail.error)
        for gone in set(self.problems) - set(names):
            self._report(gone, None)
        if batch or bad:
            batch.sort(key=lambda r: r.ts)  # interleave the journals of one pass by time
            self.bridge.push_records(batch, bad)
        if more:
            self.poke()  # the rest of a backlog at the next pass, not after the interval

    def _report(self, name: str, error: str | None) -> None:
        if self.problems.get(name) == error:
            return
        if error is None:
            self.problems.pop(name, None)
        else:
            self.problems[name] = error
        self.bridge.push_problem(f"journal {name}", error)
