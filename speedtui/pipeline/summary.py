"""The summary document (summary.json) and the per-node availability, shared by the Spark job
and the pure-Python reference so that both produce the same answers from the same roll-ups."""
from __future__ import annotations

import json
import math
import os
import time

from .common import (SUMMARY_SCHEMA, SUMMARY_TOP, TABLES, PipelineError, empty_message, hadoop_path, is_local,
                     iso, local_path, visible)
from .records import COUNTED_KINDS, GRACEFUL_EVENTS, SELF_EVENTS, TERMINAL_EVENTS
from .sections import durable_section, messages_section, threats_section


def _num(v):
    if v is None:
        return None
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        return round(v, 6)
    return v


def build_summary(*, inputs, out_dir, since, until, totals, first_ts, last_ts, bucket,
                  traffic_buckets, rejection_buckets, bursts, by_reason, spc, top, availability,
                  burst_threshold, accuracy, engine, messages=None, threats=None, durable=None,
                  coverage=None) -> dict:
    """The summary document. messages, threats and durable are the sections of sections.py
    (empty ones when not given); coverage says which nodes' journals the figures come from."""
    win_start = since if since is not None else first_ts
    win_end = until if until is not None else last_ts
    spc_calls = sum(int(r["calls"]) for r in spc)
    spc_ok = sum(int(r["successes"]) for r in spc)
    totals = dict(totals)
    totals["spc_calls"] = spc_calls
    totals["spc_successes"] = spc_ok
    totals["spc_success_rate"] = _num(spc_ok / spc_calls) if spc_calls else None
    rb: dict[int, dict] = {}
    for t, reason, n in rejection_buckets:
        b = rb.setdefault(int(t), {"t": int(t), "rejections": 0, "by_reason": {}})
        b["rejections"] += int(n)
        b["by_reason"][reason] = b["by_reason"].get(reason, 0) + int(n)
    empty = totals["records"] == 0
    if empty:
        if totals["valid"] > 0:
            message = "no trace records in the chosen time range."
        else:
            message = empty_message(inputs)
        if totals["malformed"]:
            message = message[:-1] + f" ({totals['malformed']} malformed lines skipped)."
    else:
        message = None
    return {
        "schema": SUMMARY_SCHEMA,
        "engine": engine,
        "generated_at": iso(time.time()),
        "inputs": list(inputs),
        "out_dir": out_dir,
        "tables": {name: (f"{out_dir}/{name}" if out_dir else None) for name in TABLES},
        "empty": empty,
        "message": message,
        "malformed_lines": totals["malformed"],
        "time_range": {"since": since, "until": until, "first_ts": _num(first_ts), "last_ts": _num(last_ts),
                       "start": _num(win_start), "end": _num(win_end),
                       "start_iso": iso(win_start), "end_iso": iso(win_end)},
        "totals": totals,
        "top_talkers": [{"source": r["source"], "target": r["target"], "envelopes": int(r["envelopes"]),
                         "bytes": int(r["bytes"] or 0)} for r in top[:SUMMARY_TOP]],
        "spc": [{"target": r["target"], "service": r["service"], "calls": int(r["calls"]),
                 "successes": int(r["successes"]), "errors": int(r["errors"]),
                 "no_response": int(r["no_response"]), "success_rate": _num(r["success_rate"]),
                 "error_codes": {k[4:]: int(r[k]) for k in sorted(r) if k.startswith("err_") and r[k]},
                 "p50_ms": _num(r["latency_p50_ms"]), "p95_ms": _num(r["latency_p95_ms"]),
                 "p99_ms": _num(r["latency_p99_ms"])} for r in spc],
        "rejections": {
            "total": totals["rejected"],
            "by_reason": dict(sorted(by_reason.items())),
            "bucket_seconds": bucket,
            "over_time": [rb[k] for k in sorted(rb)],
            "bursts": [{"node": r["node"], "reason": r["reason"], "minute": int(r["minute"]),
                        "rejections": int(r["rejections"]), "label": r["label"]} for r in bursts],
        },
        "traffic_over_time": {"bucket_seconds": bucket,
                              "buckets": [{"t": int(t), "envelopes": int(e), "bytes": int(b or 0)}
                                          for t, e, b in traffic_buckets]},
        "availability": [{"node": r["node"], "online_seconds": _num(r["online_seconds"]),
                          "availability": _num(r["availability"]), "sessions": int(r["sessions"]),
                          "restarts": int(r["restarts"]), "crashes": int(r["crashes"]),
                          "graceful_departures": int(r["graceful_departures"]),
                          "lost_leases": int(r["lost_leases"]), "late_renewals": int(r["late_renewals"]),
                          "online_at_end": bool(r["online_at_end"])} for r in availability],
        "other_records": {kind: totals.get(f"{kind}_records", 0) for kind in COUNTED_KINDS},
        "messages": messages if messages is not None else messages_section([], [], [], 0, bucket),
        "threats": threats if threats is not None else threats_section([], [], [], bucket),
        "durable": durable if durable is not None else durable_section([]),
        "coverage": coverage if coverage is not None else {"journals": totals["nodes"], "nodes": totals["nodes"],
                                                            "without_journal": [], "spc_calls_from_callees": 0},
        "burst_threshold": burst_threshold,
        "percentile_accuracy": accuracy,
    }


