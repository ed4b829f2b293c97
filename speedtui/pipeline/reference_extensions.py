"""The reference analysis's roll-up of the extension kinds (message, threat, durable records),
the same groups the Spark job's rollup.py tags 6-8 collect, and the summary sections made from
them."""
from __future__ import annotations

import math
from collections import defaultdict

from .records import MESSAGE_COLUMNS, RECEIVER_MESSAGE_EVENTS, THREAT_EVENTS
from .sections import durable_section, messages_section, threats_section


class ExtensionRollup:
    """The records of the extension kinds, rolled up as the Spark job does (rollup.py tags 6-8)."""

    def __init__(self):
        self.kinds: dict[str, int] = defaultdict(int)
        self.msg: dict[tuple, list] = {}      # (source, target, event, reason, minute) -> n, rel, chunks, bytes, tmin, tmax
        self.threat: dict[tuple, list] = {}   # (receiver, sender, event, minute) -> n, score, tmin, tmax
        self.qrej: dict[tuple, list] = {}     # (receiver, sender, minute) -> n, tmin, tmax
        self.dur: dict[tuple, list] = {}      # (node, peer, event, status) -> n, tmin, tmax

    def add(self, rec: dict) -> None:
        kind, ts = rec["kind"], rec["ts"]
        self.kinds[kind] += 1
        minute = int(math.floor(ts / 60)) * 60
        if kind == "message":
            ev = rec["event"]
            src, dst = (rec["peer"], rec["node"]) if ev in RECEIVER_MESSAGE_EVENTS else (rec["node"], rec["peer"])
            reason = rec["reason"] if ev in ("send-error", "voided") else None
            m = _span(self.msg, (src, dst, ev, reason, minute), ts, [0, 0, 0, 0])
            m[0] += 1
            m[1] += rec["reliable"] is True
            m[2] += 1 if rec["chunks"] is None else rec["chunks"]
            m[3] += rec["size"] or 0
        elif kind == "threat":
            t = _span(self.threat, (rec["node"], rec["peer"], rec["event"], minute), ts, [0, None])
            t[0] += 1
            if rec["score"] is not None and (t[1] is None or rec["score"] > t[1]):
                t[1] = rec["score"]
        elif kind == "durable":
            _span(self.dur, (rec["node"], rec["peer"], rec["event"], rec["status"]), ts, [0])[0] += 1

    def quarantined(self, receiver: str, sender: str, minute: int, ts: float) -> None:
        _span(self.qrej, (receiver, sender, minute), ts, [0])[0] += 1

    def tables(self) -> dict[str, list]:
        messages: dict[tuple, dict] = {}
        for (src, dst, ev, _reason, minute), (n, rel, chunks, size, tmin, tmax) in self.msg.items():
            row = messages.get((src, dst, minute))
            if row is None:
                row = messages[(src, dst, minute)] = {
                    "source": src, "target": dst, "minute": minute, **{c: 0 for c, _ in MESSAGE_COLUMNS},
                    "reliable": 0, "chunks": 0, "bytes": 0, "first_ts": tmin, "last_ts": tmax}
            for col, event in MESSAGE_COLUMNS:
                if ev == event:
                    row[col] += n
            if ev == "sent":
                row["reliable"] += rel
                row["chunks"] += chunks
                row["bytes"] += size
            row["first_ts"], row["last_ts"] = min(row["first_ts"], tmin), max(row["last_ts"], tmax)
        threats: dict[tuple, dict] = {}

        def threat_row(key, tmin, tmax):
            row = threats.get(key)
            if row is None:
                row = threats[key] = {"receiver": key[0], "sender": key[1], "minute": key[2],
                                      **{ev: 0 for ev in THREAT_EVENTS}, "max_score": None,
                                      "quarantined_rejections": 0, "first_ts": tmin, "last_ts": tmax}
            row["first_ts"], row["last_ts"] = min(row["first_ts"], tmin), max(row["last_ts"], tmax)
            return row
        for (receiver, sender, ev, minute), (n, score, tmin, tmax) in self.threat.items():
            row = threat_row((receiver, sender, minute), tmin, tmax)
            if ev in THREAT_EVENTS:
                row[ev] += n
            if score is not None and (row["max_score"] is None or score > row["max_score"]):
                row["max_score"] = score
        for key, (n, tmin, tmax) in self.qrej.items():
            threat_row(key, tmin, tmax)["quarantined_rejections"] += n
        durable = [{"node": k[0], "peer": k[1], "event": k[2], "status": k[3], "records": v[0],
                    "first_ts": v[1], "last_ts": v[2]} for k, v in sorted(self.dur.items(), key=lambda kv: str(kv[0]))]
        return {"messages": [messages[k] for k in sorted(messages, key=lambda k: (k[2], k[0], k[1]))],
                "threats": [threats[k] for k in sorted(threats, key=lambda k: (k[2], k[0], k[1]))],
                "durable": durable}

    def sections(self, chunk_envelopes: int, bucket: int) -> dict:
        """The summary sections, from the same per-link / per-minute counts the Spark job collects."""
        links: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0])
        minutes: dict[tuple, int] = defaultdict(int)
        reasons: dict[tuple, int] = defaultdict(int)
        for (src, dst, ev, reason, minute), (n, rel, chunks, size, _, _) in self.msg.items():
            link = links[(src, dst, ev)]
            for i, v in enumerate((n, rel, chunks, size)):
                link[i] += v
            minutes[(minute, ev)] += n
            if ev in ("send-error", "voided"):
                reasons[(ev, reason if reason is not None else "unknown")] += n
        pairs: dict[tuple, list] = {}
        tmins: dict[tuple, list] = {}
        for (receiver, sender, ev, minute), (n, score, tmin, tmax) in self.threat.items():
            p = pairs.setdefault((receiver, sender, ev), [0, None, tmin, tmax])
            p[0] += n
            p[1] = score if p[1] is None or (score is not None and score > p[1]) else p[1]
            p[2], p[3] = min(p[2], tmin), max(p[3], tmax)
            t = tmins.setdefault((minute, ev), [0, None])
            t[0] += n
            t[1] = score if t[1] is None or (score is not None and score > t[1]) else t[1]
        qrej: dict[tuple, list] = {}
        for (receiver, sender, _minute), (n, tmin, tmax) in self.qrej.items():
            q = qrej.setdefault((receiver, sender), [0, tmin, tmax])
            q[0] += n
            q[1], q[2] = min(q[1], tmin), max(q[2], tmax)
        dur: dict[tuple, int] = defaultdict(int)
        for (node, peer, ev, status), (n, _, _) in self.dur.items():
            dur[(node, peer, ev, status)] += n
        return {
            "messages": messages_section(
                [{"source": k[0], "target": k[1], "event": k[2], "n": v[0], "rel": v[1], "chunks": v[2], "bytes": v[3]}
                 for k, v in links.items()],
                [{"minute": k[0], "event": k[1], "n": v} for k, v in minutes.items()],
                [{"event": k[0], "reason": k[1], "n": v} for k, v in reasons.items()], chunk_envelopes, bucket),
            "threats": threats_section(
                [{"receiver": k[0], "sender": k[1], "event": k[2], "n": v[0], "score": v[1], "first_ts": v[2],
                  "last_ts": v[3]} for k, v in pairs.items()],
                [{"minute": k[0], "event": k[1], "n": v[0], "score": v[1]} for k, v in tmins.items()],
                [{"receiver": k[0], "sender": k[1], "n": v[0], "first_ts": v[1], "last_ts": v[2]}
                 for k, v in qrej.items()], bucket),
            "durable": durable_section([{"node": k[0], "peer": k[1], "event": k[2], "status": k[3], "n": v}
                                        for k, v in dur.items()]),
        }


def _span(groups: dict, key: tuple, ts: float, init: list) -> list:
    """The group of key (made from init + [tmin, tmax] on first sight), its time span widened to ts."""
    g = groups.get(key)
    if g is None:
        g = groups[key] = [*init, ts, ts]
    else:
        g[-2], g[-1] = min(g[-2], ts), max(g[-1], ts)
    return g


