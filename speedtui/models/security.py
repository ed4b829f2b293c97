"""Threat scores per receiver and sender (the `quota` extension, issue 18), for the Security view.
Pure: the scores, states and last reasons a receiver publishes in its registry entry
(`counters.threat`, see speed_runtime/ext/quota.py `Quarantine.published`), completed by the
journals' threat records (a receiver whose entry is gone or not yet read) and rejected envelope
records (the sparkline of rejections over time, also for receivers that keep no scores)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from .registry import NodeRow
from .traces import REJECTION_BUCKET, REJECTION_BUCKETS, TraceRecord, TraceStore

QUARANTINED = "quarantined"
SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class ThreatRow:
    receiver: str
    sender: str
    score: float | None  # None: the receiver keeps no threat score (no quota extension)
    state: str  # ok | quarantined | "" (no score kept)
    reasons: tuple[str, ...]  # last reasons, newest last
    series: tuple[int, ...]  # rejections per REJECTION_BUCKET seconds, oldest first
    rejections: int  # scored rejections in all (as published), else those in the series
    source: str  # "registry" | "journal"

    @property
    def quarantined(self) -> bool:
        return self.state == QUARANTINED


def sparkline(series: Iterable[int]) -> str:
    values = list(series)
    top = max(values, default=0)
    if top <= 0:
        return "·" * len(values)
    return "".join("·" if v == 0 else SPARK[min(len(SPARK) - 1, (v * len(SPARK) - 1) // top)] for v in values)


def _published(row: NodeRow) -> dict[str, dict[str, Any]]:
    threat = row.counters.get("threat") if isinstance(row.counters, dict) else None
    if not isinstance(threat, dict):
        return {}
    return {str(k): v for k, v in threat.items() if isinstance(v, dict)}


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def threat_rows(rows: Iterable[NodeRow], store: TraceStore, now: float) -> list[ThreatRow]:
    """One row per (receiver, sender) that has a published score, a threat record or a rejection
    in the last REJECTION_BUCKETS × REJECTION_BUCKET seconds; quarantined first, then by score."""
    latest: dict[tuple[str, str], TraceRecord] = {}
    quarantined: set[tuple[str, str]] = set()  # a quarantine lasts until released or lifted
    reasons: dict[tuple[str, str], list[str]] = {}
    for r in store.threats:  # oldest first
        key = (r.node, r.peer)
        latest[key] = r
        if r.event == QUARANTINED:
            quarantined.add(key)
        elif r.event in ("released", "lifted"):
            quarantined.discard(key)
        if r.reason:
            reasons.setdefault(key, []).append(r.reason)
    out: dict[tuple[str, str], ThreatRow] = {}
    for row in rows:
        # when the receiver published this (its last heartbeat): a threat record journaled since is
        # newer, and its state stands until the next heartbeat (a row turned QUARANTINED from the
        # journal went back to "ok" with the next paint, and `l` said there was nothing to lift)
        published_at = now - row.hb_age if row.hb_age is not None else None
        for sender, st in _published(row).items():
            key = (row.name, sender)
            series = tuple(store.rejection_series(row.name, sender, now))
            last = st.get("last")
            total = _number(st.get("rejections"))
            out[key] = ThreatRow(row.name, sender, _number(st.get("score")),
                                 QUARANTINED if st.get("state") == QUARANTINED else "ok",
                                 tuple(str(x) for x in last) if isinstance(last, list) else (),
                                 series, int(total) if total is not None else sum(series), "registry")
            rec = latest.get(key)
            if rec is not None and published_at is not None and rec.ts > published_at:
                out[key] = replace(out[key], score=rec.score if rec.score is not None else out[key].score,
                                   state=QUARANTINED if key in quarantined else "ok", source="journal")
    horizon = int(now // REJECTION_BUCKET) - REJECTION_BUCKETS
    pairs = set(latest) | {k for k, b in store.rejections.items() if b and max(b) > horizon}
    for key in pairs - set(out):
        series = tuple(store.rejection_series(*key, now))
        rec = latest.get(key)
        if rec is None:  # rejections only (a receiver without quota): the reasons they were rejected for
            out[key] = ThreatRow(*key, None, "", tuple(store.rejection_reasons.get(key, ())), series, sum(series),
                                 "journal")
            continue
        state = QUARANTINED if key in quarantined else "ok"
        out[key] = ThreatRow(*key, rec.score, state, tuple(reasons.get(key, [])[-3:]), series, sum(series),
                             "journal")
    return sorted(out.values(), key=lambda t: (not t.quarantined, -(t.score or 0.0), t.receiver, t.sender))
