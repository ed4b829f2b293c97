"""Registry monitor: a cache of every entry, kept fresh by watchdog hints and rescans, and the
observations (join, expiry, leave) that follow from comparing one view with the next."""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from watchdog.events import (FileClosedEvent, FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent,
                             FileSystemEvent, FileSystemEventHandler)
from watchdog.observers import Observer

from .fsutil import BOOT_ID, boottime
from .lease import BadEntryError, RegistryEntry, lease_state
from .registry import SUFFIX, FileStamp, Registry


@dataclass
class Seen:
    id: str
    state: str  # online | leaving | stale


class _QuietStop(logging.Filter):
    """watchdog logs an error when an emitter is stopped while it reads an event, a race inside its
    own stop() that loses nothing we need (rescans follow); keep it from reaching users' stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in record.getMessage()


logging.getLogger("watchdog.observers.inotify").addFilter(_QuietStop())

# Opens and closes without writing are left out on purpose: every node reads every entry, and a
# hint per read would make the nodes' watches feed each other without end.
_CHANGES = [FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent]


class _Hints(FileSystemEventHandler):
    def __init__(self, monitor: "RegistryMonitor"):
        self._monitor = monitor

    def on_any_event(self, event: FileSystemEvent) -> None:
        for path in (event.src_path, getattr(event, "dest_path", "")):
            base = os.path.basename(os.fsdecode(path))
            if base.endswith(SUFFIX) and not base.startswith("."):
                self._monitor.hint(base[:-len(SUFFIX)])


class RegistryMonitor:
    """Thread-safe cache of registry entries. `observe` is called with (event, subject)."""

    def __init__(self, registry: Registry, own_name: str, observe: Callable[[str, str], None],
                 wake: Callable[[], None]):
        self._registry = registry
        self._own = own_name
        self._observe = observe
        self._wake = wake
        self._lock = threading.Lock()
        # each cached entry with the file version it was read from: one read gets both
        self._versions: dict[str, tuple[FileStamp, RegistryEntry]] = {}
        self._seen: dict[str, Seen] = {}
        self._dirty: set[str] = set()
        self.bad_entries: dict[str, str] = {}
        self._observer: Observer | None = None

    def start(self) -> None:
        self._observer = Observer()
        self._observer.schedule(_Hints(self), self._registry.dir, recursive=False, event_filter=_CHANGES)
        self._observer.start()
        self.rescan()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join()
            self._observer = None

    def hint(self, name: str) -> None:
        with self._lock:
            self._dirty.add(name)
        self._wake()

    def get(self, name: str) -> RegistryEntry | None:
        version = self._versions.get(name)
        return None if version is None else version[1]

    def current(self, name: str) -> RegistryEntry | None:
        """The entry as the file holds it now (§5.4 step 1: the sender reads the entry): the
        cached one while the file is the version it came from, else read afresh. One stat instead
        of a read, and no window in which a restarted peer's old instance ID is still used because
        the watch's hint has not been processed yet."""
        version = self._versions.get(name)
        if version is not None and version[0] == self._registry.stamp(name):
            return version[1]
        return self.refresh(name)

    def refresh(self, name: str) -> RegistryEntry | None:
        """Read one entry from disk now (a peer that has just started, or changed)."""
        try:
            entry, stamp = self._registry.read_stamped(name)
        except BadEntryError as exc:
            with self._lock:
                self.bad_entries[name] = str(exc)
                self._versions.pop(name, None)
            return None
        with self._lock:
            self.bad_entries.pop(name, None)
            if entry is None:
                self._versions.pop(name, None)
            else:
                self._versions[name] = (stamp, entry)
        return entry

    def entries(self) -> dict[str, RegistryEntry]:
        with self._lock:
            return {name: version[1] for name, version in self._versions.items()}

    def rescan(self) -> None:
        names = set(self._registry.names())
        with self._lock:
            gone = set(self._versions) - names
            self._dirty.clear()
        for name in names | gone:
            self.refresh(name)
        self.judge(time.time())

    def process_hints(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for name in dirty:
            self.refresh(name)

    def judge(self, now: float) -> None:
        """Compare each entry's lease state with the last one seen and report the changes."""
        bt = boottime()
        current = self.entries()
        for name, entry in current.items():
            state = lease_state(entry, now, BOOT_ID, bt)
            before = self._seen.get(name)
            self._seen[name] = Seen(entry.id, state)
            if name == self._own:
                continue
            if before is None or before.id != entry.id:
                if state != "stale":
                    self._observe("observed_join", name)
            elif before.state != "stale" and state == "stale":
                self._observe("observed_expiry", name)
            elif before.state == "online" and state == "leaving":
                self._observe("observed_leave", name)
        for name in set(self._seen) - set(current):
            before = self._seen.pop(name)
            if name != self._own and before.state == "online":
                self._observe("observed_leave", name)
