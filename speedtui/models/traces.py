"""Trace records (SPEED-WIRE-V1 §8): the runtime's parsed records in the console's view model, a
bounded ring buffer with incremental filtering, SPC call linking, lease and health history, the
nodes' unresolved health problems and a per-second rate."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any, Iterable

from speed_runtime.core.records import (ENVELOPE_FIELD_LIMIT, ControlTrace, DurableTrace, EnvelopeTrace, HealthTrace,
                                        LeaseTrace, MessageTrace, ThreatTrace)
from speed_runtime.core.records import parse_record as parse_event
from speed_runtime.core.visible import visible

from .lease_history import LeaseHistory

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """The console's view of one journal record (the runtime's ``EnvelopeTrace``, ``LeaseTrace``,
    ``HealthTrace``, ``MessageTrace``, ``ThreatTrace``, ``DurableTrace`` or ``ControlTrace``):
    absent fields are "" so that filters and cells need no None checks, and an id orders records of
    the same time."""

    id: int
    ts: float
    node: str
    kind: str  # envelope | lease | health | message | threat | durable | control
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
    envelope: bytes | None = None  # the sealed bytes, when the record carries them
    subject: str = ""  # lease: the node the event is about; health: the node itself; control: the operator key
    event: str = ""  # lease and health records; control: the command
    detail: str = ""  # health records; control: the command's argument, or why it was refused
    source: str = "journal"  # journal | observer
    message_id: str = ""  # envelope and message records: the logical message (chunks, reliable)
    chunk: int | None = None  # envelope: its index among the message's chunks…
    chunks: int | None = None  # …of this many (message records: envelopes per transmission)
    attempt: int = 0  # message records: transmissions so far (0: not reliable)
    score: float | None = None  # threat records: the sender's score after the change
    stream: str = ""  # durable records: the stream…
    number: int | None = None  # …and the message id in it

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
                                         self.event, self.message_id,
                                         self.seq if self.seq is not None else "")).lower()

    @property
    def folded_chunk(self) -> bool:
        """An envelope carrying one chunk of a chunked message (shown under its message's row)."""
        return self.kind == "envelope" and self.chunks is not None and self.chunks > 1 and bool(self.message_id)


def record_of(event: Any, source: str = "journal", keep_envelope: bool = True) -> TraceRecord | None:
    """The runtime's trace event (``core.records``: parsed from a journal line, or handed to an
    observer) in the console's view model; None for anything else (an ``SpcTrace``, None). Its
    strings are as ``core.visible`` shows them: any member writes journals, and a record's fields
    end up in cells, titles, notifications and exports (the sealed bytes stay as they are)."""
    rec = _record_of(event, source, keep_envelope)
    if rec is None:
        return None
    texts = _texts(rec)
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():  # nearly always: one check, not one per field
        return rec
    return replace(rec, **{name: visible(text) for name, text in zip(TEXT_FIELDS, texts)})


TEXT_FIELDS = ("node", "dir", "peer", "type", "outcome", "reason", "request_id", "service", "status", "error_code",
               "subject", "event", "detail", "message_id", "stream")
_texts = attrgetter(*TEXT_FIELDS)


def _record_of(event: Any, source: str, keep_envelope: bool) -> TraceRecord | None:
    if isinstance(event, EnvelopeTrace):
        env = event.envelope if keep_envelope and event.envelope is not None \
            and len(event.envelope) <= ENVELOPE_FIELD_LIMIT else None  # what a journal would keep
        return TraceRecord(
            id=next(_ids), ts=event.ts, node=event.node, kind="envelope", dir=event.dir, peer=event.peer,
            type=event.type, seq=event.seq, size=event.size, outcome=event.outcome, reason=event.reason or "",
            request_id=event.request_id or "", service=event.service or "", status=event.status or "",
            error_code=event.error_code or "", latency_ms=event.latency_ms, envelope=env, source=source,
            message_id=event.message_id or "", chunk=event.chunk, chunks=event.chunks)
    if isinstance(event, MessageTrace):
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="message", dir=event.dir,
                           peer=event.peer, type=event.type, seq=event.seq, size=event.size, event=event.event,
                           reason=event.reason or "", detail=event.detail, source=source,
                           message_id=event.message_id, chunks=event.chunks, attempt=event.attempt)
    if isinstance(event, ThreatTrace):
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="threat", peer=event.peer,
                           event=event.event, reason=event.reason, score=event.score, detail=event.instance,
                           source=source)
    if isinstance(event, DurableTrace):
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="durable", peer=event.peer,
                           event=event.event, status=event.status or "", stream=event.stream, number=event.id,
                           detail=event.detail, source=source)
    if isinstance(event, ControlTrace):
        # a control request the node applied or refused: asked by `peer` (the requester node)
        # with the operator key whose fingerprint is `subject`
        arguments = " ".join(str(v) for v in (event.arguments or {}).values())
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="control", dir="in", peer=event.peer,
                           type="CONTROL", outcome=event.outcome, reason=event.reason or "",
                           event=event.command or "", detail=event.detail or arguments,
                           subject=event.operator or "", source=source)
    if isinstance(event, LeaseTrace):
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="lease", subject=event.subject,
                           event=event.event, source=source)
    if isinstance(event, HealthTrace):
        return TraceRecord(id=next(_ids), ts=event.ts, node=event.node, kind="health", subject=event.node,
                           event=event.event, detail=event.detail, source=source)
    return None


