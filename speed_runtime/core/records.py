"""Trace events and their journal records (wire contract §8): the one writer (`encode_line`) and
the one parser (`parse_line`, `parse_record`) of journal lines. Pure. Kinds: `envelope`, `lease`,
`health` (reading 28) and `control` (the `control` extension: one record per control request file).

An event is a NamedTuple (one is built per envelope, so they are cheap). `encode_line` builds the
line without a dict per record, because the journal writes one line per envelope; every string a
peer can influence goes through `json.dumps` or, on the hot kinds, the C escaper it calls for a str. `to_record()` is that same line as a dict.
"""
from __future__ import annotations

import base64
import binascii
import json
import sys
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, NamedTuple

from . import accel

REJECT_REASONS = (
    "unauthorized", "bad_size", "bad_version", "bad_tag", "wrong_target", "unknown_sender",
    "stale_timestamp", "replayed_nonce", "replayed_sequence", "bad_sequence", "unexpected_response",
    "too_large", "bad_payload", "bad_file",
)
# reasons each extension of the contract adds (§9), documented with the extension in docs/PROTOCOL.md
EXTENSION_REASONS: dict[str, tuple[str, ...]] = {
    "chunks": ("chunk_missing", "chunk_chain", "chunk_invalid", "chunk_expired", "message_too_large",
               "reassembly_full"),
    "reliable": (),
    "quota": ("quarantined",),  # removed unread: the claimed sender's threat score is over its threshold
    "control": ("control_malformed", "control_unsigned", "control_untrusted", "control_bad_signature",
                "control_wrong_target", "control_wrong_requester", "control_expired", "control_replayed",
                "control_refused"),
    "durable": ("durable_duplicate", "durable_bad_receipt", "durable_streams_full"),
}
LEASE_EVENTS = (
    "registered", "reclaimed", "renewed_late", "lost", "deregistered", "observed_join",
    "observed_expiry", "observed_leave", "reaped",
)
# health events of a node about itself (kind "health", an addition to §8 that readers skip)
HEALTH_EVENTS = ("receiving_failed", "receiving_recovered", "inbox_replaced", "registry_lock_held",
                 "renewal_failed", "stopped_renewing", "services_abandoned", "out_of_memory",
                 "durable_store_failed", "handler_failed")  # the last two: the durable extension's
# logical messages of the chunks and reliable extensions (kind "message", readers that do not know it skip it)
MESSAGE_EVENTS = ("sent", "retransmitted", "received", "send-error", "delivered", "duplicate", "voided")
# threat-score changes of a receiver's `quota` extension (kind "threat", §9; readers skip unknown kinds)
THREAT_EVENTS = ("raised", "quarantined", "released", "lifted")
# what the durable extension journals (kind "durable"; docs/PROTOCOL.md, durable, "Journal")
DURABLE_EVENTS = ("stored", "delivered", "handled", "duplicate", "receipt", "send_error")
RECORD_KINDS = ("envelope", "lease", "health", "control", "message", "threat", "durable")
CONTROL_OUTCOMES = ("applied", "rejected")  # of a control request (the `control` extension, §9)
MAX_LINE_BYTES = 4 * 1024 * 1024   # a longer journal line is malformed, never read whole
ENVELOPE_FIELD_LIMIT = 64 * 1024   # sealed envelopes up to this size are kept in the record


class EnvelopeTrace(NamedTuple):
    """One envelope sent, accepted or rejected."""

    ts: float
    node: str
    dir: str            # "out" | "in"
    peer: str
    type: str
    seq: int
    size: int
    outcome: str        # "sent" | "accepted" | "rejected"
    reason: str | None = None
    request_id: str | None = None
    service: str | None = None
    status: str | None = None
    error_code: str | None = None
    latency_ms: float | None = None
    envelope: bytes | None = None
    file: str | None = None  # inbox file name (observers only, not journaled)
    message_id: str | None = None   # the logical message this envelope belongs to (chunks, reliable)
    chunk: int | None = None        # its index among the message's chunks…
    chunks: int | None = None       # …of this many

    kind = "envelope"

    def to_record(self, *, include_envelope: bool = True) -> dict[str, Any]:
        return json.loads(encode_line(self, ENVELOPE_FIELD_LIMIT if include_envelope else -1))


class LeaseTrace(NamedTuple):
    ts: float
    node: str
    subject: str
    event: str

    kind = "lease"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


class HealthTrace(NamedTuple):
    """A node's report about itself: its receiving failed or recovered, its renewals stopped…"""

    ts: float
    node: str
    event: str
    detail: str = ""

    kind = "health"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


