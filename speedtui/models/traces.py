"""Trace records (SPEED-WIRE-V1 §8): normalised records, a bounded ring buffer with
incremental filtering, SPC call linking, lease history and a per-second rate."""

from __future__ import annotations

import itertools
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    id: int
    ts: float
    node: str
    kind: str  # envelope | lease
    dir: str = ""
    peer: str = ""
    type: str = ""
    seq: int | None = None
    size: int | None = None
    outcome: str = ""
    reason: str = ""
    request_id: str = ""
    service: str = ""
    status: str = ""
    error_code: str = ""
    latency_ms: float | None = None
    envelope: str | None = None  # base64 of the sealed bytes
    subject: str = ""
    event: str = ""
    source: str = "journal"  # journal | observer

    @property
    def sender(self) -> str:
        return self.node if self.dir == "out" else self.peer

    @property
    def receiver(self) -> str:
        return self.peer if self.dir == "out" else self.node

    @property
    def result(self) -> str:
        if self.outcome == "rejected":
            return f"rejected:{self.reason}" if self.reason else "rejected"
        return self.outcome

    def text(self) -> str:
        return " ".join(str(x) for x in (self.node, self.peer, self.type, self.outcome, self.reason,
                                         self.request_id, self.service, self.status, self.error_code,
                                         self.seq if self.seq is not None else "")).lower()


def _s(d: dict, k: str) -> str:
    v = d.get(k)
    return v if isinstance(v, str) else ""


def _name(d: dict, k: str) -> str:
    """Node names, types, outcomes and reasons repeat in every record: one shared string each,
    not one per record held for the ring's lifetime (fewer objects for the collector to walk
    and less scattered small memory)."""
    v = _s(d, k)
    return sys.intern(v) if len(v) <= 64 else v


def _i(d: dict, k: str) -> int | None:
    v = d.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _f(d: dict, k: str) -> float | None:
    v = d.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def parse_record(d: Any, source: str = "journal") -> TraceRecord | None:
    """A journal line (already JSON-decoded) to a record, or None if it is not a valid record."""
    if not isinstance(d, dict):
        return None
    ts = _f(d, "ts")
    node = _name(d, "node")
    if ts is None or not node:
        return None
    kind = _s(d, "kind") or "envelope"
    if kind == "lease":
        if not _s(d, "event"):
            return None
        return TraceRecord(id=next(_ids), ts=ts, node=node, kind="lease",
                           subject=_name(d, "subject") or node, event=_name(d, "event"), source=source)
    if kind != "envelope":
        return None
    return TraceRecord(
        id=next(_ids), ts=ts, node=node, kind="envelope", dir=_name(d, "dir"), peer=_name(d, "peer"),
        type=_name(d, "type"), seq=_i(d, "seq"), size=_i(d, "size"), outcome=_name(d, "outcome"),
        reason=_name(d, "reason"), request_id=_s(d, "requestId"), service=_name(d, "service"),
        status=_name(d, "status"), error_code=_name(d, "errorCode"), latency_ms=_f(d, "latencyMs"),
        envelope=_s(d, "envelope") or None, source=source,
    )


@dataclass(frozen=True)
class Comparison:
    """``latency>50`` (ms), ``seq>=100``, ``size<4096``: a record without the field never matches."""

    field: str  # latency_ms | seq | size
    op: str  # > >= < <= =
    value: float

    def matches(self, r: TraceRecord) -> bool:
        v = getattr(r, self.field)
        if v is None:
            return False
        return {">": v > self.value, ">=": v >= self.value, "<": v < self.value, "<=": v <= self.value,
                "=": v == self.value}[self.op]


@dataclass
class TraceFilter:
    node: str = ""
    type: str = ""
    outcome: str = ""  # sent | accepted | rejected | "" ; "error" = SPC errors
    text: str = ""
    nodes: frozenset[str] | None = None  # fabric restriction
    reason: str = ""  # rejection reason (prefix), e.g. bad_tag
    service: str = ""
    comparisons: tuple[Comparison, ...] = ()

    def active(self) -> bool:
        return bool(self.node or self.type or self.outcome or self.text or self.nodes is not None or self.reason
                    or self.service or self.comparisons)

    def matches(self, r: TraceRecord) -> bool:
        if self.node and self.node not in (r.node, r.peer):
            return False
        if self.nodes is not None and r.node not in self.nodes and r.peer not in self.nodes:
            return False
        if self.type and r.type.upper() != self.type.upper():
            return False
        if self.outcome:
            if self.outcome == "error":
                if not (r.status == "ERROR" or r.error_code):
                    return False
            elif r.outcome != self.outcome:
                return False
        if self.reason and not r.reason.startswith(self.reason):
            return False
        if self.service and r.service != self.service:
            return False
        for c in self.comparisons:
            if not c.matches(r):
                return False
        if self.text:
            hay = r.text()
            if not all(p in hay for p in self.text.lower().split()):
                return False
        return True


def _insert_in_time_order(ring: deque, r: TraceRecord) -> None:
    """Journals are read one after another, so a record can be older than the last one taken in:
    it goes where its time puts it (nearly always at the end, else a few places before)."""
    i = len(ring)
    while i > 0 and ring[i - 1].ts > r.ts:
        i -= 1
    if i == len(ring):
        ring.append(r)
    else:
        ring.insert(i, r)


@dataclass(frozen=True)
class CallLink:
    request_id: str
    caller: str
    callee: str
    service: str
    records: tuple[TraceRecord, ...]
    status: str
    error_code: str
    rtt_ms: float | None


