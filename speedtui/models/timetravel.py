"""Time travel: the registry and the traffic at a past moment, reconstructed from records. Pure:
the records, the registry history and the moment are arguments; no clock, no file.

What a past moment can be reconstructed from (docs/CONSOLE.md, "Time travel"):
- lease records (§8, kind "lease"): a node's own lifecycle (registered, reclaimed, renewed late,
  lost, deregistered) and what its peers' registry monitors observed (join, expiry, leave, reap);
- health records (kind "health"): a node's reports about itself;
- envelope records: who sent what to whom; a node that journaled traffic was running then;
- the registry as the console's own scans saw it (``RegistryHistory``): the only source of grants,
  fabrics, services and leases, since no journal records a change of them (until an extension
  such as `control` journals its requests). Before the console's first scan they are unknown.
Memory is bounded: the history keeps a fixed number of changes per node and of nodes; the caller
bounds the records it hands in; a moment keeps at most ``limit`` envelope records.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterable, Sequence

from .registry import NodeRow
from .traces import TraceRecord

ONLINE, LEAVING, STALE, LEFT, GONE, UNKNOWN = "online", "leaving", "stale", "left", "gone", "unknown"
# what a lease event says about its subject from then on
LEASE_STATE = {
    "registered": ONLINE, "reclaimed": ONLINE, "observed_join": ONLINE, "renewed_late": ONLINE,
    "lost": STALE, "observed_expiry": STALE,
    "deregistered": LEFT, "observed_leave": LEFT, "reaped": GONE,
}
RECOVERED = "receiving_recovered"
STEPS = (1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 3600.0)  # seconds one step moves


@dataclass(frozen=True)
class Sighting:
    """One node as one of the console's registry scans showed it (or ``GONE``: no entry then)."""

    ts: float
    status: str
    allow: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    lease: float = 0.0
    error: str = ""

    @classmethod
    def of(cls, ts: float, row: NodeRow) -> "Sighting":
        return cls(ts, row.status, row.allow, row.groups, row.services, row.lease_seconds, row.error or "")

    def same(self, other: "Sighting | None") -> bool:
        return other is not None and (self.status, self.allow, self.groups, self.services, self.lease,
                                       self.error) == (other.status, other.allow, other.groups, other.services,
                                                       other.lease, other.error)


class RegistryHistory:
    """What the console's registry scans showed over time: per node, each change (not each scan),
    at most ``per_node`` changes for at most ``max_nodes`` nodes (the least recently changed go)."""

    def __init__(self, per_node: int = 64, max_nodes: int = 5000) -> None:
        self.per_node = per_node
        self.max_nodes = max_nodes
        self.first: float | None = None  # the console's first scan
        self.last: float | None = None
        self._nodes: dict[str, tuple[Sighting, ...]] = {}  # insertion order = least recently changed first
        self._last_rows: dict[str, NodeRow] = {}  # the row object last observed per node

    def observe(self, ts: float, rows: Iterable[NodeRow]) -> None:
        if self.first is None:
            self.first = ts
        self.last = ts
        seen = set()
        last = self._last_rows
        for row in rows:
            seen.add(row.name)
            if last.get(row.name) is not row:  # a row kept as it was (RegistryModel.update) is no change
                last[row.name] = row
                self._add(row.name, Sighting.of(ts, row))
        for name in [n for n in last if n not in seen]:
            del last[name]
        for name in [n for n, s in self._nodes.items() if n not in seen and s[-1].status != GONE]:
            self._add(name, Sighting(ts, GONE))

    def _add(self, name: str, sighting: Sighting) -> None:
        had = self._nodes.get(name)
        if had is not None and sighting.same(had[-1]):
            return
        if had is None:
            had = ()
            if len(self._nodes) >= self.max_nodes:
                del self._nodes[next(iter(self._nodes))]
        else:
            del self._nodes[name]  # re-inserted last: the most recently changed
        self._nodes[name] = (had + (sighting,))[-self.per_node:]

    def snapshot(self) -> "RegistryHistory":
        """A copy another thread may read while this one goes on (the sightings are immutable)."""
        copy = RegistryHistory(self.per_node, self.max_nodes)
        copy.first, copy.last, copy._nodes = self.first, self.last, dict(self._nodes)
        return copy

    def names(self) -> list[str]:
        return list(self._nodes)

    def at(self, name: str, ts: float) -> Sighting | None:
        """The newest sighting of ``name`` at or before ``ts``."""
        s = self._nodes.get(name, ())
        i = bisect_right(s, ts, key=lambda x: x.ts)
        return s[i - 1] if i else None

    def after(self, name: str, ts: float) -> Sighting | None:
        s = self._nodes.get(name, ())
        i = bisect_right(s, ts, key=lambda x: x.ts)
        return s[i] if i < len(s) else None

    def change_times(self) -> list[float]:
        return sorted({x.ts for s in self._nodes.values() for x in s})