#: summary.json keeps at most this many entries of each list of journals in "ingest" (the store's
#: run) and "staging" (a whole run's): a directory of 100,000 journals must not make a summary of
#: megabytes that the console loads; "<name>_more" counts the rest
INGEST_LIST_CAP = 100
INGEST_LISTS = ("rotated", "replaced", "waiting", "skipped", "problems")


def cap_ingest(summary: dict) -> dict:
    """summary with each list of journals in summary["ingest"] and summary["staging"] cut to
    INGEST_LIST_CAP entries and the number left out in "<name>_more" (changed in place, and
    returned)."""
    for part in ("ingest", "staging"):
        ing = summary.get(part)
        if isinstance(ing, dict):
            for k in INGEST_LISTS:
                v = ing.get(k)
                if isinstance(v, (list, tuple)) and len(v) > INGEST_LIST_CAP:
                    ing[k] = list(v[:INGEST_LIST_CAP])
                    ing[f"{k}_more"] = int(ing.get(f"{k}_more") or 0) + len(v) - INGEST_LIST_CAP
    return summary


def skipped_line(s: dict) -> str | None:
    """One line naming the journals a run skipped (the store's or a whole run's), or None."""
    part = s.get("ingest") or s.get("staging")
    if not isinstance(part, dict):
        return None
    n = len(part.get("skipped") or ()) + int(part.get("skipped_more") or 0)
    if not n:
        return None
    shown = [visible(str(p)) for p in (part.get("problems") or part.get("skipped"))[:2]]
    return f"{n} journal{'s' if n != 1 else ''} skipped: {'; '.join(shown)}{'; …' if n > len(shown) else ''}"


def unchecked_line(s: dict) -> str | None:
    """One line when the store's read positions were kept before they were checked, or None."""
    if not (s.get("ingest") or {}).get("unchecked_positions"):
        return None
    return ("this store was begun before 7 December 2026, when a copy of a journal could take over "
            "the journal's read position and keep its records out of the store: if a copy was ever "
            "beside a journal, run `speedtui analyze --rebuild` once (what was rotated away is then gone)")


