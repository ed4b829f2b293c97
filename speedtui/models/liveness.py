"""The console's words for the runtime's liveness verdict (SPEED-WIRE-V1 §4.1).

The judgement itself is the runtime's one pure function, ``speed_runtime.core.liveness.judge``
(entry, now, host facts) → state, reason, lease left, heartbeat age: the same one `speed
registry`, `speed reap`, registration and every node's registry monitor use, so the console and
the CLI never disagree about a node. What stays here is how the console says it: the reason as a
sentence, and the uptime (which stops at the last heartbeat once the node is judged stale)."""

from __future__ import annotations

from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.liveness import (EXPIRED, FUTURE, LEAVING, ONLINE, PROCESS_GONE, STALE, HostFacts, Liveness,
                                         judge, lease_seconds)

__all__ = ["ONLINE", "LEAVING", "STALE", "HostFacts", "Liveness", "judge", "lease_seconds", "reason_text", "uptime",
           "pid_alive"]


def reason_text(v: Liveness, entry: RegistryEntry) -> str:
    """Why the runtime judged the entry stale, as the console says it ("" when it is not)."""
    if v.reason == PROCESS_GONE:
        return f"its process (pid {entry.pid}) is gone"
    if v.reason == EXPIRED:
        return f"its lease ran out {-v.remaining:.0f}s ago"
    if v.reason == FUTURE:
        return f"its heartbeat lies {-v.age:.0f}s in the future (milliseconds, or a wrong clock)"
    return v.reason


def uptime(v: Liveness, entry: RegistryEntry, now: float) -> float | None:
    """Seconds since the node started; a stale node's stops at its last heartbeat."""
    if entry.startup_timestamp <= 0:
        return None
    if v.state != STALE:
        return now - entry.startup_timestamp
    if v.reason == FUTURE:
        return None  # its heartbeat is garbage: so is an uptime measured to it
    return entry.last_heartbeat - entry.startup_timestamp


def pid_alive(v: Liveness, entry: RegistryEntry, facts: HostFacts | None) -> bool | None:
    """Whether the entry's pid runs, for the ✓/✗ beside it: None on another host (or without
    facts). The verdict already asked the host for every entry it did not find expired."""
    if facts is None or entry.host != facts.host:
        return None
    if v.reason == PROCESS_GONE:
        return False
    if v.state != STALE:
        return True
    return bool(facts.pid_alive(entry.pid))
