"""The summary sections of the extension records (messages, threats, durable), built from small
per-link / per-minute counts that the Spark job collects and the reference computes the same way,
so that both give the same sections (docs/ANALYTICS.md, "Extension records")."""
from __future__ import annotations

from collections import defaultdict

from .common import SUMMARY_TOP
from .records import MESSAGE_COLUMNS, SENDER_DURABLE_EVENTS, THREAT_EVENTS

_MSG_COLUMN = {ev: name for name, ev in MESSAGE_COLUMNS}


def _r(v):
    return None if v is None else round(float(v), 6)


def messages_section(links: list[dict], minutes: list[dict], reasons: list[dict], chunk_envelopes: int,
                     bucket: int) -> dict:
    """links: {source, target, event, n, rel, chunks, bytes}; minutes: {minute, event, n};
    reasons: {event, reason, n} of send-error and voided records."""
    blank = lambda: {name: 0 for name, _ in MESSAGE_COLUMNS} | {"reliable": 0, "chunks": 0, "bytes": 0}  # noqa: E731
    totals = blank()
    per_link: dict[tuple, dict] = defaultdict(blank)
    for r in links:
        col = _MSG_COLUMN.get(r["event"])
        if col is None:
            continue
        for row in (totals, per_link[(r["source"], r["target"])]):
            row[col] += int(r["n"])
            if col == "sent":
                row["reliable"] += int(r.get("rel") or 0)
                row["chunks"] += int(r.get("chunks") or 0)
                row["bytes"] += int(r.get("bytes") or 0)
    totals["chunk_envelopes"] = int(chunk_envelopes)
    over: dict[int, dict] = {}
    for r in minutes:
        col = _MSG_COLUMN.get(r["event"])
        if col in ("sent", "retransmissions", "send_errors", "delivered"):
            t = (int(r["minute"]) // bucket) * bucket
            b = over.setdefault(t, {"t": t, "sent": 0, "retransmissions": 0, "send_errors": 0, "delivered": 0})
            b[col] += int(r["n"])
    by_reason: dict[str, dict] = {"send-error": defaultdict(int), "voided": defaultdict(int)}
    for r in reasons:
        if r["event"] in by_reason:
            by_reason[r["event"]][r["reason"]] += int(r["n"])
    ranked = sorted(per_link.items(), key=lambda kv: (-kv[1]["sent"], -kv[1]["delivered"], kv[0]))
    return {"totals": totals, "links_total": len(per_link),
            "links": [{"source": k[0], "target": k[1], **v} for k, v in ranked[:SUMMARY_TOP]],
            "send_errors_by_reason": dict(sorted(by_reason["send-error"].items())),
            "voided_by_reason": dict(sorted(by_reason["voided"].items())),
            "bucket_seconds": bucket, "over_time": [over[t] for t in sorted(over)]}


def threats_section(pairs: list[dict], minutes: list[dict], quarantined: list[dict], bucket: int) -> dict:
    """pairs: {receiver, sender, event, n, score, first_ts, last_ts}; minutes: {minute, event, n,
    score}; quarantined: {receiver, sender, n, first_ts, last_ts} of envelopes rejected with
    reason quarantined. A pair is quarantined at the end when its last quarantined record is
    later than its last released or lifted one."""
    blank = lambda: {**{ev: 0 for ev in THREAT_EVENTS}, "max_score": None, "quarantined_rejections": 0,  # noqa: E731
                     "first_ts": None, "last_ts": None, "_q": None, "_r": None}
    per: dict[tuple, dict] = defaultdict(blank)

    def span(p, first, last):
        p["first_ts"] = first if p["first_ts"] is None else min(p["first_ts"], first)
        p["last_ts"] = last if p["last_ts"] is None else max(p["last_ts"], last)

    for r in pairs:
        p = per[(r["receiver"], r["sender"])]
        ev = r["event"]
        if ev in THREAT_EVENTS:
            p[ev] += int(r["n"])
        if r.get("score") is not None:
            p["max_score"] = r["score"] if p["max_score"] is None else max(p["max_score"], r["score"])
        key = "_q" if ev == "quarantined" else ("_r" if ev in ("released", "lifted") else None)
        if key:
            p[key] = r["last_ts"] if p[key] is None else max(p[key], r["last_ts"])
        span(p, r["first_ts"], r["last_ts"])
    for r in quarantined:
        p = per[(r["receiver"], r["sender"])]
        p["quarantined_rejections"] += int(r["n"])
        span(p, r["first_ts"], r["last_ts"])
    rows = []
    for (receiver, sender), p in per.items():
        now = p["_q"] is not None and (p["_r"] is None or p["_q"] > p["_r"])
        rows.append({"receiver": receiver, "sender": sender, **{ev: p[ev] for ev in THREAT_EVENTS},
                     "max_score": _r(p["max_score"]), "quarantined_rejections": p["quarantined_rejections"],
                     "quarantined_now": now, "first_ts": _r(p["first_ts"]), "last_ts": _r(p["last_ts"])})
    rows.sort(key=lambda r: (-r["quarantined"], -r["quarantined_rejections"], -(r["max_score"] or 0.0),
                             r["receiver"], r["sender"]))
    totals = {ev: sum(r[ev] for r in rows) for ev in THREAT_EVENTS}
    totals["quarantined_rejections"] = sum(r["quarantined_rejections"] for r in rows)
    totals["quarantined_now"] = sum(1 for r in rows if r["quarantined_now"])
    scores = [r["max_score"] for r in rows if r["max_score"] is not None]
    totals["max_score"] = max(scores) if scores else None
    over: dict[int, dict] = {}
    for r in minutes:
        t = (int(r["minute"]) // bucket) * bucket
        b = over.setdefault(t, {"t": t, **{ev: 0 for ev in THREAT_EVENTS}, "max_score": None})
        if r["event"] in THREAT_EVENTS:
            b[r["event"]] += int(r["n"])
        if r.get("score") is not None:
            b["max_score"] = _r(r["score"] if b["max_score"] is None else max(b["max_score"], r["score"]))
    return {"totals": totals, "pairs_total": len(rows), "pairs": rows[:SUMMARY_TOP],
            "bucket_seconds": bucket, "over_time": [over[t] for t in sorted(over)]}


DURABLE_COLUMNS = (("stored", "stored"), ("delivered", "delivered"), ("receipts", "receipt"),
                   ("send_errors", "send_error"), ("handled", "handled"), ("duplicates", "duplicate"))


def durable_section(rows: list[dict]) -> dict:
    """rows: {node, peer, event, status, n}. Per link (sender -> receiver): the sender journals
    stored, delivered, receipt and send_error, the receiver handled (status handled, failed or
    expired) and duplicate."""
    column = {ev: name for name, ev in DURABLE_COLUMNS}
    blank = lambda: {**{name: 0 for name, _ in DURABLE_COLUMNS}, "failed": 0, "expired": 0}  # noqa: E731
    by_event: dict[str, int] = defaultdict(int)
    handled_by_status: dict[str, int] = defaultdict(int)
    per: dict[tuple, dict] = defaultdict(blank)
    for r in rows:
        ev, n = r["event"], int(r["n"])
        by_event[ev] += n
        col = column.get(ev)
        if col is None:
            continue
        link = (r["node"], r["peer"]) if ev in SENDER_DURABLE_EVENTS else (r["peer"], r["node"])
        p = per[link]
        p[col] += n
        if ev == "handled":
            status = r.get("status") or "unknown"
            handled_by_status[status] += n
            if status in ("failed", "expired"):
                p[status] += n
    ranked = sorted(per.items(), key=lambda kv: (-kv[1]["stored"], -kv[1]["handled"], kv[0]))
    return {"by_event": dict(sorted(by_event.items())), "handled_by_status": dict(sorted(handled_by_status.items())),
            "links_total": len(per),
            "links": [{"sender": k[0], "receiver": k[1], **v} for k, v in ranked[:SUMMARY_TOP]]}