class ControlTrace(NamedTuple):
    """One file of a node's control/ directory (the `control` extension): a request applied, or
    rejected with its reason. `operator` is the fingerprint of the key presented (whenever one
    was); `command` and `arguments` are set only for requests whose signature verified."""

    ts: float
    node: str
    peer: str                 # the requester (as the file name claims, for rejected files)
    operator: str | None
    request_id: str | None
    command: str | None
    arguments: dict | None
    outcome: str              # "applied" | "rejected"
    reason: str | None = None
    detail: str = ""

    kind = "control"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


class ThreatTrace(NamedTuple):
    """A sender's threat score changed at a receiver (extension `quota`): `raised` by a rejection
    (`reason`), `quarantined` (its files are removed unread from now on), `released` (the score
    decayed below the release level) or `lifted` (by the operator). `instance` is the claimed
    instance (8 hex digits of the file name), empty when the change is about the name."""

    ts: float
    node: str
    peer: str
    event: str
    score: float
    instance: str = ""
    reason: str = ""

    kind = "threat"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


class SpcTrace(NamedTuple):
    """An SPC call finished on the caller's side (observers only: the journal has it on the
    SPC_RESPONSE record with `latencyMs`)."""

    ts: float
    node: str
    target: str
    service: str
    request_id: str
    status: str
    error_code: str | None
    latency_ms: float

    kind = "spc"


class MessageTrace(NamedTuple):
    """A logical message of the chunks or reliable extension: one record per event of its life.
    Out (the sender): `sent` (every envelope of a transmission delivered; `attempt` 1),
    `retransmitted` (attempt 2…), `received` (the receiver acknowledged it), `send-error` (given up,
    `reason` says why). In (the receiver): `delivered` (handed to the handler, service or caller),
    `duplicate` (a reliable message already delivered by this instance: not delivered again),
    `voided` (a chunked message dropped, `reason` one of the chunks reasons). Its envelopes' records
    carry the same `messageId`."""

    ts: float
    node: str
    dir: str            # "out" | "in"
    peer: str
    message_id: str
    event: str
    type: str = "MESSAGE"
    size: int = 0       # bytes of the value (the body)
    chunks: int = 1     # envelopes per transmission
    attempt: int = 0    # transmissions so far (sender; 0 when not reliable)
    reliable: bool = False
    seq: int = 0        # the last envelope's sequence number
    reason: str | None = None
    detail: str = ""

    kind = "message"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


class DurableTrace(NamedTuple):
    """A step of a durable message (extension `durable`): stored in the sender's outbox, a copy
    delivered, handled by the receiver (with the receipt's status), a copy suppressed as a
    duplicate, a receipt stored by the sender, or a send error (expired, refused, failed)."""

    ts: float
    node: str
    peer: str           # the other node: the target for a sender, the sender for a receiver
    event: str          # one of DURABLE_EVENTS
    stream: str
    id: int
    status: str | None = None   # handled | failed | expired (handled, receipt, send_error)
    index: int | None = None    # the receipt's position in its chain
    detail: str = ""

    kind = "durable"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return json.loads(encode_line(self))


TraceEvent = EnvelopeTrace | LeaseTrace | HealthTrace | ControlTrace | ThreatTrace | SpcTrace | MessageTrace | DurableTrace
JournalEvent = EnvelopeTrace | LeaseTrace | HealthTrace | ControlTrace | ThreatTrace | MessageTrace | DurableTrace
def envelope_event(ts: float, node: str, dir: str, peer: str, type: str, seq: int, size: int, outcome: str,
                   envelope: bytes | None, file: str | None, extra: dict[str, Any] | None = None) -> EnvelopeTrace:
    """``EnvelopeTrace(ts, …, outcome, envelope=envelope, file=file, **extra)``: one is built per
    envelope sent or accepted, and the named tuple's own constructor, with keywords, cost as much
    as the rest of the event's way to the journal; without `extra` the tuple is made directly."""
    if extra:
        return EnvelopeTrace(ts, node, dir, peer, type, seq, size, outcome, envelope=envelope, file=file, **extra)
    return _tuple_new(EnvelopeTrace, (ts, node, dir, peer, type, seq, size, outcome, None, None, None, None,
                                      None, None, envelope, file, None, None, None))


_tuple_new = tuple.__new__


JOURNALED = (EnvelopeTrace, LeaseTrace, HealthTrace, ControlTrace, ThreatTrace, MessageTrace, DurableTrace)

_dump = json.dumps
_esc = encode_basestring_ascii  # json.dumps of a str, in C (json's own escaper)
_OPTIONAL = (("reason", 8), ("requestId", 9), ("service", 10), ("status", 11), ("errorCode", 12),
             ("messageId", 16))


