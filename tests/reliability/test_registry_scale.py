"""Issue 13 item 12: observing the registry costs in proportion to changes, not to entries, and
stale entries do not pile up. The figures (idle CPU, `speed call` latency with 10,000 entries)
are in benchmarks/registry_scale.py and docs/BENCHMARKS.md."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from speed_runtime import Node
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.fsutil import HOSTNAME, prepare_root
from speed_runtime.registry import Registry

from ..helpers.wait import wait_until


def _entries(root: str, count: int, *, pid: int, prefix: str) -> None:
    registry = Registry(prepare_root(root))
    with registry.locked():
        for i in range(count):
            registry._write(RegistryEntry(name=f"{prefix}{i:05d}", id=str(uuid.uuid4()), last_heartbeat=time.time(),
                                          pid=pid, host=HOSTNAME, lease_seconds=3600.0))


def test_rescans_read_only_what_changed(root, key, monkeypatch):
    _entries(root, 2000, pid=os.getpid(), prefix="idle")
    reads, rescans = [], []
    with Node(root, key, "watcher", registry_rescan_seconds=0.1) as node:
        original_read, original_rescan = node.keeper.registry.read_stamped, node.monitor.rescan
        monkeypatch.setattr(node.keeper.registry, "read_stamped", lambda name: (reads.append(name),
                                                                                original_read(name))[1])
        monkeypatch.setattr(node.monitor, "rescan", lambda now: (rescans.append(now), original_rescan(now))[1])
        wait_until(lambda: len(rescans) >= 5, timeout=30, what="five rescans")
        assert reads == [], f"{len(reads)} unchanged entries were read again"
        assert len(node.peers()) == 2001
        _entries(root, 1, pid=os.getpid(), prefix="fresh")  # one change: one read
        wait_until(lambda: "fresh00000" in node.peers(), timeout=30, what="the new entry")
        assert set(reads) == {"fresh00000"}


def test_stale_entries_are_reaped_by_default_after_a_grace_period(root, key):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _entries(root, 50, pid=int(dead.stdout), prefix="gone")
    with Node(root, key, "janitor", reap_grace_seconds=0.5):
        wait_until(lambda: Registry(root).names() == ["janitor"], timeout=30, what="the stale entries to be reaped")
