"""Thread-safe hand-over from runtime/watcher threads to the app.

Threads call ``push_*``; the app drains everything on a ~10 Hz timer.  Never one Textual
message per envelope, and runtime threads never touch widgets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..models.traces import TraceRecord

if TYPE_CHECKING:
    from speed_runtime.registry import RegistryRecord

    from .registry import LockState


@dataclass
class Drained:
    registry: list[RegistryRecord] | None = None  # newest full scan, if any since the last drain
    records: list[TraceRecord] = field(default_factory=list)
    bad_lines: int = 0
    notes: list[Any] = field(default_factory=list)  # misc events (observer events, node state)
    dropped: int = 0
    lock: LockState | None = None  # the registry lock, when its state changed since the last drain
    problems: dict[str, str | None] = field(default_factory=dict)  # where → what a reader cannot read (None: fixed)


class Bridge:
    def __init__(self, max_pending: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._registry: list[RegistryRecord] | None = None
        self._lock_state: LockState | None = None
        self._problems: dict[str, str | None] = {}
        self._records: list[TraceRecord] = []
        self._notes: list[Any] = []
        self._bad = 0
        self._dropped = 0
        self.max_pending = max_pending

    def push_registry(self, entries: list[RegistryRecord]) -> None:
        with self._lock:
            self._registry = entries

    def push_lock(self, state: LockState) -> None:
        with self._lock:
            self._lock_state = state

    def push_problem(self, where: str, text: str | None) -> None:
        """A file a reader skips (not a regular file, unreadable…), or None once it is fine."""
        with self._lock:
            self._problems[where] = text

    def push_records(self, records: list[TraceRecord], bad_lines: int = 0) -> None:
        with self._lock:
            self._records.extend(records)
            self._bad += bad_lines
            over = len(self._records) - self.max_pending
            if over > 0:  # the app is far behind: keep the newest, count the rest
                del self._records[:over]
                self._dropped += over

    def push_note(self, note: Any) -> None:
        with self._lock:
            self._notes.append(note)

    def drain(self) -> Drained:
        with self._lock:
            d = Drained(self._registry, self._records, self._bad, self._notes, self._dropped, self._lock_state,
                        self._problems)
            self._registry = None
            self._lock_state = None
            self._problems = {}
            self._records = []
            self._notes = []
            self._bad = 0
            self._dropped = 0
        return d
