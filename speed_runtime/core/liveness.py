"""Liveness of a registry entry (wire contract §4.1): the one verdict that the registry monitor,
registration and reclaim, reaping, senders, `speed registry`, `speed reap` and every console
view use. Pure: the time and the facts about this host are arguments.

Rules, in order:
1. `leaseSeconds` is clamped to at most 86,400 (a lease of 1e300 never makes a name unclaimable).
2. The heartbeat's age is measured on CLOCK_BOOTTIME when the entry was written on this boot
   (same `bootId` and a `bootTimeHeartbeat`), so a wall-clock step neither expires live nodes
   nor revives dead ones; otherwise on the wall clock.
3. A heartbeat more than `leaseSeconds` in the future is garbage (milliseconds, a broken clock):
   stale.
4. A heartbeat older than the lease: stale.
5. An entry of this host whose pid does not exist is stale, with or without a `bootId` (the pid
   alone never proves a node alive: an existing pid is no evidence, PIDs are reused).
6. Otherwise `leaving` when the entry says so, else `online`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from .entry import RegistryEntry

MAX_LEASE_SECONDS = 86_400.0

ONLINE, LEAVING, STALE = "online", "leaving", "stale"
# reasons of a stale verdict, as a person reads them
EXPIRED = "lease expired"
FUTURE = "heartbeat lies in the future"
PROCESS_GONE = "process has exited"


class HostFacts(NamedTuple):  # made for every send: a tuple, not a frozen dataclass (a third of the cost)
    """What a reader knows about the host it runs on. `pid_alive` is the only question asked of
    the operating system; callers pass `fsutil.local_facts()` or, in tests, a plain function."""

    host: str
    boot_id: str | None
    boottime: float | None  # CLOCK_BOOTTIME seconds now
    pid_alive: Callable[[int], bool]


class Liveness(NamedTuple):
    state: str          # online | leaving | stale
    reason: str         # why stale ("" otherwise)
    remaining: float    # seconds of lease left on the clock that was used (negative once stale)
    age: float          # seconds since the last renewal on that clock

    @property
    def stale(self) -> bool:
        return self.state == STALE


def lease_seconds(entry: RegistryEntry) -> float:
    return min(entry.lease_seconds, MAX_LEASE_SECONDS)


def heartbeat_age(entry: RegistryEntry, now: float, facts: HostFacts | None = None) -> float:
    """Seconds since the last renewal; on the same boot, measured on CLOCK_BOOTTIME."""
    if (facts is not None and facts.boot_id is not None and entry.boot_id == facts.boot_id
            and entry.boot_time_heartbeat is not None and facts.boottime is not None):
        return facts.boottime - entry.boot_time_heartbeat
    return now - entry.last_heartbeat


def judge(entry: RegistryEntry, now: float, facts: HostFacts | None = None, *, check_pid: bool = True) -> Liveness:
    """The verdict on one entry. Without `facts` only the wall-clock lease rules apply.
    `check_pid=False` skips rule 5 where a caller judges many entries often and asks the OS
    about pids on its own schedule."""
    lease = lease_seconds(entry)
    age = heartbeat_age(entry, now, facts)
    left = lease - age
    if age < -lease:
        return Liveness(STALE, FUTURE, left, age)
    if age > lease:
        return Liveness(STALE, EXPIRED, left, age)
    if check_pid and facts is not None and entry.host == facts.host and not facts.pid_alive(entry.pid):
        return Liveness(STALE, PROCESS_GONE, left, age)
    return Liveness(LEAVING if entry.status == LEAVING else ONLINE, "", left, age)


def expires_at(entry: RegistryEntry, now: float, facts: HostFacts | None = None) -> float:
    """Wall-clock time at which the lease runs out if the entry is not renewed (for scheduling)."""
    return now + lease_seconds(entry) - heartbeat_age(entry, now, facts)
