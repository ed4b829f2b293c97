"""The lease keeper of a node: its registry entry (register, renew, publish, deregister) and the
registry thread, which renews the lease every `heartbeatSeconds`, keeps the registry monitor
current, reaps other nodes' stale entries after a grace period, sweeps what crashed writers left
behind, and flushes the journal.

A lease is renewed only while the protocol thread makes progress. When it stops (its inbox cannot
be read, or it hangs), the node publishes `leaving` once — senders refuse it at once instead of
filling an inbox nobody reads — and stops renewing, so its lease runs out; when the thread makes
progress again, the node publishes `online` and renews as before. A node is never online and deaf.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable, Iterable, Protocol

from ..core.entry import RegistryEntry
from ..core.errors import LeaseLostError, RegistryLockError
from ..fsutil import BOOT_ID, HOSTNAME, boottime, local_facts
from ..registry import SUFFIX, RegistryGoneError, check_size
from ..transport import sweep_orphans, sweep_temporary_homes
from .context import Lifecycle, NodeContext
from .telemetry import failure_text


# implementation and language (contract §4); its version is `speed --version`, read from the package
# metadata only when asked (tens of milliseconds no node start should pay)
RUNTIME = "speed_runtime-python"
TICK_SECONDS = 0.25  # how often the registry thread looks: lease, hints, expiries, reaping


class ReceiverProgress(Protocol):
    """What the keeper watches of the protocol thread (node/receiver.py)."""

    last_progress: float

    def alive(self) -> bool: ...


class LeaseKeeper:
    def __init__(self, ctx: NodeContext, lifecycle: Lifecycle):
        cfg = ctx.config
        self.config, self.registry, self.monitor = cfg, ctx.registry, ctx.monitor
        self._ctx, self._lifecycle, self._telemetry = ctx, lifecycle, ctx.telemetry
        self._extensions: tuple = ()       # entry_fields, and their names as `features` (attach)
        self._receiver: ReceiverProgress | None = None
        self._journal: Callable[[], None] | None = None  # flushed by the registry thread
        self._tmp_path = os.path.join(ctx.root, ctx.name, "tmp")
        self._started_at = 0.0
        self._last_renew_bt = 0.0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._rescan_requested = True
        self.thread: threading.Thread | None = None
        self.deaf = False
        # generous: a loaded machine must not make a busy node look deaf (the lease itself is the slow signal)
        self.deaf_after = max(3 * cfg.rescan_seconds, 2 * cfg.heartbeat_seconds, cfg.lease_seconds / 2)

    def attach(self, extensions: tuple) -> None:
        """The node's extensions (§9), once loaded: their fields and names go into the entry."""
        self._extensions = extensions

    # ------------------------------------------------------------------ the entry
    def entry(self, now: float, status: str) -> RegistryEntry:
        """The node's entry as it is now: its grants, services, counters and extensions' fields."""
        ctx, cfg = self._ctx, self.config
        fields: dict[str, Any] = {"counters": self._telemetry.snapshot()}
        for extension in self._extensions:
            fields.update(extension.entry_fields())
        return RegistryEntry(
            name=ctx.name, id=ctx.id, last_heartbeat=now, pid=os.getpid(), host=HOSTNAME, status=status,
            startup_timestamp=self._started_at, lease_seconds=cfg.lease_seconds,
            heartbeat_seconds=cfg.heartbeat_seconds, groups=cfg.groups, allow=tuple(ctx.access.names()),
            services=tuple(ctx.services.names()), runtime=RUNTIME, boot_id=BOOT_ID,
            boot_time_heartbeat=boottime(), features=tuple(e.name for e in self._extensions), extra=fields)

    def check_fits(self, allow: frozenset[str] | None = None, services: Iterable[str] = ()) -> None:
        """EntryTooLargeError when our entry with these grants (or with these services offered too)
        could not be published: a change is refused before it takes effect, so the entry in force
        stays, and so does the lease."""
        entry = self.entry(time.time(), "online")
        changes: dict[str, Any] = {"services": (*entry.services, *services)}
        if allow is not None:
            changes["allow"] = tuple(sorted(allow))
        check_size(self._ctx.name, dataclasses.replace(entry, **changes).to_json())

    def register(self, now: float) -> bool:
        self._started_at = now
        self._last_renew_bt = boottime()
        return self.registry.register(self.entry(now, "online"), now, local_facts())

    def publish(self, status: str | None = None) -> bool:
        """Write our entry now (a heartbeat, or a change of grants, services or status)."""
        if status is None:
            status = "leaving" if self.deaf or self._lifecycle.state == "closing" else "online"
        bt = boottime()
        late = bt - self._last_renew_bt > self.config.lease_seconds
        try:
            self.registry.renew(self.entry(time.time(), status))
        except LeaseLostError as exc:
            self._lifecycle.lose_lease(exc)
            return False
        except RegistryLockError as exc:
            self._telemetry.count("registryWriteErrors")
            self._telemetry.problem("registry_lock_held", str(exc))
            return False
        except OSError as exc:  # full or failing disk, ROOT moved away: keep running, the next heartbeat tries again
            self._telemetry.count("registryWriteErrors")
            back = (f"; it renews if the directory is back within its lease ({self.config.lease_seconds:g} s)"
                    if isinstance(exc, RegistryGoneError) else "")  # else the lease is lost: _gone_for_good
            self._telemetry.problem("renewal_failed", f"cannot renew its lease: {exc.strerror or exc}{back}")
            return False
        self._last_renew_bt = bt
        if late:
            self._telemetry.lease_event("renewed_late", self._ctx.name)
        return True

    def lease_valid(self) -> bool:
        return boottime() - self._last_renew_bt <= self.config.lease_seconds

    def deregister(self) -> bool:
        try:
            return self.registry.deregister(self._ctx.name, self._ctx.id)
        except (RegistryLockError, OSError) as exc:
            self._telemetry.problem("renewal_failed", f"cannot remove its registry entry: {exc}")
            return False

    # ------------------------------------------------------------------ the thread
    def start(self, receiver: ReceiverProgress, journal: Callable[[], None] | None) -> None:
        """The registry thread, watching `receiver`'s progress and flushing `journal` (if any)."""
        self._receiver, self._journal = receiver, journal
        self.thread = threading.Thread(target=self._loop, name=f"speed-{self._ctx.name}-registry", daemon=True)
        self.thread.start()

    def wake(self, rescan: bool = False) -> None:
        if rescan:
            self._rescan_requested = True
        self._wake.set()

    def hint(self, file_name: str) -> None:
        """An inotify event in the registry directory: read at the next tick (TICK_SECONDS), not at
        once. What a hint is read for are other nodes' joins and departures, for the trace; sends
        read the entry they need themselves. Woken at every heartbeat of every peer, N nodes on a
        host woke N threads for each of them."""
        if file_name.endswith(SUFFIX) and not file_name.startswith("."):
            self.monitor.hint(file_name[:-len(SUFFIX)])

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self.thread is not None:
            self.thread.join()

    def _loop(self) -> None:
        cfg = self.config
        next_beat = time.monotonic() + cfg.heartbeat_seconds
        next_scan = next_sweep = time.monotonic()
        while not self._stopping.is_set():
            self._wake.wait(TICK_SECONDS)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                now = time.monotonic()
                state = self._lifecycle.state
                if state == "running" and not self._gone_for_good():
                    self._watch_receiving(now)
                if state in ("running", "closing"):
                    if not self.deaf and (now >= next_beat or not self.lease_valid()):
                        self.publish()
                        next_beat = now + cfg.heartbeat_seconds
                if cfg.observe_registry:
                    if now >= next_scan or self._rescan_requested:
                        self._rescan_requested = False
                        self.monitor.rescan(time.time())
                        next_scan = now + cfg.registry_rescan_seconds
                    else:
                        self.monitor.process_hints(time.time())
                    if cfg.reap_stale:
                        self._reap(time.time())
                if now >= next_sweep:
                    self._sweep()
                    next_sweep = now + max(1.0, cfg.orphan_seconds / 2)
                if self._journal is not None:
                    self._journal()
            except Exception as exc:  # the keeper must outlive any one failure
                self._telemetry.count("protocolErrors")
                self._telemetry.problem("renewal_failed", f"registry thread: {failure_text(exc)}")

    def _gone_for_good(self) -> bool:
        """ROOT moved away or removed, and not back within the lease: the node's lease is lost (its
        protocol thread, finding no inbox, may have stopped the renewals that would have said so)."""
        if self.lease_valid() or not self.registry.directory_gone():
            return False
        self._lifecycle.lose_lease(LeaseLostError(
            f"node {self._ctx.name} lost its lease: its registry directory {self.registry.dir} is gone, for "
            f"longer than its lease ({self.config.lease_seconds:g} s)"))
        return True

    def _watch_receiving(self, now: float) -> None:
        receiver = self._receiver
        stalled = not receiver.alive() or now - receiver.last_progress > self.deaf_after
        if stalled and not self.deaf:
            self.deaf = True
            self._telemetry.problem(
                "stopped_renewing", "its protocol thread has made no progress for "
                f"{now - receiver.last_progress:.0f} s: published `leaving` and stopped renewing its lease")
            self.publish("leaving")
        elif not stalled and self.deaf:
            self.deaf = False
            if self.publish():
                self._telemetry.recovered("receiving_recovered", "its protocol thread makes progress again: "
                                                                     "online, renewing its lease")

    def _reap(self, now: float) -> None:
        grace = self.config.reap_grace_seconds
        for name, stale_for in self.monitor.stale_for(now).items():
            if stale_for >= grace:
                try:
                    reaped = self.registry.reap(name, now, local_facts())
                except (RegistryLockError, OSError):
                    return
                if reaped:
                    self._telemetry.lease_event("reaped", name)
                self.monitor.refresh(name)

    def _sweep(self) -> None:
        cfg = self.config
        sweep_orphans(self._tmp_path, cfg.orphan_seconds)
        try:
            self.registry.sweep_temporaries(cfg.orphan_seconds)
        except RegistryLockError:
            pass
        sweep_temporary_homes(self._ctx.root, self.registry, time.time())
