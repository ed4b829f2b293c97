"""The registry monitor's cache against real registry files, without its watch thread: what a
sender reads must be the entry the file holds now, whatever the watch has processed."""
import os
import time
import uuid

import pytest

from speed_runtime.fsutil import FILE_TIME_UNCERTAINTY, local_facts, prepare_root
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.errors import BadEntryError
from speed_runtime.monitor import RegistryMonitor
from speed_runtime.registry import Registry

from ..helpers.wait import wait_until


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


def test_a_version_one_node_of_a_process_read_is_not_read_again_by_the_others(root, monkeypatch):
    """Every node watches the registry and reads what changed: N nodes in one process read and
    parsed each peer's heartbeat N times (100 idle nodes took a whole core). A version already
    read is known by one lstat."""
    from speed_runtime import registry as registry_module
    opened = []
    real = registry_module.read_regular
    monkeypatch.setattr(registry_module, "read_regular", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    registry, first = monitor(root)
    others = [RegistryMonitor(Registry(root), f"w{i}", observe=lambda event, subject: None, facts=local_facts)
              for i in range(4)]
    b = entry("b")
    registry.register(b, time.time())
    opened.clear()  # (the registration looked for an entry of that name)
    # a version read within a clock tick of its writing is read again: another could look the same
    assert first.refresh("b").id == b.id and others[0].refresh("b").id == b.id and len(opened) == 2
    settled(registry.path("b"))
    read = [mon.refresh("b") for mon in (first, *others)]
    assert [e.id for e in read] == [b.id] * 5 and len(opened) == 3
    registry.renew(RegistryEntry(**{**b.__dict__, "last_heartbeat": time.time()}))  # a heartbeat: a new file
    settled(registry.path("b"))
    assert {mon.refresh("b").last_heartbeat for mon in others} == {registry.read("b").last_heartbeat}
    assert len(opened) == 4


def settled(path):
    """Until the file's change time lies FILE_TIME_UNCERTAINTY in the past (the kernel's clock)."""
    wait_until(lambda: time.time() - os.stat(path).st_ctime > FILE_TIME_UNCERTAINTY, 5, "a settled version")


def test_a_file_changed_in_any_way_since_it_was_read_is_read_again(root):
    """What the lstat compares: the inode (an entry is renamed over), the modification and change
    times (a write in place, a chmod, a chown), the size and the mode. A symlink put in the
    entry's place is refused as before, whatever was read from the name earlier."""
    registry, _ = monitor(root)
    b = entry("b", allow=("x",))
    registry.register(b, time.time())
    path = registry.path("b")
    settled(path)
    assert registry.read("b").allow == ("x",)
    with open(path, "r+b") as f:  # in place, same size, same modification time
        data = f.read()
        before = os.stat(path)
        f.seek(0)
        f.write(data.replace(b'"x"', b'"y"'))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert registry.read("b").allow == ("y",)      # the change time moved
    os.chmod(path, 0o000)
    if os.access(path, os.R_OK):                   # root reads it all the same: the read still happened
        assert registry.read("b").allow == ("y",)
    os.chmod(path, 0o600)
    target = path + ".real"
    os.rename(path, target)
    os.symlink(target, path)
    with pytest.raises(BadEntryError, match="symbolic link"):
        registry.read("b")


def test_what_the_process_keeps_of_entries_is_bounded_whatever_members_write(root, monkeypatch):
    """A member may write entries of up to 64 KiB and as many as it likes: only usual-sized ones
    (at most PARSED_ENTRY_BYTES) are kept, at most MAX_PARSED of them, none of a removed file."""
    from speed_runtime import registry as registry_module
    opened = []
    real = registry_module.read_regular
    monkeypatch.setattr(registry_module, "read_regular", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    monkeypatch.setattr(registry_module, "_parsed", {})
    registry, _ = monitor(root)
    big = entry("big", allow=tuple(f"peer-{i:04d}" for i in range(1000)))
    registry.register(big, time.time())
    assert os.path.getsize(registry.path("big")) > registry_module.PARSED_ENTRY_BYTES
    settled(registry.path("big"))
    opened.clear()
    assert registry.read("big").allow == big.allow and registry.read("big").allow == big.allow
    assert len(opened) == 2 and registry_module._parsed == {}          # read each time, as before
    small = entry("small")
    registry.register(small, time.time())
    settled(registry.path("small"))
    assert registry.read("small").id == small.id and list(registry_module._parsed) == [registry.path("small")]
    registry.deregister("small", small.id)
    assert registry.read("small") is None and registry_module._parsed == {}