def write_summary(spark, out_uri: str, summary: dict) -> None:
    cap_ingest(summary)
    data = json.dumps(summary, indent=1, sort_keys=False, allow_nan=False).encode()
    if is_local(out_uri):
        path = os.path.join(local_path(out_uri), "summary.json")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    fs, hpath = hadoop_path(spark, f"{out_uri}/summary.json")
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def load_summary(out_dir: str) -> dict:
    """Read out_dir/summary.json of an earlier run (local paths only; no Spark needed)."""
    path = os.path.join(local_path(out_dir), "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise PipelineError(f"no report at {os.path.abspath(path)}: run `speedtui analyze` first.") from None
    except (OSError, ValueError) as exc:
        raise PipelineError(f"cannot read {os.path.abspath(path)}: {exc}.") from None
    if not isinstance(doc, dict) or doc.get("schema") != SUMMARY_SCHEMA:
        raise PipelineError(f"{os.path.abspath(path)} is not a {SUMMARY_SCHEMA} report.")
    return doc


def format_summary(s: dict) -> str:
    """A few lines for a terminal. Every string in them that a member or a path could have written
    (names, reasons, the message, paths) shows its control characters escaped (common.visible):
    nothing reaches the terminal as a control sequence, and no line can be forged."""
    v = visible
    t = s["totals"]
    lines = []
    if s.get("message"):
        lines.append(v(s["message"]))
    tr = s["time_range"]
    lines.append(f"records {t['records']:,} (malformed lines skipped: {s['malformed_lines']:,}, "
                 f"outside time range: {t['filtered_out']:,}), nodes {t['nodes']}, "
                 f"{v(tr['start_iso'] or '-')} .. {v(tr['end_iso'] or '-')}")
    lines.append(f"envelopes sent {t['envelopes_sent']:,} ({t['bytes_sent']:,} bytes), accepted "
                 f"{t['accepted']:,}, rejected {t['rejected']:,}; SPC calls {t['spc_calls']:,}"
                 + (f" ({t['spc_success_rate'] * 100:.1f}% success)" if t["spc_success_rate"] is not None else ""))
    if s["top_talkers"]:
        tt = s["top_talkers"][0]
        lines.append(f"top talker {v(tt['source'])} -> {v(tt['target'])}: {tt['envelopes']:,} envelopes")
    if s["rejections"]["bursts"]:
        b = s["rejections"]["bursts"][0]
        lines.append(f"{len(s['rejections']['bursts'])} rejection burst(s); largest {b['rejections']} "
                     f"x {v(b['reason'])} at {v(b['node'])} ({v(b['label'])})")
    mt = (s.get("messages") or {}).get("totals") or {}
    if mt.get("sent") or mt.get("delivered"):
        lines.append(f"logical messages sent {mt['sent']:,} ({mt['chunks']:,} chunks), retransmissions "
                     f"{mt['retransmissions']:,}, send errors {mt['send_errors']:,}, delivered {mt['delivered']:,}")
    th = (s.get("threats") or {}).get("totals") or {}
    if th.get("raised") or th.get("quarantined") or th.get("quarantined_rejections"):
        lines.append(f"quarantines {th['quarantined']:,} ({th['quarantined_now']} still quarantined), "
                     f"envelopes removed unread {th['quarantined_rejections']:,}, highest threat score "
                     f"{th['max_score'] if th['max_score'] is not None else '-'}")
    crashes = sum(a["crashes"] for a in s["availability"])
    if s["availability"]:
        lines.append(f"availability: {len(s['availability'])} nodes, {crashes} crash(es)")
    ing = s.get("ingest")
    if ing:
        counts = {k: len(ing.get(k) or ()) + int(ing.get(f"{k}_more") or 0) for k in ("rotated", "replaced")}
        changes = "".join(f", {n} {k}" for k, n in counts.items() if n)
        lines.append(f"store {v(ing['store'])}: {ing['new_bytes']:,} new bytes, {ing['batches']} batch(es){changes}")
    lines += [line for line in (skipped_line(s), unchecked_line(s)) if line]
    lines.append(f"report: {v(s['out_dir'])}/summary.json")
    return "\n".join(lines)


def availability(lease_events: dict[str, list], win_start: float | None,
                 win_end: float | None) -> list[dict]:
    """Per-node availability from lease events {subject: [(ts, prio, writer, event)]}; the same
    session rules as the Spark job (docs/ANALYTICS.md, "availability")."""
    out = []
    window = (win_end - win_start) if (win_start is not None and win_end is not None) else None
    for subject in sorted(lease_events):
        evs = sorted(lease_events[subject])
        has_self = any(w == subject and e in SELF_EVENTS for _, _, w, e in evs)
        sessions: dict[int, dict] = {}
        sid = 0
        prev = None
        for ts, prio, writer, ev in evs:
            is_self = writer == subject
            if has_self:
                start = is_self and ev in ("registered", "reclaimed")
            else:
                start = ev == "observed_join" and (prev is None or prev in TERMINAL_EVENTS)
            prev = ev
            if start:
                sid += 1
            s = sessions.get(sid)
            if s is None:
                s = sessions[sid] = {"start": None, "term": None, "self_evt": False, "lost": 0,
                                     "late": 0, "first": ts, "last": ts}
            if start and s["start"] is None:
                s["start"] = ts
            if ev in TERMINAL_EVENTS:
                key = (ts, prio, writer, ev)
                if s["term"] is None or key < s["term"]:
                    s["term"] = key
            if is_self and ev in ("renewed_late", "lost"):
                s["self_evt"] = True
            if is_self and ev == "lost":
                s["lost"] += 1
            if is_self and ev == "renewed_late":
                s["late"] += 1
            s["first"] = min(s["first"], ts)
            s["last"] = max(s["last"], ts)
        ids = sorted(sessions)
        n = online = crashes = graceful = lost = late = 0
        last_kind = None
        for i, k in enumerate(ids):
            s = sessions[k]
            lost += s["lost"]
            late += s["late"]
            nxt = sessions[ids[i + 1]]["start"] if i + 1 < len(ids) else None
            exists = k > 0 or s["term"] is not None or s["self_evt"]
            if not exists:
                continue
            start = s["start"] if s["start"] is not None else win_start
            if s["term"] is not None:
                end, kind = s["term"][0], ("graceful" if s["term"][3] in GRACEFUL_EVENTS else "crash")
            elif nxt is not None:
                end, kind = nxt, "crash"
            else:
                end, kind = win_end, "open"
            n += 1
            online += max(0.0, end - start)
            crashes += kind == "crash"
            graceful += kind == "graceful"
            last_kind = kind
        out.append({"node": subject, "online_seconds": float(online), "window_seconds": window,
                    "availability": (min(1.0, online / window) if window else None),
                    "sessions": n, "restarts": max(n - 1, 0), "crashes": crashes,
                    "graceful_departures": graceful, "lost_leases": lost, "late_renewals": late,
                    "online_at_end": last_kind == "open",
                    "first_ts": evs[0][0], "last_ts": max(e[0] for e in evs)})
    return out
