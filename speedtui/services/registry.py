"""Reading ``ROOT/speed_registry/`` for the console, and what this host knows (its name, boot id,
boot-time clock, which pids run).  The runtime's entry parser validates every file."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from speed_runtime.core.entry import MAX_ENTRY_BYTES, RegistryEntry
from speed_runtime.core.errors import BadEntryError

from ..models.liveness import HostFacts
from ..models.registry import REGISTRY_DIR, RawEntry


def local_boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


LOCAL_HOST = socket.gethostname()


def pid_alive(pid: int) -> bool | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError, ValueError):
        return False
    return True


def host_facts(boottime: float | None = None) -> HostFacts:
    """This host, now: ``boottime`` from the app's clock (a frozen clock gives None)."""
    return HostFacts(host=LOCAL_HOST, boot_id=_BOOT_ID, boottime=boottime, pid_alive=pid_alive)


_BOOT_ID = local_boot_id()


def read_registry(root: Path, cache: dict | None = None) -> list[RawEntry]:
    """Read every ``*.node`` file; never raises for a bad entry.

    With ``cache`` (a dict kept by the caller), a file whose (inode, size, mtime) did not change
    is not read again and keeps its RawEntry object (so models can cache per entry)."""
    reg = Path(root) / REGISTRY_DIR
    out: list[RawEntry] = []
    try:
        names = sorted(os.listdir(reg))
    except OSError:
        return out
    seen = set()
    for fn in names:
        if not fn.endswith(".node") or fn.startswith("."):
            continue
        name = fn[:-5]
        if cache is not None:
            try:
                st = os.stat(reg / fn, follow_symlinks=False)
            except OSError:
                continue
            sig = (st.st_ino, st.st_size, st.st_mtime_ns)
            seen.add(fn)
            hit = cache.get(fn)
            if hit is not None and hit[0] == sig:
                out.append(hit[1])
                continue
            entry = _read_one(reg, fn, name)
            if entry is not None:
                cache[fn] = (sig, entry)
                out.append(entry)
            continue
        entry = _read_one(reg, fn, name)
        if entry is not None:
            out.append(entry)
    if cache is not None:
        for fn in [k for k in cache if k not in seen]:
            del cache[fn]
    return out


def _read_one(reg: Path, fn: str, name: str) -> RawEntry | None:
    try:
        fd = os.open(reg / fn, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_ENTRY_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return RawEntry(name, None, f"unreadable: {exc.strerror}")
    try:  # the runtime's reader: the same validation as every node (huge numbers, bad ids, names)
        entry = RegistryEntry.from_json(raw)
    except BadEntryError as exc:
        return RawEntry(name, None, str(exc))
    if entry.name != name:
        return RawEntry(name, None, f"the file holds an entry named {entry.name!r}")
    return RawEntry(name, entry.to_dict())


