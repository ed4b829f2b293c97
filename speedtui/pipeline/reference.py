"""Single-process pure-Python version of the trace analytics (exact percentiles).

It gives the same tables and summary as the Spark job (job.py) for local files; the benchmark
times both on the same journals and the tests cross-check them. Line validity follows what
Spark's from_json does with the job's schema and options (see docs/ANALYTICS.md), so that both
count the same malformed lines.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import time
from collections import defaultdict
from typing import Any, Iterable

from .common import (BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_TOP, PipelineError, choose_bucket,
                     parse_time)
from .records import (COUNTED_KINDS, ERROR_CODES, FIELDS, KIND_REQUIRED, MAX_TS, MESSAGE_COLUMNS,
                      RECEIVER_MESSAGE_EVENTS, TERMINAL_EVENTS, THREAT_EVENTS, reason_label)
from .sections import durable_section, messages_section, threats_section
from .summary import availability, build_summary

_WS = " \t\r\n"
#: the fields a record of an extension kind keeps (message, threat, durable; health, control)
_EXT_FIELDS = ("dir", "peer", "type", "outcome", "reason", "event", "size", "chunks", "reliable", "score",
               "stream", "id", "status")


def _reject_constant(name: str):
    raise ValueError(f"non-numeric number {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_raw_decode = _DECODER.raw_decode
_LMIN, _LMAX = -(1 << 63), 1 << 63


def _as_str(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return json.dumps(v, separators=(",", ":"))


def _as_long(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63):
        return v
    return None


def _as_double(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _as_bool(v: Any) -> bool | None:
    return v if v is True or v is False else None


_CONVERT = {name: {"string": _as_str, "bigint": _as_long, "double": _as_double, "boolean": _as_bool}[typ]
            for name, typ in FIELDS}


def parse_values(line: str) -> tuple:
    """What Spark's JSON reader makes of one journal line: usually one record (a dict) or None
    (malformed); nothing for a blank line; for a JSON array of objects one entry per object (an
    array holding anything else is one malformed entry)."""
    text = line.lstrip(_WS)
    if not text:
        return ()
    try:
        obj = _raw_decode(text)[0]
    except (ValueError, RecursionError):
        return (None,)
    if obj.__class__ is dict:
        return (record_of(obj),)
    if obj.__class__ is list and all(v.__class__ is dict for v in obj):
        return tuple(record_of(v) for v in obj)
    return (None,)


def parse_line(line: str) -> dict | None:
    """The record of a line holding one JSON object, None if it is malformed."""
    values = parse_values(line)
    return values[0] if len(values) == 1 else None


def record_of(obj: dict) -> dict | None:
    """The record of one JSON object (all known fields, None when absent), or None if it is not
    a valid record. kind defaults to "envelope". (Written for speed: the common types are checked
    inline, anything unusual goes through the _as_* converters.)"""
    g = obj.get
    ts = g("ts")
    if ts.__class__ is not float:
        ts = _as_double(ts)
        if ts is None:
            return None
    node = g("node")
    if node.__class__ is not str:
        node = _as_str(node)
        if node is None:
            return None
    if not (0 <= ts < MAX_TS):
        return None
    kind = g("kind")
    if kind is None or kind == "envelope":
        d, peer, typ, outcome = g("dir"), g("peer"), g("type"), g("outcome")
        if d.__class__ is not str or peer.__class__ is not str or typ.__class__ is not str \
                or outcome.__class__ is not str:
            d, peer, typ, outcome = _as_str(d), _as_str(peer), _as_str(typ), _as_str(outcome)
            if d is None or peer is None or typ is None or outcome is None:
                return None
        seq, size = g("seq"), g("size")
        if seq.__class__ is not int or not (_LMIN <= seq < _LMAX):
            seq = _as_long(seq)
        if size.__class__ is not int or not (_LMIN <= size < _LMAX):
            size = _as_long(size)
        rec = {"kind": "envelope", "ts": ts, "node": node, "dir": d, "peer": peer, "type": typ,
               "outcome": outcome, "seq": seq, "size": size}
        for k in ("reason", "requestId", "service", "status", "errorCode"):
            v = g(k)
            rec[k] = v if v is None or v.__class__ is str else _as_str(v)
        lat = g("latencyMs")
        rec["latencyMs"] = lat if lat is None or lat.__class__ is float else _as_double(lat)
        chunks = g("chunks")
        rec["chunks"] = None if chunks is None else _as_long(chunks)
        return rec
    if kind.__class__ is not str:
        kind = _as_str(kind)
    if kind == "lease":
        subject, event = g("subject"), g("event")
        if subject.__class__ is not str:
            subject = _as_str(subject)
        if event.__class__ is not str:
            event = _as_str(event)
        if subject is None or event is None:
            return None
        return {"kind": "lease", "ts": ts, "node": node, "subject": subject, "event": event}
    required = KIND_REQUIRED.get(kind)
    if required is None:
        return None
    rec = {"kind": kind, "ts": ts, "node": node}
    for name in _EXT_FIELDS:
        rec[name] = _CONVERT[name](g(name))
    for name in required:
        if rec[name] is None:
            return None
    return rec


def iter_files(inputs: Iterable[str]) -> list[str]:
    files = []
    for p in inputs:
        p = p[len("file://"):] if p.startswith("file://") else p
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                full = os.path.join(p, name)
                if not name.startswith((".", "_")) and os.path.isfile(full):
                    files.append(full)
        elif os.path.exists(p):
            files.append(p)
        else:
            raise PipelineError(f"trace path {os.path.abspath(p)} does not exist.")
    return files


def _open(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, "r", encoding="utf-8", errors="replace", buffering=1 << 20)


def _pct(sorted_vals: list[float], p: float) -> float | None:
    n = len(sorted_vals)
    if not n:
        return None
    return sorted_vals[max(0, math.ceil(p * n) - 1)]


def _call_slot(calls: dict, node: str, peer: str, rec: dict, noid: int, side: int) -> tuple[int, list]:
    """The call record of (node, peer, requestId), made on first sight; a record without a request
    id gets a slot of its own. Notes the service name seen on `side` (0 request, 1 response)."""
    rid = rec["requestId"]
    if rid is None:
        noid += 1
        rid = ("\0row", noid)
    c = calls.get((node, peer, rid))
    if c is None:
        c = calls[(node, peer, rid)] = [None, None, 0, 0, None]
    svc = rec["service"]
    if svc is not None and (c[side] is None or svc > c[side]):
        c[side] = svc
    return noid, c


def analyze(inputs: list[str], since: float | None = None, until: float | None = None, *,
            burst_threshold: int = BURST_THRESHOLD) -> dict:
    """Returns {"summary": dict, "tables": {name: [row dicts]}} like the Spark job's output."""
    since, until = parse_time(since), parse_time(until)
    files = iter_files(inputs)
    lines = malformed = valid = 0
    recs_in = env_recs = lease_recs = sent_n = sent_bytes = accepted = rejected = 0
    first_ts = last_ts = None
    nodes: set[str] = set()
    traffic: dict[tuple, list] = defaultdict(lambda: [0, 0])
    top: dict[tuple, list] = {}
    calls: dict[tuple, list] = {}
    security: dict[tuple, list] = {}
    lease_events: dict[str, list] = defaultdict(list)
    ext = _Extensions()
    chunk_envelopes = 0
    noid = 0
    parse = parse_values
    for path in files:
        with _open(path) as fh:
            for line in fh:
                for rec in parse(line):  # one record per line, but none or several for rare lines
                    lines += 1
                    if rec is None:
                        malformed += 1
                        continue
                    valid += 1
                    ts = rec["ts"]
                    if (since is not None and ts < since) or (until is not None and ts >= until):
                        continue
                    recs_in += 1
                    if first_ts is None or ts < first_ts:
                        first_ts = ts
                    if last_ts is None or ts > last_ts:
                        last_ts = ts
                    node = rec["node"]
                    nodes.add(node)
                    if rec["kind"] == "lease":
                        lease_recs += 1
                        ev = rec["event"]
                        prio = 0 if ev in TERMINAL_EVENTS else (
                            2 if ev in ("registered", "reclaimed", "observed_join") else 1)
                        lease_events[rec["subject"]].append((ts, prio, node, ev))
                        continue
                    if rec["kind"] != "envelope":
                        ext.add(rec)
                        continue
                    env_recs += 1
                    d, outcome, typ, peer = rec["dir"], rec["outcome"], rec["type"], rec["peer"]
                    minute = int(math.floor(ts / 60)) * 60
                    if d == "out" and outcome == "sent":
                        size = rec["size"] or 0
                        sent_n += 1
                        sent_bytes += size
                        if rec["chunks"] is not None:
                            chunk_envelopes += 1
                        t = traffic[(node, peer, typ, minute)]
                        t[0] += 1
                        t[1] += size
                        tt = top.get((node, peer))
                        if tt is None:
                            tt = top[(node, peer)] = [0, 0, 0, 0, ts, ts]
                        tt[0] += 1
                        tt[1] += size
                        if typ == "MESSAGE":
                            tt[2] += 1
                        elif typ == "SPC_REQUEST":
                            tt[3] += 1
                        if ts < tt[4]:
                            tt[4] = ts
                        if ts > tt[5]:
                            tt[5] = ts
                        if typ == "SPC_REQUEST":
                            noid, c = _call_slot(calls, node, peer, rec, noid, 0)
                            c[2] = 1
                    elif d == "in" and outcome == "accepted":
                        accepted += 1
                        if typ == "SPC_RESPONSE":
                            noid, c = _call_slot(calls, node, peer, rec, noid, 1)
                            c[3] = 1
                            if c[4] is None or ts < c[4][0]:
                                c[4] = (ts, rec["status"], rec["errorCode"], rec["latencyMs"])
                    elif d == "in" and outcome == "rejected":
                        rejected += 1
                        reason = rec["reason"] if rec["reason"] is not None else "unknown"
                        s = security.get((node, reason, minute))
                        if s is None:
                            s = security[(node, reason, minute)] = [0, set(), ts, ts]
                        s[0] += 1
                        s[1].add(peer)
                        if ts < s[2]:
                            s[2] = ts
                        if ts > s[3]:
                            s[3] = ts
                        if reason == "quarantined":
                            ext.quarantined(node, peer, minute, ts)

    win_start = since if since is not None else first_ts
    win_end = until if until is not None else last_ts
    tables: dict[str, list] = {}
    tables["traffic"] = [{"source": k[0], "target": k[1], "type": k[2], "minute": k[3],
                          "envelopes": v[0], "bytes": v[1]}
                         for k, v in sorted(traffic.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1], kv[0][2]))]
    tops = sorted(top.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0][0], kv[0][1]))
    tables["top_talkers"] = [{"source": k[0], "target": k[1], "envelopes": v[0], "bytes": v[1],
                              "messages": v[2], "spc_requests": v[3], "first_ts": v[4], "last_ts": v[5],
                              "rank": i + 1} for i, (k, v) in enumerate(tops)]
    # spc
    groups: dict[tuple, dict] = {}
    for (caller, target, _rid), (rs, ps, _has_req, answered, resp) in calls.items():
        service = rs if rs is not None else (ps if ps is not None else "(unknown)")
        g = groups.get((target, service))
        if g is None:
            g = groups[(target, service)] = {"calls": 0, "answered": 0, "successes": 0, "errors": 0,
                                             "no_response": 0, "codes": defaultdict(int), "lat": []}
        g["calls"] += 1
        if answered:
            g["answered"] += 1
            _, status, code, lat = resp
            if status == "SUCCESS":
                g["successes"] += 1
            else:
                g["errors"] += 1
                code = code if code is not None else "UNKNOWN"
                g["codes"][code if code in ERROR_CODES else "OTHER"] += 1
            if lat is not None:
                g["lat"].append(lat)
        else:
            g["no_response"] += 1
    spc = []
    for (target, service), g in sorted(groups.items()):
        lat = sorted(g["lat"])
        row = {"target": target, "service": service, "calls": g["calls"], "answered": g["answered"],
               "successes": g["successes"], "errors": g["errors"], "no_response": g["no_response"]}
        for ec in ERROR_CODES + ("OTHER",):
            row[f"err_{ec}"] = g["codes"].get(ec, 0)
        row.update({"latency_count": len(lat),
                    "latency_mean_ms": (sum(lat) / len(lat)) if lat else None,
                    "latency_max_ms": lat[-1] if lat else None,
                    "success_rate": g["successes"] / g["calls"],
                    "latency_p50_ms": _pct(lat, 0.5), "latency_p95_ms": _pct(lat, 0.95),
                    "latency_p99_ms": _pct(lat, 0.99)})
        spc.append(row)
    tables["spc"] = spc
    tables["security"] = [{"node": k[0], "reason": k[1], "minute": k[2], "rejections": v[0],
                           "peers": len(v[1]), "peers_sample": sorted(v[1])[:5],
                           "first_ts": v[2], "last_ts": v[3], "burst": v[0] >= burst_threshold,
                           "label": reason_label(None if k[1] == "unknown" else k[1])}
                          for k, v in sorted(security.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1]))]
    tables["availability"] = availability(lease_events, win_start, win_end)

    tables.update(ext.tables())
    totals = {"lines": lines, "malformed": malformed, "valid": valid, "records": recs_in,
              "envelope_records": env_recs, "lease_records": lease_recs,
              **{f"{k}_records": ext.kinds.get(k, 0) for k in sorted(("message", "threat", "durable", *COUNTED_KINDS))},
              "envelopes_sent": sent_n, "bytes_sent": sent_bytes, "chunk_envelopes_sent": chunk_envelopes,
              "accepted": accepted, "rejected": rejected, "nodes": len(nodes),
              "filtered_out": valid - recs_in}
    bucket = choose_bucket(win_start, win_end)
    tb: dict[int, list] = defaultdict(lambda: [0, 0])
    for r in tables["traffic"]:
        b = tb[(r["minute"] // bucket) * bucket]
        b[0] += r["envelopes"]
        b[1] += r["bytes"]
    rb: dict[tuple, int] = defaultdict(int)
    by_reason: dict[str, int] = defaultdict(int)
    for r in tables["security"]:
        rb[((r["minute"] // bucket) * bucket, r["reason"])] += r["rejections"]
        by_reason[r["reason"]] += r["rejections"]
    bursts = sorted((r for r in tables["security"] if r["burst"]),
                    key=lambda r: (-r["rejections"], r["minute"], r["node"], r["reason"]))[:20]
    summary = build_summary(
        inputs=[os.path.abspath(p) for p in inputs], out_dir=None, since=since, until=until,
        totals=totals, first_ts=first_ts, last_ts=last_ts, bucket=bucket,
        traffic_buckets=[(t, v[0], v[1]) for t, v in sorted(tb.items())],
        rejection_buckets=[(k[0], k[1], v) for k, v in sorted(rb.items())],
        bursts=bursts, by_reason=dict(by_reason), spc=spc, top=tables["top_talkers"][:SUMMARY_TOP],
        availability=tables["availability"], burst_threshold=burst_threshold,
        accuracy=PERCENTILE_ACCURACY, engine="reference", **ext.sections(chunk_envelopes, bucket))
    return {"summary": summary, "tables": tables}


class _Extensions:
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


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - convenience
    import argparse
    ap = argparse.ArgumentParser(description="pure-Python trace analytics (reference)")
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--since")
    ap.add_argument("--until")
    a = ap.parse_args(argv)
    t = time.time()
    res = analyze(a.traces, a.since, a.until)
    print(json.dumps(res["summary"], indent=1))
    print(f"{time.time() - t:.2f}s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