def parse_record(d: Any, source: str = "journal") -> TraceRecord | None:
    """A journal record (already JSON-decoded) through the runtime's parser, or None if it is not
    a valid record."""
    return record_of(parse_event(d), source)


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


_time = attrgetter("ts")


def _merge_in_time_order(ring: deque, taken: list, keep: int | None = None) -> list:
    """Put ``taken`` (sorted by time) into ``ring`` (in time order) where their times put them,
    keeping at most ``keep`` records (the newest); returns the records that fell off the old end.

    Journals are read one after another, a pass of each at a time, so a whole batch can be older
    than the newest record taken in: the ring's records newer than the batch's oldest are taken
    off its end and merged with the batch once (records of equal time keep their order, the ring's
    first). A walk back from the end for each record cost the length of the ring per record: the
    console's first read of sixteen journals' tails (a few hundred thousand records) held its main
    thread for minutes."""
    newer: list = []
    if taken:
        first = taken[0].ts
        while ring and ring[-1].ts > first:
            newer.append(ring.pop())
    newer.reverse()
    fell: list = []
    for r in (heapq.merge(newer, taken, key=_time) if newer else taken):
        if keep is not None and len(ring) >= keep:
            fell.append(ring.popleft())
        ring.append(r)
    return fell


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


RECOVERED = "receiving_recovered"  # the one health event that ends a problem (PROTOCOL.md reading 28)
LASTING = frozenset({"receiving_failed", "stopped_renewing"})  # problems that last until the node recovers
TRANSIENT_SECONDS = 60.0  # the others (a lock held, a renewal failed, the inbox replaced…) mark a row this long
MAX_HEALTH_NODES = 10_000
REJECTION_BUCKET = 10  # seconds per bucket of the rejections per receiver and sender (Security's sparklines)
REJECTION_BUCKETS = 30  # buckets kept per pair (five minutes)
MAX_REJECTION_PAIRS = 10_000


