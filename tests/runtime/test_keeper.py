"""The keeper (node/keeper.py: LeaseKeeper), tested directly: given a NodeContext of real and fake
collaborators and a fake Lifecycle, it builds the node's entry from the grants, services,
counters and extensions' fields, registers and renews it in a real registry, and turns a failed
renewal into what the node shows (a counter and a problem, the runtime keeps running) or, for a
lost lease, into the node's lease-lost path."""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace

import pytest

from speed_runtime.core.errors import LeaseLostError
from speed_runtime.core.keys import Key
from speed_runtime.node.config import NodeConfig
from speed_runtime.node.context import NodeContext
from speed_runtime.node.grants import AccessRegistry
from speed_runtime.node.keeper import LeaseKeeper
from speed_runtime.registry import Registry

from ..helpers.wait import wait_until

ID = uuid.UUID(int=1)


class FakeTelemetry:
    def __init__(self):
        self.counts: dict[str, int] = {}
        self.problems: list[tuple[str, str]] = []

    def snapshot(self) -> dict[str, int]:
        return {"received": 3}

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def problem(self, kind: str, text: str) -> None:
        self.problems.append((kind, text))

    def lease_event(self, event: str, subject: str) -> None:
        pass


class FakeServices:
    def names(self):
        return ["echo"]


class FakeLifecycle:
    def __init__(self, state: str = "running"):
        self.state, self.lost = state, []

    def lose_lease(self, exc: Exception) -> None:
        self.lost.append(exc)


class FakeExtension:
    name = "quota"

    def entry_fields(self):
        return {"quota": {"maxFiles": 5}}


class FailingRegistry:
    def __init__(self, exc: Exception):
        self.exc = exc

    def renew(self, entry) -> None:
        raise self.exc


def make_keeper(tmp_path, registry=None, lifecycle=None, config=None) -> tuple[LeaseKeeper, FakeTelemetry, FakeLifecycle]:
    telemetry, lifecycle = FakeTelemetry(), lifecycle or FakeLifecycle()
    ctx = NodeContext(name="a", id=str(ID), id_bytes=ID.bytes, root=str(tmp_path), key=Key(bytes(32)),
                      config=config or NodeConfig(), access=AccessRegistry(["b", "c"]), telemetry=telemetry,
                      registry=registry or Registry(str(tmp_path)), monitor=None, application=None,
                      services=FakeServices())
    return LeaseKeeper(ctx, lifecycle), telemetry, lifecycle


def test_the_entry_holds_the_grants_services_counters_and_extensions_fields(tmp_path):
    keeper, _, _ = make_keeper(tmp_path)
    keeper.attach((FakeExtension(),))
    entry = keeper.entry(1000.0, "online")
    assert (entry.name, entry.id, entry.status, entry.last_heartbeat) == ("a", str(ID), "online", 1000.0)
    assert (sorted(entry.allow), entry.services, entry.features) == (["b", "c"], ("echo",), ("quota",))
    assert entry.extra["counters"] == {"received": 3} and entry.extra["quota"] == {"maxFiles": 5}


def test_register_then_publish_write_the_entry_with_the_nodes_status(tmp_path):
    lifecycle = FakeLifecycle()
    keeper, _, _ = make_keeper(tmp_path, lifecycle=lifecycle)
    assert keeper.register(time.time()) is False  # the name was free: nothing reclaimed
    registry = Registry(str(tmp_path), create=False)
    assert registry.read("a").status == "online"
    lifecycle.state = "closing"
    assert keeper.publish()
    assert registry.read("a").status == "leaving"  # a closing node tells its peers it leaves
    assert keeper.deregister() and registry.read("a") is None


def test_a_renewal_that_cannot_be_written_is_shown_and_the_node_goes_on(tmp_path):
    keeper, telemetry, lifecycle = make_keeper(tmp_path, registry=FailingRegistry(OSError(28, "No space left on device")))
    assert keeper.publish() is False
    assert telemetry.counts == {"registryWriteErrors": 1}
    assert telemetry.problems == [("renewal_failed", "cannot renew its lease: No space left on device")]
    assert lifecycle.lost == []