def encode_line(event: JournalEvent, envelope_limit: int = ENVELOPE_FIELD_LIMIT) -> str:
    """One journal line (with its newline). The envelope is kept when it is at most
    `envelope_limit` bytes."""
    if event.__class__ is EnvelopeTrace:  # the most frequent by far: one per envelope on both sides
        return envelope_line(event, envelope_limit)
    if isinstance(event, LeaseTrace):
        return (f'{{"kind":"lease","ts":{event.ts!r},"node":{_dump(event.node)},"subject":{_dump(event.subject)},'
                f'"event":{_dump(event.event)}}}\n')
    if isinstance(event, DurableTrace):
        line = (f'{{"kind":"durable","ts":{event.ts!r},"node":{_dump(event.node)},"peer":{_dump(event.peer)},'
                f'"event":{_dump(event.event)},"stream":{_dump(event.stream)},"id":{int(event.id)}')
        if event.status is not None:
            line += f',"status":{_dump(event.status)}'
        if event.index is not None:
            line += f',"index":{int(event.index)}'
        return line + (f',"detail":{_dump(event.detail)}' if event.detail else "") + "}\n"
    if isinstance(event, HealthTrace):
        return (f'{{"kind":"health","ts":{event.ts!r},"node":{_dump(event.node)},"event":{_dump(event.event)},'
                f'"detail":{_dump(event.detail)}}}\n')
    if isinstance(event, ControlTrace):
        return (f'{{"kind":"control","ts":{event.ts!r},"node":{_dump(event.node)},"peer":{_dump(event.peer)},'
                f'"operator":{_dump(event.operator)},"requestId":{_dump(event.request_id)},'
                f'"command":{_dump(event.command)},"arguments":{_dump(event.arguments, separators=(",", ":"))},'
                f'"outcome":{_dump(event.outcome)},"reason":{_dump(event.reason)},"detail":{_dump(event.detail)}}}\n')
    if isinstance(event, MessageTrace):
        return _message_line(event)
    if isinstance(event, ThreatTrace):
        return (f'{{"kind":"threat","ts":{event.ts!r},"node":{_dump(event.node)},"peer":{_dump(event.peer)},'
                f'"event":{_dump(event.event)},"score":{float(event.score)!r},"instance":{_dump(event.instance)},'
                f'"reason":{_dump(event.reason)}}}\n')
    return envelope_line(event, envelope_limit)


def envelope_line(e: EnvelopeTrace, envelope_limit: int) -> str:
    """The journal line of an EnvelopeTrace (what encode_line gives for one)."""
    try:  # the fast form: every string field a str, escaped by json's own C escaper
        return _envelope_fields(e, envelope_limit, _esc)
    except TypeError:  # a field of another type: json.dumps writes what it can, the same way
        return _envelope_fields(e, envelope_limit, _dump)


# The compiled form (core/accel.py) writes this line in C, the same text (one per envelope on both
# sides, so a journal's main cost); what it does not take (another type in a field) goes to the
# pure function, its twin (tests/runtime/test_compiled_form.py).
pure_envelope_line = envelope_line
if accel.compiled is not None:
    accel.compiled.bind("EnvelopeTrace", EnvelopeTrace)
    accel.compiled.bind("envelope_line", envelope_line)
    envelope_line = accel.compiled.envelope_line


_NO_OPTIONAL = (None,) * 5


def _envelope_fields(e: EnvelopeTrace, envelope_limit: int, q: Callable[[Any], str]) -> str:
    # one per envelope on both sides of every exchange, so written for speed: `q` is
    # encode_basestring_ascii (what json.dumps calls for a str, without its Python layers)
    line = (f'{{"kind":"envelope","ts":{e.ts!r},"node":{q(e.node)},"dir":{q(e.dir)},'
            f'"peer":{q(e.peer)},"type":{q(e.type)},"seq":{int(e.seq)},"size":{int(e.size)},'
            f'"outcome":{q(e.outcome)}')
    if e[8:13] != _NO_OPTIONAL or e.message_id is not None:
        for key, index in _OPTIONAL:
            value = e[index]
            if value is not None:
                line += f',"{key}":{q(value)}'
    if e.latency_ms is not None:
        line += f',"latencyMs":{float(e.latency_ms)!r}'
    if e.chunk is not None:
        line += f',"chunk":{int(e.chunk)},"chunks":{int(e.chunks or 0)}'
    if e.envelope is not None and len(e.envelope) <= envelope_limit:
        line += ',"envelope":"' + binascii.b2a_base64(e.envelope, newline=False).decode("ascii") + '"'
    return line + "}\n"


def _message_line(e: MessageTrace) -> str:
    try:
        return _message_fields(e, _esc)
    except TypeError:
        return _message_fields(e, _dump)