@dataclass(frozen=True)
class PastNode:
    name: str
    state: str  # online | leaving | stale | left | gone | unknown
    since: float | None  # when the evidence for that state was recorded
    evidence: str  # which record says so
    allow: tuple[str, ...] | None  # grants (None: unknown at that moment)
    groups: tuple[str, ...] | None
    services: tuple[str, ...] | None
    grants_from: float | None  # the registry scan the grants come from
    grants_later: bool  # that scan came after the moment (no earlier one): a hint, not a fact
    lease: float | None
    health: str  # its latest health problem at that moment, unresolved then ("" if none)
    sent: int  # envelope records around the moment, by this node's journal
    received: int
    rejected: int


@dataclass(frozen=True)
class Moment:
    at: float
    window: float  # the traffic is [at - window, at + window]
    nodes: tuple[PastNode, ...]
    traffic: tuple[TraceRecord, ...]  # time order, the nearest ``limit`` to the moment
    traffic_total: int  # envelope records in the window before the limit
    events: tuple[TraceRecord, ...]  # lease and health records in the window, time order
    journals_from: float | None  # the oldest and newest record handed in
    journals_to: float | None
    scans_from: float | None  # the console's first registry scan

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for n in self.nodes:
            c[n.state] = c.get(n.state, 0) + 1
        return c


def _subject_events(lifecycle: Sequence[TraceRecord], at: float) -> tuple[dict[str, TraceRecord], dict[str, TraceRecord],
                                                                        dict[str, TraceRecord], set[str]]:
    """At or before ``at``: the lease record each subject's state dates from (`_state_began`), the
    newest health record of each node, the newest record each node wrote about another (it was
    running then); and every name the records mention."""
    about: dict[str, list[TraceRecord]] = {}
    health: dict[str, TraceRecord] = {}
    wrote: dict[str, TraceRecord] = {}
    names: set[str] = set()
    for r in lifecycle:
        names.add(r.node)
        names.add(r.subject or r.node)
        if r.ts > at:
            continue
        if r.kind == "lease" and r.event in LEASE_STATE:
            about.setdefault(r.subject, []).append(r)
            if r.node != r.subject:
                _newest(wrote, r.node, r)
        elif r.kind == "health":
            _newest(health, r.node, r)
            _newest(wrote, r.node, r)
    lease = {subject: began for subject, records in about.items() if (began := _state_began(records)) is not None}
    return lease, health, wrote, names


def _state_began(records: list[TraceRecord]) -> TraceRecord | None:
    """The record a subject's state dates from, its lease records folded oldest first: a record
    that says the state it is in already changes nothing (a peer started later journals
    `observed_join` of every node it finds: an online node's "since" moved to that moment), and a
    peer's `observed_join` does not bring back an instance that journaled its own departure — only
    its own `registered` does (a peer may find the entry a node left behind)."""
    began: TraceRecord | None = None
    departed = False
    for r in sorted(records, key=lambda r: r.ts):
        state, own = LEASE_STATE[r.event], r.node == r.subject
        if own:
            departed = state in (LEFT, STALE)
        elif state == ONLINE and departed:
            continue
        if began is None or LEASE_STATE[began.event] != state:
            began = r
    return began


def _newest(into: dict[str, TraceRecord], key: str, r: TraceRecord) -> None:
    had = into.get(key)
    if had is None or r.ts >= had.ts:
        into[key] = r


def _lease_evidence(r: TraceRecord) -> str:
    return f"{r.event} (itself)" if r.node == r.subject else f"{r.event} by {r.node}"