def test_an_entry_the_system_will_not_let_it_read_is_a_failed_renewal_not_a_lost_lease(tmp_path, monkeypatch):
    """A second of the registry at mode 000, or of EMFILE: reading its own entry failed, was taken
    for "the entry now belongs to nobody", and every node stopped for good. Now a renewal that
    cannot read the entry fails and is retried; and a reap or a registration never acts on an
    entry it could not read (it may be a live node's)."""
    import errno

    from speed_runtime import registry as registry_module
    from speed_runtime.core.errors import NameInUseError

    keeper, telemetry, lifecycle = make_keeper(tmp_path)
    assert keeper.register(time.time()) is False
    registry = Registry(str(tmp_path), create=False)
    real = registry_module.read_regular

    def refused(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", path)
    monkeypatch.setattr(registry_module, "read_regular", refused)
    assert keeper.publish() is False
    assert lifecycle.lost == [] and telemetry.counts == {"registryWriteErrors": 1}
    assert telemetry.problems == [("renewal_failed", "cannot renew its lease: its entry cannot be read "
                                                     "(Permission denied)")]
    assert registry.reap("a", time.time() + 3600) is False                  # never removed unread
    with pytest.raises(OSError, match="cannot be opened: Permission denied"):
        registry.register(replace(keeper.entry(time.time(), "online"), id=str(uuid.UUID(int=2))), time.time())
    monkeypatch.setattr(registry_module, "read_regular", real)
    assert keeper.publish() is True and registry.read("a").id == str(ID)    # renewed once it can read again
    with pytest.raises(NameInUseError):
        registry.register(replace(keeper.entry(time.time(), "online"), id=str(uuid.UUID(int=2))), time.time())


def test_a_registry_directory_moved_away_is_a_failed_renewal_until_the_lease_runs_out(tmp_path):
    """`mv ROOT elsewhere` for a few seconds stopped every node for good: a renewal that found no
    entry took it for "the registry entry now belongs to nobody". The directory gone is a failed
    renewal; back within the lease, the node renews; gone for longer, the lease is lost, saying so."""
    keeper, telemetry, lifecycle = make_keeper(tmp_path, config=NodeConfig(lease_seconds=1.0, heartbeat_seconds=0.5))
    assert keeper.register(time.time()) is False
    registry_dir = os.path.join(str(tmp_path), "speed_registry")
    os.rename(registry_dir, registry_dir + ".away")
    assert keeper.publish() is False
    assert lifecycle.lost == [] and telemetry.counts == {"registryWriteErrors": 1}
    assert telemetry.problems == [("renewal_failed", f"cannot renew its lease: its registry directory {registry_dir} "
                                                     "is gone; it renews if the directory is back within its lease (1 s)")]
    os.rename(registry_dir + ".away", registry_dir)
    assert keeper.publish() is True and lifecycle.lost == []
    os.rename(registry_dir, registry_dir + ".away")
    assert keeper._gone_for_good() is False and lifecycle.lost == []  # within the lease
    wait_until(lambda: not keeper.lease_valid(), 10, "the lease to run out")
    assert keeper._gone_for_good() is True  # what the registry thread asks at every tick
    assert [str(exc) for exc in lifecycle.lost] == [
        f"node a lost its lease: its registry directory {registry_dir} is gone, for longer than its lease (1 s)"]


def test_a_registry_directory_that_cannot_be_looked_at_is_not_taken_for_gone(tmp_path, monkeypatch):
    """ROOT at mode 000 (a process without CAP_DAC_OVERRIDE) is a registry that cannot be read,
    retried as D31's; only a directory that is not there ends a lease when the lease runs out."""
    registry = Registry(str(tmp_path))
    real_stat = os.stat

    def refused(path, *args, **kwargs):
        if path == registry.dir:
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *args, **kwargs)
    assert registry.directory_gone() is False
    monkeypatch.setattr(os, "stat", refused)
    assert registry.directory_gone() is False
    monkeypatch.setattr(os, "stat", real_stat)
    os.rename(registry.dir, registry.dir + ".away")
    assert registry.directory_gone() is True


def test_a_lease_taken_over_is_the_nodes_lease_lost_path(tmp_path):
    lost = LeaseLostError("another instance holds a")
    keeper, telemetry, lifecycle = make_keeper(tmp_path, registry=FailingRegistry(lost))
    assert keeper.publish() is False
    assert lifecycle.lost == [lost] and telemetry.counts == {}


def test_a_threads_failure_is_one_sentence_naming_the_limit_to_raise_when_it_is_open_files():
    """A node thread's unexpected failure as the operator reads it: the registry thread printed
    `OSError: [Errno 24] Too many open files: '…/speed_registry'` when a receiver ran out."""
    import errno
    import resource

    from speed_runtime.node.telemetry import failure_text
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    text = failure_text(OSError(errno.EMFILE, "Too many open files", "/r/speed_registry"))
    assert text == f"Too many open files (/r/speed_registry): this process may open {soft} (raise it with `ulimit -n`)"
    assert failure_text(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert failure_text(ValueError("x")) == "ValueError: x"
