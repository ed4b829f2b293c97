"""Whether a registry entry's node is alive, and why not (SPEED-WIRE-V1 §4.1), as one pure
judgement of (entry facts, now, host facts).

Every console view takes its verdict from ``judge``; the follow-up replaces it with the
runtime's own judgement (issue 14 item 1), so it is the only place that decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ONLINE, LEAVING, STALE = "online", "leaving", "stale"


@dataclass(frozen=True)
class HostFacts:
    """What this host says about the node: its name, boot, boot-time clock and whether a pid runs.
    ``host=None`` judges no pid (tests, or a console that does not know its host)."""

    host: str | None = None
    boot_id: str | None = None
    boottime: float | None = None
    pid_alive: Callable[[int], bool | None] | None = None


@dataclass(frozen=True)
class EntryFacts:
    """The parts of an entry the judgement reads (numbers already checked finite)."""

    lease: float
    last_heartbeat: float | None
    boottime_heartbeat: float | None
    boot_id: object
    pid: int | None
    host: str
    leaving: bool
    startup: float | None


@dataclass(frozen=True)
class Verdict:
    status: str  # online | leaving | stale
    remaining: float  # lease seconds left (negative once expired, -1 without a heartbeat)
    hb_age: float | None
    pid_alive: bool | None  # None: another host, or not judged
    reason: str  # why stale ("" otherwise), one phrase
    uptime: float | None  # stops at the last heartbeat once the node is judged dead


def judge(e: EntryFacts, now: float, facts: HostFacts, error: str | None = None) -> Verdict:
    age: float | None = None
    if e.last_heartbeat is not None:
        age = now - e.last_heartbeat
        # on the same boot, the boot-time clock is immune to wall-clock jumps
        if facts.boot_id and e.boot_id == facts.boot_id and e.boottime_heartbeat is not None \
                and facts.boottime is not None:
            age = facts.boottime - e.boottime_heartbeat
    alive: bool | None = None
    if e.pid is not None and facts.host is not None and e.host == facts.host and facts.pid_alive is not None:
        alive = facts.pid_alive(e.pid)
    uptime = (now - e.startup) if e.startup is not None else None
    if error is not None:
        return Verdict(STALE, -1.0, age, alive, f"unreadable entry: {error}", None)
    if age is None:
        return Verdict(STALE, -1.0, None, alive, "the entry has no heartbeat", uptime)
    remaining = e.lease - age
    dead_uptime = (e.last_heartbeat - e.startup) if e.startup is not None and e.last_heartbeat is not None else None
    if alive is False:
        return Verdict(STALE, remaining, age, alive, f"its process (pid {e.pid}) is gone", dead_uptime)
    if age > e.lease:
        return Verdict(STALE, remaining, age, alive, f"its lease ran out {age - e.lease:.0f}s ago", dead_uptime)
    return Verdict(LEAVING if e.leaving else ONLINE, remaining, age, alive, "", uptime)
