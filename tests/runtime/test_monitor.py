"""The registry monitor's cache against real registry files, without its watch thread: what a
sender reads must be the entry the file holds now, whatever the watch has processed."""
import os
import time
import uuid

from speed_runtime.fsutil import local_facts, prepare_root
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.monitor import RegistryMonitor
from speed_runtime.registry import Registry


def entry(name, **fields):
    return RegistryEntry(name=name, id=str(uuid.uuid4()), last_heartbeat=time.time(), pid=os.getpid(), **fields)


def monitor(root):
    registry = Registry(prepare_root(root))
    return registry, RegistryMonitor(registry, "watcher", observe=lambda event, subject: None, facts=local_facts)


def test_current_sees_a_restarted_peer_before_any_hint(root):
    registry, mon = monitor(root)
    first = entry("b")
    registry.register(first, time.time())
    assert mon.current("b") == first
    registry.deregister("b", first.id)
    second = entry("b")
    registry.register(second, time.time())
    assert mon.get("b") == first          # the cache alone still holds the old instance
    assert mon.current("b").id == second.id
    assert mon.get("b").id == second.id   # and is brought up to date


def test_current_sees_a_new_grant_and_a_departure(root):
    registry, mon = monitor(root)
    before = entry("b")
    registry.register(before, time.time())
    assert mon.current("b").allow == ()
    registry.renew(RegistryEntry(**{**before.__dict__, "allow": ("a",)}))
    assert mon.current("b").allow == ("a",)
    registry.deregister("b", before.id)
    assert mon.current("b") is None and "b" not in mon.entries()


def test_current_reads_nothing_while_the_file_is_unchanged(root):
    registry, mon = monitor(root)
    registry.register(entry("b"), time.time())
    first = mon.current("b")
    assert mon.current("b") is first      # the same object: served from the cache, not parsed again


def test_a_replaced_instance_keeps_only_what_surely_arrived_before_its_successor(root):
    """A file's change time comes from the kernel's coarse clock and can lie a tick (4 ms) before
    the real moment: an envelope stamped just before the successor registered may have arrived
    after it, and a fenced instance gets nothing it cannot prove it delivered in time (a CI run
    accepted one 1 ms inside the boundary)."""
    registry, mon = monitor(root)
    old = entry("b")
    registry.register(old, time.time())
    mon.current("b")
    registry.deregister("b", old.id)
    successor = entry("b", startup_timestamp=time.time())
    registry.register(successor, time.time())
    assert mon.current("b").id == successor.id
    envelope = bytes(32) + old.id_bytes + bytes(64)
    assert mon.departed("b", envelope, successor.startup_timestamp - 1.0) == old        # long before: its own
    assert mon.departed("b", envelope, successor.startup_timestamp - 0.001) is None     # within a tick: fenced
    assert mon.departed("b", envelope, successor.startup_timestamp + 1.0) is None
