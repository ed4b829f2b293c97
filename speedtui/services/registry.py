"""Reading ``ROOT/speed_registry/`` for the console with the runtime's one reader
(``speed_runtime.registry.Registry.scan``: one stat per entry, only changed files read, FIFOs,
symlinks and directories reported and never opened for reading), who holds the registry lock,
and what this host knows (its name, boot id, which pids run) for the runtime's liveness verdict."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from speed_runtime.core.errors import SpeedError
from speed_runtime.core.liveness import HostFacts
from speed_runtime.fsutil import BOOT_ID, HOSTNAME, REGISTRY_DIR, pid_exists
from speed_runtime.registry import SUFFIX, Registry, RegistryRecord


def host_facts(boottime: float | None = None) -> HostFacts:
    """This host, now, for ``core.liveness.judge``: ``boottime`` comes from the app's clock (a
    frozen clock gives None, and the wall clock judges alone)."""
    return HostFacts(HOSTNAME, BOOT_ID, boottime, pid_exists)


class RegistryReader:
    """The runtime's ``Registry`` of ROOT, opened once its directory exists and passes the checks
    every reader makes (§1); each scan reads only the files that changed since the last one."""

    def __init__(self, root: Path | str) -> None:
        self.root = str(root)
        self.problem: str | None = None  # why the registry cannot be read (yet)
        self._gone: str | None = None    # the sentence for a registry removed while it was read
        self._registry: Registry | None = None
        self._previous: dict[str, RegistryRecord] = {}

    def registry(self) -> Registry | None:
        if self._registry is None:
            try:
                self._registry = Registry(self.root, create=False)
            except (SpeedError, OSError) as exc:
                self.problem = self._gone or str(exc)  # one sentence while it stays removed
                return None
            self.problem = self._gone = None
        return self._registry

    def scan(self) -> list[RegistryRecord]:
        reg = self.registry()
        if reg is None:
            return []
        if not os.path.isdir(reg.dir):  # ROOT (or the registry) removed: say so, open it again once back
            self.problem = self._gone = f"the registry was removed; waiting for it to be created again ({reg.dir})"
            self._registry, self._previous = None, {}
            return []
        records = reg.scan(self._previous)
        self._previous = {r.name: r for r in records}
        return records


def entry_exists(root: Path | str) -> Callable[[str], bool]:
    """Whether ``name``'s entry file is in ROOT's registry now (one lstat, never read)."""
    registry_dir = os.path.join(str(root), REGISTRY_DIR)
    return lambda name: os.path.lexists(os.path.join(registry_dir, f"{name}{SUFFIX}"))


def read_registry(root: Path | str) -> list[RegistryRecord]:
    """One scan of ROOT's registry (every entry, or the reason it is unreadable)."""
    return RegistryReader(root).scan()


@dataclass(frozen=True)
class LockState:
    """The registry lock as the console last saw it: held by another process (``pid``) for
    ``seconds``, or unusable (``problem``); both None/"" when it is free."""

    pid: int | None = None
    seconds: float = 0.0
    problem: str = ""


FREE = LockState()


class LockWatch:
    """Asks who holds the registry lock (F_GETLK) at most once per ``interval``. A holder is
    reported once the same pid has held it for ``report_after`` seconds: nodes hold it for
    milliseconds, so a poll that meets one of them is no news."""

    def __init__(self, reader: RegistryReader, interval: float = 1.0, report_after: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = reader
        self.interval = interval
        self.report_after = report_after
        self.clock = clock
        self.state = FREE
        self._asked = float("-inf")
        self._holder: tuple[int, float] | None = None  # pid, when first seen holding it

    def poll(self) -> LockState:
        now = self.clock()
        if now - self._asked < self.interval:
            return self.state
        self._asked = now
        reg = self.reader.registry()
        if reg is None:
            self.state = FREE
            return self.state
        try:
            pid = reg.lock_holder()
        except (SpeedError, OSError) as exc:  # `.lock` is a directory, a symlink, a FIFO…
            self._holder = None
            self.state = LockState(problem=str(exc))
            return self.state
        if pid is None:
            self._holder = None
            self.state = FREE
            return self.state
        if self._holder is None or self._holder[0] != pid:
            self._holder = (pid, now)
        held = now - self._holder[1]
        self.state = LockState(pid, held) if held >= self.report_after else FREE
        return self.state