def reconstruct(at: float, lifecycle: Sequence[TraceRecord], traffic: Iterable[TraceRecord],
                history: RegistryHistory | None = None, window: float = 5.0, limit: int = 500,
                total: int | None = None) -> Moment:
    """The registry and the traffic at ``at``: each node's state from the newest evidence at or
    before it (a lease record, a registry scan of the console, traffic its journal wrote in the
    window before the moment), its grants from the newest scan at or before it; the envelope
    records within ``window`` seconds of it (``total``: how many the window held, when the caller
    handed in only the nearest)."""
    history = history or RegistryHistory()
    lease, health, wrote_about, names = _subject_events(lifecycle, at)
    around = sorted((r for r in traffic if r.kind == "envelope" and at - window <= r.ts <= at + window),
                    key=lambda r: (r.ts, r.id))
    sent: dict[str, int] = {}
    received: dict[str, int] = {}
    rejected: dict[str, int] = {}
    wrote_before = dict(wrote_about)  # the newest record each node wrote by the moment
    for r in around:
        names.add(r.node)
        box = sent if r.dir == "out" else received
        box[r.node] = box.get(r.node, 0) + 1
        if r.outcome == "rejected":
            rejected[r.node] = rejected.get(r.node, 0) + 1
        if r.ts <= at:
            _newest(wrote_before, r.node, r)
    names.update(history.names())
    nodes = []
    for name in sorted(names):
        state, since, evidence = UNKNOWN, None, "no record yet"
        rec = lease.get(name)
        if rec is not None:
            state, since, evidence = LEASE_STATE[rec.event], rec.ts, _lease_evidence(rec)
        seen = history.at(name, at)
        if seen is not None and (since is None or seen.ts >= since):
            state, since, evidence = seen.status, seen.ts, "no registry entry" if seen.status == GONE \
                else "its registry entry"
        wrote = wrote_before.get(name)
        if wrote is not None and (since is None or wrote.ts > since) and state in (STALE, LEFT, GONE, UNKNOWN):
            what = "traffic" if wrote.kind == "envelope" else wrote.event
            state, since, evidence = ONLINE, wrote.ts, f"it journaled {what}"
        grants = seen if seen is not None and seen.status != GONE else None
        later = None
        if grants is None and seen is None:
            later = history.after(name, at)
            later = later if later is not None and later.status != GONE else None
        source = grants or later
        h = health.get(name)
        problem = ""
        if h is not None and h.event != RECOVERED and not (rec is not None and rec.node == name
                                                           and rec.event in ("registered", "reclaimed")
                                                           and rec.ts > h.ts):
            problem = f"{h.event}: {h.detail}" if h.detail else h.event
        nodes.append(PastNode(
            name=name, state=state, since=since, evidence=evidence,
            allow=source.allow if source else None, groups=source.groups if source else None,
            services=source.services if source else None, grants_from=source.ts if source else None,
            grants_later=grants is None and later is not None, lease=source.lease if source else None,
            health=problem, sent=sent.get(name, 0), received=received.get(name, 0), rejected=rejected.get(name, 0)))
    shown = around
    if len(around) > limit:  # the records nearest the moment, still in time order
        i = bisect_left(around, at, key=lambda r: r.ts)
        lo = max(0, min(i - limit // 2, len(around) - limit))
        shown = around[lo:lo + limit]
    events = sorted((r for r in lifecycle if at - window <= r.ts <= at + window), key=lambda r: (r.ts, r.id))
    stamps = [r.ts for r in lifecycle] + [r.ts for r in around]
    return Moment(at, window, tuple(nodes), tuple(shown), max(total or 0, len(around)), tuple(events),
                  min(stamps) if stamps else None, max(stamps) if stamps else None, history.first)


def neighbour(at: float, times: Sequence[float], direction: int) -> float | None:
    """The nearest time in sorted ``times`` strictly after (direction > 0) or before ``at``."""
    if direction > 0:
        i = bisect_right(times, at)
        return times[i] if i < len(times) else None
    i = bisect_left(times, at)
    return times[i - 1] if i else None


def event_times(lifecycle: Iterable[TraceRecord], history: RegistryHistory | None = None) -> list[float]:
    """The moments something happened to a node: lease and health records, and the changes the
    console's registry scans saw."""
    times = {r.ts for r in lifecycle}
    if history is not None:
        times.update(history.change_times())
    return sorted(times)


_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_moment(text: str, now: float) -> float:
    """A moment as the operator types it: ``now``, ``-90s``, ``-5m``, ``-1h30m``, ``14:32``,
    ``14:32:10.250`` (today, or yesterday if that is still to come), ``2026-11-23 14:32:10``.
    Raises ValueError with one sentence."""
    t = text.strip().lower()
    if t in ("", "now"):
        return now
    if t.startswith("-") or t.endswith("ago"):
        body = t.lstrip("-").removesuffix("ago").replace(" ", "")
        if body and _SPAN.sub("", body) == "":
            return now - sum(float(n) * _UNIT[u] for n, u in _SPAN.findall(body))
        raise ValueError(f"{text!r} is not a span back in time (for example -90s, -5m, -1h30m)")
    m = re.fullmatch(r"(?:(\d{4})-(\d{2})-(\d{2})[ t])?(\d{1,2}):(\d{2})(?::(\d{2})(\.\d+)?)?", t)
    if m is None:
        raise ValueError(f"{text!r} is not a moment: type -5m, 14:32:10 or 2026-11-23 14:32:10")
    year, month, day, hour, minute, second, frac = m.groups()
    if year is None:
        lt = time.localtime(now)
        year, month, day = lt.tm_year, lt.tm_mon, lt.tm_mday
    try:
        base = time.mktime((int(year), int(month), int(day), int(hour), int(minute), int(second or 0), 0, 0, -1))
    except (OverflowError, ValueError):
        raise ValueError(f"{text!r} is not a valid date and time") from None
    lt = time.localtime(base)
    if (lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min) != (int(month), int(day), int(hour), int(minute)) \
            or int(second or 0) > 59:
        raise ValueError(f"{text!r} is not a valid date and time")
    moment = base + (float(frac) if frac else 0.0)
    if m.group(1) is None and moment > now:
        moment -= 86400.0  # a time of day still to come today: yesterday's
    return moment
