"""Trace events and their journal records (wire contract §8). Pure."""
from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

REJECT_REASONS = (
    "unauthorized", "bad_size", "bad_version", "bad_tag", "wrong_target", "unknown_sender",
    "stale_timestamp", "replayed_nonce", "replayed_sequence", "too_large", "bad_payload", "bad_file",
)
LEASE_EVENTS = (
    "registered", "reclaimed", "renewed_late", "lost", "deregistered", "observed_join",
    "observed_expiry", "observed_leave", "reaped",
)


class EnvelopeTrace(NamedTuple):
    """One envelope sent, accepted or rejected. (Tuples: one is built per envelope.)"""

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
    file: str | None = None  # inbox file name, for the console's replay view

    kind = "envelope"

    def to_record(self, *, include_envelope: bool = True) -> dict[str, Any]:
        rec: dict[str, Any] = {"kind": "envelope", "ts": self.ts, "node": self.node, "dir": self.dir,
                               "peer": self.peer, "type": self.type, "seq": self.seq,
                               "size": self.size, "outcome": self.outcome}
        for key, value in (("reason", self.reason), ("requestId", self.request_id),
                           ("service", self.service), ("status", self.status),
                           ("errorCode", self.error_code), ("latencyMs", self.latency_ms)):
            if value is not None:
                rec[key] = value
        if include_envelope and self.envelope is not None:
            rec["envelope"] = base64.b64encode(self.envelope).decode("ascii")
        return rec


class LeaseTrace(NamedTuple):
    ts: float
    node: str
    subject: str
    event: str

    kind = "lease"

    def to_record(self, **_: Any) -> dict[str, Any]:
        return {"kind": "lease", "ts": self.ts, "node": self.node, "subject": self.subject, "event": self.event}


class SpcTrace(NamedTuple):
    """An SPC call finished on the caller's side (observer-only; the journal has it on the
    SPC_RESPONSE record)."""

    ts: float
    node: str
    target: str
    service: str
    request_id: str
    status: str
    error_code: str | None
    latency_ms: float

    kind = "spc"


TraceEvent = EnvelopeTrace | LeaseTrace | SpcTrace


def parse_record(rec: Any) -> EnvelopeTrace | LeaseTrace | None:
    """A journal record back as an event; None if it is not a valid record."""
    if not isinstance(rec, dict):
        return None
    try:
        kind = rec.get("kind", "envelope")
        ts = _number(rec["ts"])
        node = _text(rec["node"])
        if kind == "lease":
            return LeaseTrace(ts, node, _text(rec["subject"]), _text(rec["event"]))
        if kind != "envelope":
            return None
        envelope = rec.get("envelope")
        return EnvelopeTrace(
            ts=ts, node=node, dir=_text(rec["dir"]), peer=_text(rec["peer"]), type=_text(rec["type"]),
            seq=int(_number(rec.get("seq", 0))), size=int(_number(rec.get("size", 0))),
            outcome=_text(rec["outcome"]), reason=_opt(rec, "reason"), request_id=_opt(rec, "requestId"),
            service=_opt(rec, "service"), status=_opt(rec, "status"), error_code=_opt(rec, "errorCode"),
            latency_ms=_number(rec["latencyMs"]) if rec.get("latencyMs") is not None else None,
            envelope=base64.b64decode(envelope, validate=True) if isinstance(envelope, str) else None,
        )
    except (KeyError, TypeError, ValueError, binascii.Error):
        return None


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("not a number")
    return float(v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("not a string")
    return v


def _opt(rec: dict, key: str) -> str | None:
    v = rec.get(key)
    return v if isinstance(v, str) else None
