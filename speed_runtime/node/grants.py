"""A node's Access Registry (RFC §9): the names that may write to its inbox. The set itself is an
immutable value (`core.access`); this holder swaps in a new one under a lock, so readers on any
thread (the protocol thread checks every file name against it) never wait."""
from __future__ import annotations

import threading
from typing import Iterable

from ..core.access import granted, revoked


class AccessRegistry:
    def __init__(self, names: Iterable[str] = ()):
        self._lock = threading.Lock()
        self._names: frozenset[str] = granted(frozenset(), *names)

    def allow(self, *names: str) -> bool:
        """Grant `names`; True if this changed anything."""
        with self._lock:
            before, self._names = self._names, granted(self._names, *names)
            return self._names != before

    def revoke(self, *names: str) -> bool:
        with self._lock:
            before, self._names = self._names, revoked(self._names, *names)
            return self._names != before

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def snapshot(self) -> frozenset[str]:
        return self._names

    def names(self) -> list[str]:
        return sorted(self._names)
