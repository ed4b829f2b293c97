"""The report from the roll-ups of any number of batches, on the driver (Arrow and Python, no Spark):
the tables (common.TABLES) and the arguments of summary.build_summary.

    parts, tables = build_report(batches, since=None, until=None)
    write_tables(tables, out_uri, spark)       # Parquet, one directory per table

The roll-ups are small (at 5M records about 0.2M rows besides the call legs), so merging them here
costs milliseconds where each Spark job over them cost 0.1-0.9 s of fixed overhead. Latency
percentiles come from the batches' KLL sketches, merged with the DataSketches library Spark's own
sketch functions use (the same binary format).
"""
from __future__ import annotations

import os
import shutil
from collections import defaultdict

from .common import BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_TOP, PipelineError, choose_bucket, is_local, \
    local_path
from .records import COUNTED_KINDS, ERROR_CODES, MESSAGE_COLUMNS, RECEIVER_MESSAGE_EVENTS, TERMINAL_EVENTS, \
    THREAT_EVENTS, reason_label
from .rollup import (CALLEE, DURABLE, LEASE, LINES, MESSAGE, OTHER, REJECTED, SPC_SUMS,
                     THREAT, TRAFFIC)
from .call_legs import merged_done, open_calls
from .sections import durable_section, messages_section, threats_section
from .summary import availability

#: the report's tables: Spark DDL of their columns, in order
TABLE_DDL = {
    "traffic": "source string, target string, type string, minute bigint, envelopes bigint, bytes bigint",
    "top_talkers": "source string, target string, envelopes bigint, bytes bigint, messages bigint, "
                   "spc_requests bigint, first_ts double, last_ts double, rank int",
    "spc": "target string, service string, " + ", ".join(f"{k} bigint" for k in SPC_SUMS)
           + ", latency_mean_ms double, latency_max_ms double, success_rate double, latency_p50_ms double, "
             "latency_p95_ms double, latency_p99_ms double",
    "security": "node string, reason string, minute bigint, rejections bigint, peers bigint, "
                "peers_sample array<string>, first_ts double, last_ts double, burst boolean, label string",
    "availability": "node string, online_seconds double, window_seconds double, availability double, "
                    "sessions bigint, restarts bigint, crashes bigint, graceful_departures bigint, "
                    "lost_leases bigint, late_renewals bigint, online_at_end boolean, first_ts double, "
                    "last_ts double",
    "messages": "source string, target string, minute bigint, "
                + ", ".join(f"{name} bigint" for name, _ in MESSAGE_COLUMNS)
                + ", reliable bigint, chunks bigint, bytes bigint, first_ts double, last_ts double",
    "threats": "receiver string, sender string, minute bigint, "
               + ", ".join(f"{ev} bigint" for ev in THREAT_EVENTS)
               + ", max_score double, quarantined_rejections bigint, first_ts double, last_ts double",
    "durable": "node string, peer string, event string, status string, records bigint, first_ts double, "
               "last_ts double",
}


def _group(table, keys: list[str], aggs: list[tuple[str, str, str]]) -> list[dict]:
    """Rows of table grouped by keys with aggs (output name, column, Arrow hash function), as dicts."""
    g = table.group_by(keys, use_threads=False).aggregate([(col, fn) for _, col, fn in aggs])
    names = {f"{col}_{fn}": out for out, col, fn in aggs}
    return g.rename_columns([names.get(n, n) for n in g.column_names]).to_pylist()


