"""Single-process pure-Python version of the trace analytics (exact percentiles).

It gives the same tables and summary as the Spark job (job.py) for local files; the benchmark
times both on the same journals and the tests cross-check them. Line validity follows what
Spark's from_json does with the job's schema and options (see docs/ANALYTICS.md), so that both
count the same malformed lines.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict

from .common import BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_TOP, choose_bucket, parse_time
from .lines import iter_files, open_journal, parse_values
from .records import CONTROL_SERVICE, COUNTED_KINDS, ERROR_CODES, TERMINAL_EVENTS, counts_in_range, reason_label
from .reference_extensions import ExtensionRollup
from .summary import availability, build_summary

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
    callee_calls: dict[tuple, list] = {}       # the callees' records: (caller, callee, requestId)
    named: set[str] = set()                    # nodes the records name: targets, accepted senders, subjects
    security: dict[tuple, list] = {}
    lease_events: dict[str, list] = defaultdict(list)
    ext = ExtensionRollup()
    chunk_envelopes = 0
    noid = 0
    parse = parse_values
    for path in files:
        with open_journal(path) as fh:
            for line in fh:
                for rec in parse(line):  # one record per line, but none or several for rare lines
                    lines += 1
                    if rec is None or not counts_in_range(rec):
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
                        named.add(rec["subject"])
                        continue
                    if rec["kind"] != "envelope":
                        if rec["kind"] == "control" and rec["requestId"] is not None:  # a call's request leg
                            noid, c = _call_slot(callee_calls, rec["peer"], node,
                                                 {**rec, "service": CONTROL_SERVICE}, noid, 0)
                            c[2] = 1
                        ext.add(rec)
                        continue
                    env_recs += 1
                    d, outcome, typ, peer = rec["dir"], rec["outcome"], rec["type"], rec["peer"]
                    minute = int(math.floor(ts / 60)) * 60
                    if (d == "out" and outcome == "sent") or (d == "in" and outcome == "accepted"):
                        named.add(peer)
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
                        elif typ == "SPC_RESPONSE":       # the callee answers its caller `peer`
                            noid, c = _call_slot(callee_calls, peer, node, rec, noid, 1)
                            c[3] = 1
                            if c[4] is None or ts < c[4][0]:
                                c[4] = (ts, rec["status"], rec["errorCode"], None)
                    elif d == "in" and outcome == "accepted":
                        accepted += 1
                        if typ == "SPC_RESPONSE":
                            noid, c = _call_slot(calls, node, peer, rec, noid, 1)
                            c[3] = 1
                            if c[4] is None or ts < c[4][0]:
                                c[4] = (ts, rec["status"], rec["errorCode"], rec["latencyMs"])
                        elif typ == "SPC_REQUEST":        # the callee accepted a call of `peer`
                            noid, c = _call_slot(callee_calls, peer, node, rec, noid, 0)
                            c[2] = 1
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
    # spc: a call from its caller's records, or from its callee's when the caller keeps no journal
    groups: dict[tuple, dict] = {}
    from_callees = [(k, v) for k, v in callee_calls.items() if k[0] not in nodes]
    for (caller, target, _rid), (rs, ps, _has_req, answered, resp) in [*calls.items(), *from_callees]:
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
        accuracy=PERCENTILE_ACCURACY, engine="reference", **ext.sections(chunk_envelopes, bucket),
        coverage={"journals": len(nodes), "nodes": len(nodes | named),
                  "without_journal": sorted(named - nodes)[:SUMMARY_TOP * 2],
                  "spc_calls_from_callees": len(from_callees)})
    return {"summary": summary, "tables": tables}


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