class TraceStore:
    """Ring buffer of envelope, message and control records with an incrementally maintained
    filtered view (the envelopes of a chunked message are folded under its message records until
    it is expanded); lease and health records (a node's life, and its reports about itself) in
    their own bounded ring; threat and durable records in theirs, with rejections counted per
    receiver and sender over the last minutes; control records also in their own (the Audit view
    lists what the nodes applied)."""

    def __init__(self, capacity: int = 20000, lease_capacity: int = 5000) -> None:
        self.capacity = capacity
        self.ring: deque[TraceRecord] = deque(maxlen=capacity)
        self.filter = TraceFilter()
        self.view: deque[TraceRecord] = deque()
        self.leases: deque[TraceRecord] = deque(maxlen=lease_capacity)  # lease and health records
        self.lease_log = LeaseHistory()  # the same, per node: other nodes' churn cannot evict it
        self.lease_version = 0  # bumped with every lease or health record (a full ring's length is not)
        self.problems: dict[str, TraceRecord] = {}  # node → its latest health problem not yet resolved
        self.health_version = 0  # bumped when ``problems`` changes (rows show it)
        self.total = 0
        self.bad_lines = 0
        self.dropped = 0  # records the app could not take in time (bridge overflow)
        self.journaling: set[str] = set()  # nodes whose journals have been read
        self.buckets: dict[int, int] = {}
        # a lone record is stored bare, not in a one-element list: tens of thousands of small
        # containers made each full garbage collection a key-blocking 100+ ms pause
        self.by_request: dict[str, TraceRecord | tuple[TraceRecord, ...]] = {}
        self.threats: deque[TraceRecord] = deque(maxlen=lease_capacity)  # threat records (quota)
        self.durable: deque[TraceRecord] = deque(maxlen=lease_capacity)  # durable records
        self.controls: deque[TraceRecord] = deque(maxlen=lease_capacity)  # control requests, applied or refused
        self.control_version = 0  # bumped by a control record
        self.rejections: dict[tuple[str, str], dict[int, int]] = {}  # (receiver, sender) → bucket → count
        self.rejection_reasons: dict[tuple[str, str], deque[str]] = {}  # the same pairs → their last reasons
        self.security_version = 0  # bumped by a threat record or a rejection
        self.expanded: set[str] = set()  # chunked messages whose envelopes are shown

    def shows(self, r: TraceRecord) -> bool:
        """Whether the filtered view holds ``r``: it matches the filter and is not a folded chunk."""
        if r.folded_chunk and r.message_id not in self.expanded:
            return False
        return self.filter.matches(r)

    def toggle_expanded(self, message_id: str) -> bool:
        """Show or fold a chunked message's envelopes; True when they are shown now."""
        if message_id in self.expanded:
            self.expanded.discard(message_id)
        else:
            self.expanded.add(message_id)
        self.set_filter(self.filter)
        return message_id in self.expanded

    def _note_rejection(self, r: TraceRecord) -> None:
        key = (r.node, r.peer)
        buckets = self.rejections.get(key)
        if buckets is None:
            if len(self.rejections) >= MAX_REJECTION_PAIRS:
                return
            buckets = self.rejections[key] = {}
        b = int(r.ts // REJECTION_BUCKET)
        buckets[b] = buckets.get(b, 0) + 1
        if r.reason:
            reasons = self.rejection_reasons.setdefault(key, deque(maxlen=3))
            if not reasons or reasons[-1] != r.reason:
                reasons.append(r.reason)
        if len(buckets) > 2 * REJECTION_BUCKETS:
            for old in sorted(buckets)[:-REJECTION_BUCKETS]:
                del buckets[old]
        self.security_version += 1

    def rejection_series(self, receiver: str, sender: str, now: float,
                         buckets: int = REJECTION_BUCKETS) -> list[int]:
        """Rejections of ``sender``'s envelopes at ``receiver`` per REJECTION_BUCKET seconds, oldest
        first, the current bucket last (from the journals' rejected envelope records)."""
        got = self.rejections.get((receiver, sender), {})
        end = int(now // REJECTION_BUCKET)
        return [got.get(b, 0) for b in range(end - buckets + 1, end + 1)]

    # ---- ingest
    def add(self, records: Iterable[TraceRecord]) -> int:
        n = 0
        taken: list[TraceRecord] = []  # for the ring and the view, in one merge (_take)
        for r in records:
            if r.source == "journal":
                self.journaling.add(r.node)
            kind = r.kind
            if kind == "threat" or kind == "durable":
                (self.threats if kind == "threat" else self.durable).append(r)
                self.security_version += 1
                continue
            if kind == "control":
                self.controls.append(r)
                self.control_version += 1
            elif kind != "envelope" and kind != "message":
                self.leases.append(r)
                self.lease_log.add(r)
                self.lease_version += 1
                self._note_health(r)
                continue
            n += 1
            self.total += 1
            if kind == "envelope":  # the header's rate counts envelopes
                sec = int(r.ts)
                self.buckets[sec] = self.buckets.get(sec, 0) + 1
                if r.outcome == "rejected" and r.dir == "in":
                    self._note_rejection(r)
            taken.append(r)
            if r.request_id:
                had = self.by_request.get(r.request_id)
                if had is None:
                    self.by_request[r.request_id] = r
                else:
                    self.by_request[r.request_id] = (had, r) if isinstance(had, TraceRecord) else had + (r,)
        if taken:
            self._take(taken)
        if len(self.buckets) > 600:
            for k in sorted(self.buckets)[:-300]:
                del self.buckets[k]
        return n

    def _take(self, taken: list[TraceRecord]) -> None:
        """The ring keeps the newest ``capacity`` records in time order, the view those of them it
        shows, in the same order; what falls off the ring leaves the view and the request index."""
        taken.sort(key=_time)  # stable: records of one time keep the order they were read in
        fell = _merge_in_time_order(self.ring, taken, self.capacity)
        gone: set[int] = set()
        for old in fell:
            gone.add(id(old))
            if old.request_id:
                self._unlink_request(old)
        view = self.view
        while view and id(view[0]) in gone:  # what fell off is the ring's oldest, so the view's
            view.popleft()
        shown = [r for r in taken if id(r) not in gone and self.shows(r)]
        if shown:
            _merge_in_time_order(view, shown)

    def _note_health(self, r: TraceRecord) -> None:
        """A health record other than a recovery is a problem until the node recovers or a new
        instance of it registers."""
        had = self.problems.get(r.node)
        if had is not None and r.ts < had.ts:
            return  # an older record read late: the newer one stands
        if r.kind == "health" and r.event != RECOVERED:
            if had is None and len(self.problems) >= MAX_HEALTH_NODES:
                return
            self.problems[r.node] = r
        elif had is not None and (r.kind == "health" or (r.subject == r.node and r.event in ("registered",
                                                                                             "reclaimed"))):
            del self.problems[r.node]
        else:
            return
        self.health_version += 1

    def health_marks(self, now: float) -> dict[str, str]:
        """node → what its latest unresolved health record says, for its row: a lasting problem
        until the node recovers or registers again, any other for a minute."""
        return {n: f"{r.event}: {r.detail}" if r.detail else r.event for n, r in self.problems.items()
                if r.event in LASTING or now - r.ts <= TRANSIENT_SECONDS}

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
        self.view = deque(r for r in self.ring if self.shows(r))

    # ---- queries
    def rate_series(self, now: float, seconds: int = 60) -> list[float]:
        end = int(now)
        return [float(self.buckets.get(s, 0)) for s in range(end - seconds + 1, end + 1)]

    def lease_history(self, subject: str, limit: int = 100) -> list[TraceRecord]:
        """The newest ``limit`` lease and health records about ``subject``, oldest first: those the
        shared ring still holds and those kept for the node alone."""
        own, seen = self.lease_log.of(subject)
        found = {id(r): r for r in self.leases if r.subject == subject}
        found.update((id(r), r) for r in own + seen)
        return sorted(found.values(), key=lambda r: r.ts)[-limit:]

    def lease_history_split(self, subject: str, limit: int = 12) -> tuple[list[TraceRecord], list[TraceRecord]]:
        """The node's own lease events (registered, renewed late, lost, deregistered…) and health
        reports, and what its peers observed of it (join, expiry, leave), each the newest
        ``limit``, oldest first. Kept per node: a busy environment's churn does not evict them."""
        own, seen = self.lease_log.of(subject)
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
            if r.node != node or r.dir != "in" or r.kind != "envelope":
                continue
            if r.outcome == "accepted" and r.seq is not None:
                last[r.peer] = max(last.get(r.peer, 0), r.seq)
            elif r.outcome == "rejected":
                rejected.append(r)
        return {"last_accepted": dict(sorted(last.items())), "rejections": rejected[-20:]}