def spc_rows(dones: list, opens: list, accuracy: int, writers: set[str]) -> tuple[list[dict], int]:
    """(the spc table: one row per (target, service), sorted; how many of its calls are known from
    the callee's records only). A call counts from its caller's records, or from its callee's
    when the caller keeps no journal (is not among `writers`)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    dones = [d.filter(pc.invert(pc.fill_null(pc.is_in(d["caller"], pa.array(sorted(writers), pa.string())), True)))
             for d in dones]
    calls = [c for c in open_calls(opens) if c["tag"] != CALLEE or c["a"] not in writers]
    from_callees = sum(pc.sum(d.filter(pc.is_valid(d["caller"]))["calls"]).as_py() or 0 for d in dones) \
        + sum(1 for c in calls if c["tag"] == CALLEE)
    out = []
    for g in merged_done(dones, calls, accuracy):
        n = g["latency_count"]
        q = (lambda p: g["sketch"].get_quantile(p, True)) if n else (lambda p: None)  # noqa: E731 - nearest rank
        out.append({"target": g["target"], "service": g["service"], **{k: g[k] for k in SPC_SUMS},
                    "latency_mean_ms": g["latency_sum"] / n if n else None, "latency_max_ms": g["latency_max_ms"],
                    "success_rate": g["successes"] / g["calls"] if g["calls"] else None,
                    "latency_p50_ms": q(0.5), "latency_p95_ms": q(0.95), "latency_p99_ms": q(0.99)})
    return out, from_callees


def check_sums(rows) -> None:
    """Raise PipelineError when the byte or chunk counts of the roll-ups add up to more than a 64-bit
    sum holds: every total and group sum the report makes of them is at most that, so none of the
    merges below wraps round (each record's share is at most records.MAX_COUNT, so only some 1,000
    records of the largest size get here: within one batch Spark's own sums fail first, across the
    store's batches this is the check)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    for col in ("bytes", "chunks"):
        total = pc.sum(pc.abs(rows[col].cast(pa.decimal128(38, 0)))).as_py()
        if total is not None and total >= 1 << 63:
            raise PipelineError(f"the {col} counts of the journals add up to {total:,}, more than a 64-bit "
                                f"sum holds: the totals would be wrong.")


def build_report(batches: list, *, since=None, until=None, burst_threshold: int = BURST_THRESHOLD,
                 accuracy: int = PERCENTILE_ACCURACY, step=None) -> tuple[dict, dict]:
    """(arguments of summary.build_summary less inputs/out_dir/engine, {table name: rows as dicts,
    or an Arrow table}); step(name) is told of the "tables" and "spc" steps."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if step:
        step("tables")
    if not batches:
        from .batches import Batch
        batches = [Batch.empty()]
    rows = pa.concat_tables([b.rows for b in batches])
    check_sums(rows)
    kind = {tag: rows.filter(pc.equal(rows["tag"], tag)) for tag in
            (TRAFFIC, REJECTED, LEASE, OTHER, LINES, MESSAGE, THREAT, DURABLE)}
    tables: dict[str, list] = {}

    # traffic, the largest table (a row per link, type and minute), stays in Arrow
    g = kind[TRAFFIC].group_by(["a", "b", "c", "m"], use_threads=False).aggregate(
        [("n", "sum"), ("bytes", "sum"), ("tmin", "min"), ("tmax", "max")])
    g = g.rename_columns([{"n_sum": "n", "bytes_sum": "bytes", "tmin_min": "tmin", "tmax_max": "tmax"}.get(c, c)
                          for c in g.column_names])
    tables["traffic"] = pa.table({"source": g["a"], "target": g["b"], "type": g["c"], "minute": g["m"],
                                  "envelopes": g["n"], "bytes": g["bytes"]}).sort_by(
        [("minute", "ascending"), ("source", "ascending"), ("target", "ascending"), ("type", "ascending")])
    typed = g.append_column("messages", pc.if_else(pc.equal(g["c"], "MESSAGE"), g["n"], 0)).append_column(
        "spc_requests", pc.if_else(pc.equal(g["c"], "SPC_REQUEST"), g["n"], 0))
    links = {(r["source"], r["target"]): r for r in _group(
        typed.rename_columns([{"a": "source", "b": "target"}.get(c, c) for c in typed.column_names]),
        ["source", "target"], [("envelopes", "n", "sum"), ("bytes", "bytes", "sum"), ("messages", "messages", "sum"),
                               ("spc_requests", "spc_requests", "sum"), ("first_ts", "tmin", "min"),
                               ("last_ts", "tmax", "max")])}
    minutes = {r["m"]: (r["e"], r["b"] or 0) for r in _group(g, ["m"], [("e", "n", "sum"), ("b", "bytes", "sum")])}
    top = sorted(links.values(), key=lambda r: (-r["envelopes"], -r["bytes"], r["source"], r["target"]))
    for i, r in enumerate(top):
        r["rank"] = i + 1
    tables["top_talkers"] = top

    security = []
    per_peer = _group(kind[REJECTED], ["a", "b", "c", "m"], [("n", "n", "sum"), ("tmin", "tmin", "min"),
                                                             ("tmax", "tmax", "max")])
    groups: dict[tuple, list] = {}
    for r in per_peer:
        g = groups.get((r["a"], r["b"], r["m"]))
        if g is None:
            g = groups[(r["a"], r["b"], r["m"])] = [0, [], r["tmin"], r["tmax"]]
        g[0] += r["n"]
        if r["c"] is not None:
            g[1].append(r["c"])
        g[2], g[3] = min(g[2], r["tmin"]), max(g[3], r["tmax"])
    for (node, reason, minute), (n, peers, first, last) in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        security.append({"node": node, "reason": reason, "minute": minute, "rejections": n, "peers": len(peers),
                         "peers_sample": sorted(peers)[:5], "first_ts": first, "last_ts": last,
                         "burst": n >= burst_threshold, "label": reason_label(None if reason == "unknown" else reason)})
    tables["security"] = security

    totals, first_ts, last_ts, writers = _totals(kind)
    win_start = since if since is not None else first_ts
    win_end = until if until is not None else last_ts
    bucket = choose_bucket(win_start, win_end)
    events: dict[str, list] = defaultdict(list)
    for r in kind[LEASE].select(["a", "b", "c", "x", "n"]).to_pylist():
        prio = 0 if r["c"] in TERMINAL_EVENTS else (2 if r["c"] in ("registered", "reclaimed", "observed_join") else 1)
        events[r["a"]].extend([(r["x"], prio, r["b"], r["c"])] * int(r["n"]))
    tables["availability"] = availability(events, win_start, win_end)
    if step:
        step("spc")
    tables["spc"], from_callees = spc_rows([b.done for b in batches], [b.open for b in batches], accuracy, writers)
    named = set(writers)
    for tag, col in ((TRAFFIC, "b"), (OTHER, "b"), (LEASE, "a")):
        named.update(x for x in pc.unique(kind[tag][col]).to_pylist() if x is not None)

    msg = _group(kind[MESSAGE], ["a", "b", "c", "d", "m"], [("n", "n", "sum"), ("rel", "rel", "sum"),
                                                            ("chunks", "chunks", "sum"), ("bytes", "bytes", "sum"),
                                                            ("tmin", "tmin", "min"), ("tmax", "tmax", "max")])
    tables["messages"] = _messages_table(msg)
    thr = _group(kind[THREAT], ["a", "b", "c", "m"], [("n", "n", "sum"), ("score", "score", "max"),
                                                      ("tmin", "tmin", "min"), ("tmax", "tmax", "max")])
    quarantined = [r for r in per_peer if r["b"] == "quarantined"]
    tables["threats"] = _threats_table(thr, quarantined)
    dur = _group(kind[DURABLE], ["a", "b", "c", "d"], [("n", "n", "sum"), ("tmin", "tmin", "min"),
                                                       ("tmax", "tmax", "max")])
    tables["durable"] = [{"node": r["a"], "peer": r["b"], "event": r["c"], "status": r["d"], "records": r["n"],
                          "first_ts": r["tmin"], "last_ts": r["tmax"]} for r in dur]

    rb: dict[tuple, int] = defaultdict(int)
    by_reason: dict[str, int] = defaultdict(int)
    for r in security:
        rb[((r["minute"] // bucket) * bucket, r["reason"])] += r["rejections"]
        by_reason[r["reason"]] += r["rejections"]
    tb: dict[int, list] = defaultdict(lambda: [0, 0])
    for m, (e, b) in minutes.items():
        tb[(m // bucket) * bucket][0] += e
        tb[(m // bucket) * bucket][1] += b
    bursts = sorted((r for r in security if r["burst"]),
                    key=lambda r: (-r["rejections"], r["minute"], r["node"], r["reason"]))[:20]
    msg_links: dict[tuple, dict] = {}
    msg_minutes: dict[tuple, int] = defaultdict(int)
    msg_reasons: dict[tuple, int] = defaultdict(int)
    for r in msg:
        link = msg_links.setdefault((r["a"], r["b"], r["c"]), {"source": r["a"], "target": r["b"], "event": r["c"],
                                                               "n": 0, "rel": 0, "chunks": 0, "bytes": 0})
        for k in ("n", "rel", "chunks", "bytes"):
            link[k] += r[k] or 0
        msg_minutes[(r["m"], r["c"])] += r["n"]
        if r["c"] in ("send-error", "voided"):
            msg_reasons[(r["c"], r["d"] if r["d"] is not None else "unknown")] += r["n"]
    threat_pairs: dict[tuple, dict] = {}
    threat_minutes: dict[tuple, dict] = {}
    for r in thr:
        p = threat_pairs.setdefault((r["a"], r["b"], r["c"]), {"receiver": r["a"], "sender": r["b"], "event": r["c"],
                                                               "n": 0, "score": None, "first_ts": r["tmin"],
                                                               "last_ts": r["tmax"]})
        mm = threat_minutes.setdefault((r["m"], r["c"]), {"minute": r["m"], "event": r["c"], "n": 0, "score": None})
        for d in (p, mm):
            d["n"] += r["n"]
            if r["score"] is not None and (d["score"] is None or r["score"] > d["score"]):
                d["score"] = r["score"]
        p["first_ts"], p["last_ts"] = min(p["first_ts"], r["tmin"]), max(p["last_ts"], r["tmax"])
    quarantined_pairs: dict[tuple, dict] = {}
    for r in quarantined:
        q = quarantined_pairs.setdefault((r["a"], r["c"]), {"receiver": r["a"], "sender": r["c"], "n": 0,
                                                            "first_ts": r["tmin"], "last_ts": r["tmax"]})
        q["n"] += r["n"]
        q["first_ts"], q["last_ts"] = min(q["first_ts"], r["tmin"]), max(q["last_ts"], r["tmax"])
    durable_rows = _group(kind[DURABLE], ["a", "b", "c", "d"], [("n", "n", "sum")])
    parts = dict(
        since=since, until=until, totals=totals, first_ts=first_ts, last_ts=last_ts, bucket=bucket,
        traffic_buckets=[(t, v[0], v[1]) for t, v in sorted(tb.items())],
        rejection_buckets=[(k[0], k[1], v) for k, v in sorted(rb.items())],
        bursts=bursts, by_reason=dict(by_reason), spc=tables["spc"], top=top[:SUMMARY_TOP],
        availability=tables["availability"], burst_threshold=burst_threshold, accuracy=accuracy,
        messages=messages_section(list(msg_links.values()),
                                  [{"minute": m, "event": e, "n": n} for (m, e), n in msg_minutes.items()],
                                  [{"event": e, "reason": r, "n": n} for (e, r), n in msg_reasons.items()],
                                  totals["chunk_envelopes_sent"], bucket),
        threats=threats_section(list(threat_pairs.values()), list(threat_minutes.values()),
                                list(quarantined_pairs.values()), bucket),
        durable=durable_section([{"node": r["a"], "peer": r["b"], "event": r["c"], "status": r["d"], "n": r["n"]}
                                 for r in durable_rows]),
        coverage=coverage_section(writers, named, from_callees))
    return parts, tables


def coverage_section(writers: set[str], named: set[str], from_callees: int) -> dict:
    """What the figures cover: nodes whose journal is in the input among the nodes it names (as a
    sender's target, an accepted envelope's sender or a lease's subject), and the SPC calls counted
    from callees' records because their callers keep no journal."""
    missing = sorted(named - writers)
    return {"journals": len(writers), "nodes": len(named | writers), "without_journal": missing[:SUMMARY_TOP * 2],
            "spc_calls_from_callees": from_callees}


def _messages_table(msg: list[dict]) -> list[dict]:
    """Logical messages per (source, target, minute): the sender's events and the receiver's."""
    column = {ev: name for name, ev in MESSAGE_COLUMNS}
    per: dict[tuple, dict] = {}
    for r in msg:
        row = per.get((r["a"], r["b"], r["m"]))
        if row is None:
            row = per[(r["a"], r["b"], r["m"])] = {
                "source": r["a"], "target": r["b"], "minute": r["m"], **{name: 0 for name, _ in MESSAGE_COLUMNS},
                "reliable": 0, "chunks": 0, "bytes": 0, "first_ts": r["tmin"], "last_ts": r["tmax"]}
        if r["c"] in column:
            row[column[r["c"]]] += r["n"]
        if r["c"] == "sent":
            row["reliable"] += r["rel"] or 0
            row["chunks"] += r["chunks"] or 0
            row["bytes"] += r["bytes"] or 0
        row["first_ts"], row["last_ts"] = min(row["first_ts"], r["tmin"]), max(row["last_ts"], r["tmax"])
    return [per[k] for k in sorted(per, key=lambda k: (k[2], k[0], k[1]))]


def _threats_table(thr: list[dict], quarantined: list[dict]) -> list[dict]:
    """Threat-score changes per (receiver, sender, minute) and the envelopes removed unread."""
    per: dict[tuple, dict] = {}

    def row(receiver, sender, minute, first, last) -> dict:
        r = per.get((receiver, sender, minute))
        if r is None:
            r = per[(receiver, sender, minute)] = {"receiver": receiver, "sender": sender, "minute": minute,
                                                   **{ev: 0 for ev in THREAT_EVENTS}, "max_score": None,
                                                   "quarantined_rejections": 0, "first_ts": first, "last_ts": last}
        r["first_ts"], r["last_ts"] = min(r["first_ts"], first), max(r["last_ts"], last)
        return r

    for t in thr:
        r = row(t["a"], t["b"], t["m"], t["tmin"], t["tmax"])
        if t["c"] in THREAT_EVENTS:
            r[t["c"]] += t["n"]
        if t["score"] is not None and (r["max_score"] is None or t["score"] > r["max_score"]):
            r["max_score"] = t["score"]
    for q in quarantined:
        row(q["a"], q["c"], q["m"], q["tmin"], q["tmax"])["quarantined_rejections"] += q["n"]
    return [per[k] for k in sorted(per, key=lambda k: (k[2], k[0], k[1]))]


def _totals(kind: dict) -> tuple[dict, float | None, float | None, set[str]]:
    """Per-kind counts, nodes and the time range of the roll-ups."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n: dict[tuple, int] = defaultdict(int)
    nodes: set[str] = set()
    first = last = None
    sent_bytes = chunk_envelopes = 0
    for tag, t in kind.items():
        if not t.num_rows:
            continue
        if tag == LEASE:
            writer = t["b"]
        elif tag == MESSAGE:
            writer = pc.if_else(pc.is_in(t["c"], pa.array(RECEIVER_MESSAGE_EVENTS)), t["b"], t["a"])
        else:
            writer = t["a"]
        by_c = tag in (OTHER, LINES)
        for r in _group(t.append_column("node", writer), ["c"] if by_c else [],
                        [("n", "n", "sum"), ("bytes", "bytes", "sum"), ("chunks", "chunks", "sum")]):
            n[(tag, r.get("c"))] += r["n"] or 0
            if tag == TRAFFIC:
                sent_bytes += r["bytes"] or 0
                chunk_envelopes += r["chunks"] or 0
        if tag != LINES:
            nodes.update(x for x in pc.unique(writer).to_pylist() if x is not None)
            lo, hi = pc.min(t["tmin"]).as_py(), pc.max(t["tmax"]).as_py()
            first = lo if first is None or (lo is not None and lo < first) else first
            last = hi if last is None or (hi is not None and hi > last) else last
    sent, rejected = n[(TRAFFIC, None)], n[(REJECTED, None)]
    envelopes = sent + rejected + n[(OTHER, "accepted")] + n[(OTHER, "other")]
    lease = n[(LEASE, None)]
    by_kind = {"message": n[(MESSAGE, None)], "threat": n[(THREAT, None)], "durable": n[(DURABLE, None)],
               **{k: n[(OTHER, k)] for k in COUNTED_KINDS}}
    records = envelopes + lease + sum(by_kind.values())
    malformed, filtered = n[(LINES, "malformed")], n[(LINES, "filtered")]
    totals = {"lines": records + malformed + filtered, "malformed": malformed,
              "valid": records + filtered, "records": records, "envelope_records": envelopes,
              "lease_records": lease, **{f"{k}_records": v for k, v in sorted(by_kind.items())},
              "envelopes_sent": sent, "bytes_sent": sent_bytes, "chunk_envelopes_sent": chunk_envelopes,
              "accepted": n[(OTHER, "accepted")], "rejected": rejected, "nodes": len(nodes),
              "filtered_out": filtered}
    return totals, first, last, nodes


def write_tables(tables: dict[str, list], out_uri: str, spark=None) -> None:
    """Each table as Parquet in out_uri/<name>/ (a local directory: written here, replaced whole;
    any other URI: written by Spark)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from .batches import arrow_schema
    for name, rows in tables.items():
        schema = arrow_schema(TABLE_DDL[name])
        table = rows.select(schema.names).cast(schema) if isinstance(rows, pa.Table) else \
            pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)
        if not is_local(out_uri):
            spark.createDataFrame(table).coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/{name}")
            continue
        final = os.path.join(local_path(out_uri), name)
        tmp, old = final + ".tmp", final + ".old"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        pq.write_table(table, os.path.join(tmp, "part-00000.parquet"))
        if os.path.exists(final):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