def _message_fields(e: MessageTrace, q: Callable[[Any], str]) -> str:
    line = (f'{{"kind":"message","ts":{e.ts!r},"node":{q(e.node)},"dir":{q(e.dir)},'
            f'"peer":{q(e.peer)},"messageId":{q(e.message_id)},"event":{q(e.event)},'
            f'"type":{q(e.type)},"size":{int(e.size)},"chunks":{int(e.chunks)},"attempt":{int(e.attempt)},'
            f'"reliable":{"true" if e.reliable else "false"},"seq":{int(e.seq)}')
    if e.reason is not None:
        line += f',"reason":{q(e.reason)}'
    if e.detail:
        line += f',"detail":{q(e.detail)}'
    return line + "}\n"


def parse_line(line: bytes | str) -> JournalEvent | None:
    """One journal line back as an event; None for anything that is not a valid record (torn,
    not JSON, nested beyond the parser's depth, over MAX_LINE_BYTES, unknown kind)."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        return parse_record(json.loads(line))
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None


def _name(v: Any) -> str:
    """Node names, types, outcomes and reasons repeat in every record: share one string each
    (readers such as the console keep tens of thousands of records)."""
    if not isinstance(v, str):
        raise TypeError("not a string")
    return sys.intern(v) if len(v) <= 64 else v


def parse_record(rec: Any) -> JournalEvent | None:
    """A decoded journal record back as an event; None if it is not a valid record."""
    if not isinstance(rec, dict):
        return None
    try:
        kind = rec.get("kind", "envelope")
        ts = _number(rec["ts"])
        node = _name(rec["node"])
        if kind == "lease":
            return LeaseTrace(ts, node, _name(rec["subject"]), _name(rec["event"]))
        if kind == "health":
            return HealthTrace(ts, node, _name(rec["event"]), _opt(rec, "detail") or "")
        if kind == "control":
            arguments = rec.get("arguments")
            return ControlTrace(ts, node, _name(rec["peer"]), _opt_name(rec, "operator"), _opt(rec, "requestId"),
                                _opt_name(rec, "command"), arguments if isinstance(arguments, dict) else None,
                                _name(rec["outcome"]), _opt_name(rec, "reason"), _opt(rec, "detail") or "")
        if kind == "message":
            return MessageTrace(ts, node, _name(rec["dir"]), _name(rec["peer"]), _opt(rec, "messageId") or "",
                                _name(rec["event"]), _opt_name(rec, "type") or "MESSAGE",
                                int(_number(rec.get("size", 0))), int(_number(rec.get("chunks", 1))),
                                int(_number(rec.get("attempt", 0))), rec.get("reliable") is True,
                                int(_number(rec.get("seq", 0))), _opt_name(rec, "reason"), _opt(rec, "detail") or "")
        if kind == "threat":
            return ThreatTrace(ts, node, _name(rec["peer"]), _name(rec["event"]), _number(rec["score"]),
                               _opt_name(rec, "instance") or "", _opt_name(rec, "reason") or "")
        if kind == "durable":
            index = rec.get("index")
            return DurableTrace(ts, node, _name(rec["peer"]), _name(rec["event"]), _name(rec["stream"]),
                                int(_number(rec["id"])), _opt_name(rec, "status"),
                                int(_number(index)) if index is not None else None, _opt(rec, "detail") or "")
        if kind != "envelope":
            return None
        envelope = rec.get("envelope")
        return EnvelopeTrace(
            ts=ts, node=node, dir=_name(rec["dir"]), peer=_name(rec["peer"]), type=_name(rec["type"]),
            seq=int(_number(rec.get("seq", 0))), size=int(_number(rec.get("size", 0))),
            outcome=_name(rec["outcome"]), reason=_opt_name(rec, "reason"), request_id=_opt(rec, "requestId"),
            service=_opt_name(rec, "service"), status=_opt_name(rec, "status"),
            error_code=_opt_name(rec, "errorCode"),
            latency_ms=_number(rec["latencyMs"]) if rec.get("latencyMs") is not None else None,
            envelope=base64.b64decode(envelope, validate=True) if isinstance(envelope, str) else None,
            message_id=_opt(rec, "messageId"), chunk=_opt_int(rec, "chunk"), chunks=_opt_int(rec, "chunks"),
        )
    except (KeyError, TypeError, ValueError, OverflowError, binascii.Error):
        return None


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("not a number")
    return float(v)


def _opt_int(rec: dict, key: str) -> int | None:
    v = rec.get(key)
    return int(_number(v)) if v is not None else None


def _opt(rec: dict, key: str) -> str | None:
    v = rec.get(key)
    return v if isinstance(v, str) else None


def _opt_name(rec: dict, key: str) -> str | None:
    v = rec.get(key)
    return _name(v) if isinstance(v, str) else None