class TraceStore:
    """Ring buffer of envelope records with an incrementally maintained filtered view."""

    def __init__(self, capacity: int = 20000, lease_capacity: int = 5000) -> None:
        self.capacity = capacity
        self.ring: deque[TraceRecord] = deque(maxlen=capacity)
        self.filter = TraceFilter()
        self.view: deque[TraceRecord] = deque()
        self.leases: deque[TraceRecord] = deque(maxlen=lease_capacity)
        self.total = 0
        self.bad_lines = 0
        self.dropped = 0  # records the app could not take in time (bridge overflow)
        self.journaling: set[str] = set()  # nodes whose journals have been read
        self.buckets: dict[int, int] = {}
        # a lone record is stored bare, not in a one-element list: tens of thousands of small
        # containers made each full garbage collection a key-blocking 100+ ms pause
        self.by_request: dict[str, TraceRecord | tuple[TraceRecord, ...]] = {}

    # ---- ingest
    def add(self, records: Iterable[TraceRecord]) -> int:
        n = 0
        for r in records:
            if r.source == "journal":
                self.journaling.add(r.node)
            if r.kind == "lease":
                self.leases.append(r)
                continue
            n += 1
            self.total += 1
            sec = int(r.ts)
            self.buckets[sec] = self.buckets.get(sec, 0) + 1
            if len(self.ring) == self.ring.maxlen:
                if r.ts < self.ring[0].ts:
                    continue  # older than everything a full ring keeps: it would be the next to go
                old = self.ring.popleft()
                if self.view and self.view[0] is old:
                    self.view.popleft()
                if old.request_id:
                    self._unlink_request(old)
            _insert_in_time_order(self.ring, r)
            if self.filter.matches(r):
                _insert_in_time_order(self.view, r)
            if r.request_id:
                had = self.by_request.get(r.request_id)
                if had is None:
                    self.by_request[r.request_id] = r
                else:
                    self.by_request[r.request_id] = (had, r) if isinstance(had, TraceRecord) else had + (r,)
        if len(self.buckets) > 600:
            for k in sorted(self.buckets)[:-300]:
                del self.buckets[k]
        return n

    def _unlink_request(self, old: TraceRecord) -> None:
        had = self.by_request.get(old.request_id)
        if had is old:
            del self.by_request[old.request_id]
        elif isinstance(had, tuple):
            rest = tuple(r for r in had if r is not old)
            if not rest:
                del self.by_request[old.request_id]
            else:
                self.by_request[old.request_id] = rest[0] if len(rest) == 1 else rest

    def records_for(self, request_id: str) -> tuple[TraceRecord, ...]:
        had = self.by_request.get(request_id)
        if had is None:
            return ()
        return (had,) if isinstance(had, TraceRecord) else had

    def set_filter(self, f: TraceFilter) -> None:
        self.filter = f
        self.view = deque(r for r in self.ring if f.matches(r))

    # ---- queries
    def rate_series(self, now: float, seconds: int = 60) -> list[float]:
        end = int(now)
        return [float(self.buckets.get(s, 0)) for s in range(end - seconds + 1, end + 1)]

    def lease_history(self, subject: str, limit: int = 100) -> list[TraceRecord]:
        out = [r for r in self.leases if r.subject == subject]
        return out[-limit:]

    def lease_history_split(self, subject: str, limit: int = 12) -> tuple[list[TraceRecord], list[TraceRecord]]:
        """The node's own lease events (registered, renewed late, lost, deregistered…) and what its
        peers observed of it (join, expiry, leave), each the newest ``limit``, oldest first."""
        hist = self.lease_history(subject, limit=10 * limit)
        own = [r for r in hist if r.node == subject]
        seen = [r for r in hist if r.node != subject]
        return own[-limit:], seen[-limit:]

    def call_link(self, rec: TraceRecord) -> CallLink | None:
        if not rec.request_id:
            return None
        recs = sorted(self.records_for(rec.request_id) or (rec,), key=lambda r: (r.ts, r.id))
        # the caller is the sender of the SPC_REQUEST
        caller = callee = ""
        for r in recs:
            if r.type == "SPC_REQUEST":
                caller, callee = r.sender, r.receiver
                break
        if not caller:
            for r in recs:
                if r.type == "SPC_RESPONSE":
                    caller, callee = r.receiver, r.sender
                    break
        recs = [r for r in recs if {r.node, r.peer} <= {caller, callee} or not caller]
        service = next((r.service for r in recs if r.service), "")
        status = next((r.status for r in recs if r.type == "SPC_RESPONSE" and r.status), "")
        err = next((r.error_code for r in recs if r.error_code), "")
        rtt = next((r.latency_ms for r in recs if r.latency_ms is not None), None)
        if rtt is None:
            sent = next((r.ts for r in recs if r.type == "SPC_REQUEST" and r.dir == "out" and r.node == caller), None)
            got = next((r.ts for r in recs if r.type == "SPC_RESPONSE" and r.dir == "in"
                        and r.node == caller and r.outcome == "accepted"), None)
            if sent is not None and got is not None:
                rtt = (got - sent) * 1000.0
        return CallLink(rec.request_id, caller, callee, service, tuple(recs), status, err, rtt)

    def replay_state(self, node: str) -> dict[str, Any]:
        """Derived from the journals: last accepted sequence per sender and recent rejections."""
        last: dict[str, int] = {}
        rejected: list[TraceRecord] = []
        for r in self.ring:
            if r.node != node or r.dir != "in":
                continue
            if r.outcome == "accepted" and r.seq is not None:
                last[r.peer] = max(last.get(r.peer, 0), r.seq)
            elif r.outcome == "rejected":
                rejected.append(r)
        return {"last_accepted": dict(sorted(last.items())), "rejections": rejected[-20:]}
