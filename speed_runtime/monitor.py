"""Registry monitor: a cache of registry entries, kept fresh by inotify hints (from the node's one
inotify instance) and by periodic rescans that only `stat` the files, and the observations
(join, expiry, leave) that follow from comparing one verdict with the next.

Cost is in proportion to changes, not to entries: a file is read only when its stamp (inode,
mtime, size) changed; leases are re-judged when a file changed, when a lease is due to run out
(a heap of expiry times), and in one pass per rescan period (which also asks the OS about pids).
"""
from __future__ import annotations

import heapq
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from .core.entry import RegistryEntry
from .core.errors import BadEntryError
from .core.liveness import STALE, HostFacts, Liveness, expires_at, judge, lease_seconds
from .fsutil import FILE_TIME_UNCERTAINTY
from .registry import FileStamp, Registry

MAX_DEPARTED = 4096  # departed instances remembered (oldest forgotten first)


@dataclass
class Seen:
    id: str
    state: str          # online | leaving | stale
    stale_since: float  # wall-clock time it was first judged stale (0 while live)


class RegistryMonitor:
    """Thread-safe cache of registry entries. `observe(event, subject)` gets the observations."""

    def __init__(self, registry: Registry, own_name: str, observe: Callable[[str, str], None],
                 facts: Callable[[], HostFacts]):
        self._registry = registry
        self._own = own_name
        self._observe = observe
        self._facts = facts
        self._lock = threading.Lock()
        # each cached entry with the file version it was read from: one read gets both
        self._versions: dict[str, tuple[FileStamp, RegistryEntry]] = {}
        self._seen: dict[str, Seen] = {}
        self._dirty: set[str] = set()
        self._expiries: list[tuple[float, str]] = []
        self.bad_entries: dict[str, str] = {}
        # instances whose entries went away (left, or replaced by a new instance), with when we saw
        # that: their envelopes that arrived before stay theirs (bounded)
        self._departed: "OrderedDict[tuple[str, bytes], tuple[RegistryEntry, float]]" = OrderedDict()

    # ------------------------------------------------------------------ hints and reads
    def hint(self, name: str) -> None:
        with self._lock:
            self._dirty.add(name)

    def get(self, name: str) -> RegistryEntry | None:
        version = self._versions.get(name)
        return None if version is None else version[1]

    def current(self, name: str) -> RegistryEntry | None:
        """The entry as the file holds it now (§5.4 step 1: the sender reads the entry): the
        cached one while the file is the version it came from, else read afresh. One stat
        instead of a read, and no window in which a restarted peer's old instance ID is used
        because a hint has not been processed yet."""
        version = self._versions.get(name)
        if version is not None and version[0] == self._registry.stamp(name):
            return version[1]
        return self.refresh(name)

    def stamp_of(self, name: str) -> FileStamp | None:
        """The file version of the cached entry (as `current` last validated it)."""
        version = self._versions.get(name)
        return None if version is None else version[0]

    def stamp_matches(self, name: str, stamp: FileStamp | None) -> bool:
        """Whether the file is still the version `stamp` (one stat)."""
        return stamp is not None and self._registry.stamp(name) == stamp

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
            before = self._versions.get(name)
            if before is not None and (entry is None or entry.id != before[1].id):
                self._remember_departure(before[1], entry)
            if entry is None:
                self._versions.pop(name, None)
            else:
                self._versions[name] = (stamp, entry)
        return entry

    def _remember_departure(self, entry: RegistryEntry, successor: RegistryEntry | None) -> None:
        """An instance's entry went away (deregistered, reaped) or was replaced: it held the name
        until the earliest of now, the end of its lease, and its successor's registration — so a
        fenced instance (paused past its lease, name taken over) gains nothing from our delay."""
        fence = entry.last_heartbeat + lease_seconds(entry)
        if successor is not None:
            fence = min(fence, successor.startup_timestamp or successor.last_heartbeat)
        # a file's change time can lie a tick before its real arrival: near a fence (a lease that ran
        # out, a successor's registration), only an envelope that surely arrived before it counts
        until = min(time.time(), fence - FILE_TIME_UNCERTAINTY)
        self._departed[(entry.name, entry.id_bytes)] = (entry, until)
        while len(self._departed) > MAX_DEPARTED:
            self._departed.popitem(last=False)

    def departed(self, name: str, data: bytes, arrived: float) -> RegistryEntry | None:
        """The entry of the instance of `name` that sealed `data`, if that instance's entry went
        away only after `arrived` (the envelope was delivered while it was registered)."""
        source_id = bytes(data[32:48])
        found = self._departed.get((name, source_id))
        if found is None or arrived > found[1]:
            return None
        return found[0]

    def entries(self) -> dict[str, RegistryEntry]:
        with self._lock:
            return {name: version[1] for name, version in self._versions.items()}

    def verdict(self, name: str, now: float | None = None) -> Liveness | None:
        entry = self.get(name)
        return None if entry is None else judge(entry, time.time() if now is None else now, self._facts())

    # ------------------------------------------------------------------ keeping up
    def rescan(self, now: float) -> None:
        """Stat every entry file, read the changed ones, judge every entry (pids included)."""
        stamps = self._registry.stamps()
        with self._lock:
            known = {name: version[0] for name, version in self._versions.items()}
            self._dirty.clear()
        for name, stamp in stamps.items():
            if known.get(name) != stamp:
                self.refresh(name)
        for name in set(known) - set(stamps):
            self.refresh(name)
        for name in set(self.bad_entries) - set(stamps):
            self.bad_entries.pop(name, None)
        self._judge(list(self.entries()), now, check_pid=True)

    def process_hints(self, now: float) -> None:
        """Read the entries that hints named, and judge those and the leases now due."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for name in dirty:
            self.refresh(name)
        due = set(dirty)
        while self._expiries and self._expiries[0][0] <= now:
            due.add(heapq.heappop(self._expiries)[1])
        if due:
            self._judge(sorted(due), now, check_pid=bool(dirty))

    def _judge(self, names: list[str], now: float, check_pid: bool) -> None:
        facts = self._facts()
        for name in names:
            entry = self.get(name)
            before = self._seen.get(name)
            if entry is None:
                if before is not None:
                    del self._seen[name]
                    if name != self._own and before.state == "online":
                        self._observe("observed_leave", name)
                continue
            verdict = judge(entry, now, facts, check_pid=check_pid)
            if not check_pid and before is not None and before.id == entry.id and before.state == STALE:
                verdict = verdict._replace(state=STALE)  # a pid found gone stays gone
            state = verdict.state
            stale_since = (before.stale_since if before is not None and before.id == entry.id and before.stale_since
                           else now) if state == STALE else 0.0
            self._seen[name] = Seen(entry.id, state, stale_since)
            if state != STALE:
                heapq.heappush(self._expiries, (expires_at(entry, now, facts) + 0.001, name))
            if name == self._own:
                continue
            if before is None or before.id != entry.id:
                if state != STALE:
                    self._observe("observed_join", name)
            elif before.state != STALE and state == STALE:
                self._observe("observed_expiry", name)
            elif before.state == "online" and state == "leaving":
                self._observe("observed_leave", name)
        if len(self._expiries) > 4 * max(64, len(self._seen)):  # superseded expiry times pile up
            self._expiries = [item for item in self._expiries if item[1] in self._seen]
            heapq.heapify(self._expiries)

    def stale_for(self, now: float) -> dict[str, float]:
        """Names of other nodes judged stale, with how long they have been stale."""
        return {name: now - seen.stale_since for name, seen in self._seen.items()
                if seen.state == STALE and name != self._own}
