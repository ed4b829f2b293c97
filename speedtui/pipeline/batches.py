"""Batches of roll-ups on disk and the report computed from them (see rollup.py).

    write_batch(spark, lines, batch_dir)          # one pass over the lines -> roll-ups
    report(spark, batch_dirs, out_uri, ...)       # roll-ups of all batches -> tables + summary
    compact(spark, batch_dirs, new_dir)           # many batches -> one, same answers

The report's queries read roll-ups (a few MB for millions of records), so they run with settings
for small inputs (rollup_queries), over merged roll-ups kept in memory while the report runs, and
write their tables a few at a time: on such inputs a Spark job costs its fixed overhead, not its data.
"""
from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from .common import BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_TOP, choose_bucket, hadoop_path
from .records import COUNTED_KINDS, TERMINAL_EVENTS, read_records
from .rollup import (CALL, DURABLE, LINES, MESSAGE, OTHER, REJECTED, ROWS_DDL, SPC_DONE_DDL, SPC_OPEN_DDL, THREAT,
                     TRAFFIC, batch_rows_sql, driver_facts_sql, durable_sql, merge_spc_sql, messages_sql,
                     resolve_open_sql, security_sql, spc_done_sql, spc_open_sql, spc_table_sql, threats_sql,
                     traffic_sql)
from .sections import durable_section, messages_section, threats_section
from .summary import availability

ROW_PARTS = "rows"
SPC_DONE = "spc_done"
SPC_OPEN = "spc_open"
DDL = {ROW_PARTS: ROWS_DDL, SPC_DONE: SPC_DONE_DDL, SPC_OPEN: SPC_OPEN_DDL}
#: a batch's roll-ups on disk: rows/tag=N/day=YYYY-MM-DD (the UTC day of the records), so a reader of
#: the store can take one kind of roll-up, or some days of it, without listing the rest
ROW_PARTITIONS = ("tag", "day")


def write_batch(spark, paths: list[str], batch_dir: str, *, since=None, until=None,
                batch_id: int = 0, accuracy: int = PERCENTILE_ACCURACY, step=None) -> None:
    """Roll up the journal files `paths` into batch_dir: one scan of the lines, then a split of
    the (much smaller) call legs."""
    if step:
        step("parse")
    read_records(spark, paths).createOrReplaceTempView("speed_records")
    (spark.sql(batch_rows_sql("speed_records", since, until, batch_id))
     .write.mode("overwrite").option("compression", "lz4").partitionBy(*ROW_PARTITIONS).parquet(f"{batch_dir}/{ROW_PARTS}"))
    if step:
        step("calls")
    with rollup_queries(spark, [batch_dir]), _writes() as start:
        _read(spark, [batch_dir], ROW_PARTS).createOrReplaceTempView("speed_batch")
        start(_parquet, spark.sql(spc_done_sql("speed_batch", accuracy)).coalesce(1), f"{batch_dir}/{SPC_DONE}")
        start(_parquet, spark.sql(spc_open_sql("speed_batch")).coalesce(1), f"{batch_dir}/{SPC_OPEN}")
    _drop_call_rows(spark, f"{batch_dir}/{ROW_PARTS}")


@contextmanager
def _writes():
    """Table writes WRITERS at a time (each is a Spark job of a fixed cost; concurrent ones share
    it): start(fn, *args) runs one; leaving waits for every write, then raises the first failure."""
    with ThreadPoolExecutor(WRITERS, thread_name_prefix="speed-pipeline-write") as pool:
        pending = []
        yield lambda fn, *args: pending.append(pool.submit(fn, *args))
    for f in pending:
        f.result()


def _parquet(df, uri: str) -> None:
    df.write.mode("overwrite").parquet(uri)


def _drop_call_rows(spark, rows_uri: str) -> None:
    """The call legs are now in spc_done/spc_open: remove their partition (Hadoop FS: any URI)."""
    fs, path = hadoop_path(spark, f"{rows_uri}/tag={CALL}")
    if fs.exists(path):
        fs.delete(path, True)


def _read(spark, batch_dirs: list[str], name: str):
    """One dataset of every batch (read one by one: Spark's partition discovery does not take
    several partitioned roots at once); an explicit schema, so that an empty batch reads too."""
    if not batch_dirs:
        return spark.createDataFrame([], DDL[name])
    frames = [spark.read.schema(DDL[name]).parquet(f"{d}/{name}") for d in batch_dirs]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


#: queries over roll-ups get one shuffle partition per this many bytes of them (at least one)
ROLLUP_BYTES_PER_PARTITION = 32 * 1024 * 1024
#: the report's tables are written by this many threads at once
WRITERS = 4


def _rollup_bytes(spark, batch_dirs: list[str]) -> int:
    """The bytes of the roll-ups of batch_dirs (Hadoop FS: any URI)."""
    total = 0
    for d in batch_dirs:
        fs, path = hadoop_path(spark, d)
        if fs.exists(path):
            total += fs.getContentSummary(path).getLength()
    return total


@contextmanager
def rollup_queries(spark, batch_dirs: list[str]):
    """Session settings for queries over roll-ups, put back afterwards. Roll-ups are small (a few
    MB for millions of records), and on inputs this small adaptive execution's re-planning after
    every shuffle costs more than it saves (measured warm on 2 cores: a group-by of 1,000 rows
    collected in 234 ms with it, 97 ms without); the shuffles get one partition per
    ROLLUP_BYTES_PER_PARTITION instead of the parse's 2 × cores. (The big parse keeps adaptive
    execution: it was faster with it.) Yields the number of partitions."""
    conf = spark.conf
    parts = max(1, min(int(conf.get("spark.sql.shuffle.partitions")),
                       -(-_rollup_bytes(spark, batch_dirs) // ROLLUP_BYTES_PER_PARTITION)))
    settings = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": str(parts)}
    before = {k: conf.get(k) for k in settings}
    for k, v in settings.items():
        conf.set(k, v)
    try:
        yield parts
    finally:
        for k, v in before.items():
            conf.set(k, v)


def _views(spark, batch_dirs: list[str], accuracy: int, parts: int = 0) -> list:
    """Temp views of all batches: speed_rows, and speed_spc_merged (calls across batches joined).
    With parts, speed_rows and speed_spc_merged are kept in memory in that many partitions (every
    query of the report reads them; they weigh what the roll-ups weigh); returns what to unpersist."""
    rows = _read(spark, batch_dirs, ROW_PARTS)
    _read(spark, batch_dirs, SPC_DONE).createOrReplaceTempView("speed_done")
    _read(spark, batch_dirs, SPC_OPEN).createOrReplaceTempView("speed_open")
    done = f"(SELECT * FROM speed_done UNION ALL {resolve_open_sql('speed_open', accuracy)}) d"
    merged = spark.sql(merge_spc_sql(done))
    kept = []
    if parts:
        rows, merged = rows.coalesce(parts).persist(), merged.coalesce(parts).persist()
        kept = [rows, merged]
    rows.createOrReplaceTempView("speed_rows")
    merged.createOrReplaceTempView("speed_spc_merged")
    return kept


def compact(spark, batch_dirs: list[str], new_dir: str, accuracy: int = PERCENTILE_ACCURACY) -> None:
    """Merge the roll-ups of many batches into one batch that gives the same report."""
    _views(spark, batch_dirs, accuracy)
    legs = ("sum(nreq) AS nreq, sum(nresp) AS nresp, min(resp_ts) AS resp_ts, "
            "min_by(code, resp_ts) AS code, min_by(lat, resp_ts) AS lat")
    (spark.sql(f"""SELECT tag, a, b, c, d, m, x, day, sum(n) AS n, sum(bytes) AS bytes, min(tmin) AS tmin,
                          max(tmax) AS tmax, {legs}, sum(chunks) AS chunks, sum(rel) AS rel,
                          max(score) AS score FROM speed_rows GROUP BY 1, 2, 3, 4, 5, 6, 7, 8""")
     .write.mode("overwrite").option("compression", "lz4").partitionBy(*ROW_PARTITIONS).parquet(f"{new_dir}/{ROW_PARTS}"))
    spark.sql(merge_spc_sql("speed_done")).coalesce(1).write.mode("overwrite").parquet(f"{new_dir}/{SPC_DONE}")
    (spark.sql(f"SELECT a, b, c, d, {legs} FROM speed_open GROUP BY 1, 2, 3, 4")
     .coalesce(1).write.mode("overwrite").parquet(f"{new_dir}/{SPC_OPEN}"))


def report(spark, batch_dirs: list[str], out_uri: str, *, since=None, until=None,
           burst_threshold: int = BURST_THRESHOLD, accuracy: int = PERCENTILE_ACCURACY,
           step=None) -> dict:
    """Write the tables (common.TABLES) in out_uri; return the arguments of summary.build_summary (less
    inputs/out_dir). The merged roll-ups are kept in memory while the report runs: one collect for the
    driver, one write per table, the writes WRITERS at a time (each is a Spark job of a fixed cost
    of a few hundred ms; concurrent ones share it)."""
    if step:
        step("tables")
    with rollup_queries(spark, batch_dirs) as parts:
        kept = _views(spark, batch_dirs, accuracy, parts=parts)
        try:
            return _report(spark, out_uri, since, until, burst_threshold, accuracy, step)
        finally:
            for df in kept:
                df.unpersist()


def _report(spark, out_uri, since, until, burst_threshold, accuracy, step) -> dict:
    spark.sql(security_sql("speed_rows", burst_threshold)).createOrReplaceTempView("speed_security")
    spark.sql(spc_table_sql("speed_spc_merged")).createOrReplaceTempView("speed_spc")
    tables = [
        (spark.sql(traffic_sql("speed_rows")).sortWithinPartitions("minute", "source", "target", "type"), "traffic"),
        (spark.table("speed_security").coalesce(1), "security"),
        (spark.sql(messages_sql("speed_rows")).sortWithinPartitions("minute", "source", "target"), "messages"),
        (spark.sql(threats_sql("speed_rows")).coalesce(1), "threats"),
        (spark.sql(durable_sql("speed_rows")).coalesce(1), "durable"),
        (spark.table("speed_spc").coalesce(1), "spc"),
    ]
    with _writes() as start:         # every write has ended when this block is left: then the views may go
        for df, name in tables:
            start(_parquet, df, f"{out_uri}/{name}")
        got: dict[str, list] = defaultdict(list)
        for r in spark.sql(driver_facts_sql("speed_rows", "speed_security", "speed_spc")).collect():
            got[r["part"]].append(json.loads(r["j"]))
        totals, first_ts, last_ts = _totals(got["facts"], got["lease"])
        win_start = since if since is not None else first_ts
        win_end = until if until is not None else last_ts
        bucket = choose_bucket(win_start, win_end)
        if step:
            step("spc")
        top = sorted(got["links"], key=lambda r: (-r["envelopes"], -r["bytes"], r["source"], r["target"]))
        for i, r in enumerate(top):
            r["rank"] = i + 1
        events: dict[str, list] = defaultdict(list)
        for r in got["lease"]:
            prio = 0 if r["c"] in TERMINAL_EVENTS else (2 if r["c"] in ("registered", "reclaimed", "observed_join") else 1)
            events[r["a"]].extend([(r["x"], prio, r["b"], r["c"])] * int(r["n"]))
        av = availability(events, win_start, win_end)
        start(_small_table, spark, top, "source string, target string, envelopes long, bytes long, "
              "messages long, spc_requests long, first_ts double, last_ts double, rank int", f"{out_uri}/top_talkers")
        start(_small_table, spark, av, "node string, online_seconds double, window_seconds double, "
              "availability double, sessions long, restarts long, crashes long, graceful_departures long, "
              "lost_leases long, late_renewals long, online_at_end boolean, first_ts double, "
              "last_ts double", f"{out_uri}/availability")

    tb: dict[int, list] = defaultdict(lambda: [0, 0])
    for r in got["minutes"]:
        b = tb[(r["m"] // bucket) * bucket]
        b[0] += r["e"]
        b[1] += r.get("b") or 0
    rb: dict[tuple, int] = defaultdict(int)
    by_reason: dict[str, int] = defaultdict(int)
    for r in got["rejected"]:
        rb[((r["minute"] // bucket) * bucket, r["reason"])] += r["n"]
        by_reason[r["reason"]] += r["n"]
    bursts = sorted(got["bursts"], key=lambda r: (-r["rejections"], r["minute"], r["node"], r["reason"]))[:20]
    spc_cols = spark.table("speed_spc").columns
    spc_rows = sorted(({k: r.get(k) for k in spc_cols} for r in got["spc"]),
                      key=lambda r: (r["target"], r["service"]))
    return dict(since=since, until=until, totals=totals, first_ts=first_ts, last_ts=last_ts,
                bucket=bucket, traffic_buckets=[(t, v[0], v[1]) for t, v in sorted(tb.items())],
                rejection_buckets=[(k[0], k[1], v) for k, v in sorted(rb.items())],
                bursts=bursts, by_reason=dict(by_reason), spc=spc_rows, top=top[:SUMMARY_TOP],
                availability=av, burst_threshold=burst_threshold, accuracy=accuracy,
                messages=messages_section(got["msg_links"], got["msg_minutes"], got["msg_reasons"],
                                          totals["chunk_envelopes_sent"], bucket),
                threats=threats_section(got["threat_pairs"], got["threat_minutes"], got["quarantined"], bucket),
                durable=durable_section(got["durable"]))


def _small_table(spark, rows: list[dict], schema: str, uri: str) -> None:
    names = [c.strip().split(" ")[0] for c in schema.split(",")]
    df = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)
    df.coalesce(1).write.mode("overwrite").parquet(uri)


def _totals(facts, lease_rows) -> tuple[dict, float | None, float | None]:
    n = defaultdict(int)
    nodes: set[str] = set()
    first = last = None
    sent_bytes = chunk_envelopes = 0
    for r in facts:
        tag, cnt = r["tag"], int(r["n"])
        n[(tag, r.get("c"))] += cnt             # (to_json leaves out null fields)
        if tag == TRAFFIC:
            sent_bytes += int(r.get("bytes") or 0)
            chunk_envelopes += int(r.get("chunks") or 0)
        if tag != LINES:
            nodes.add(r["node"])
            first = r["tmin"] if first is None or r["tmin"] < first else first
            last = r["tmax"] if last is None or r["tmax"] > last else last
    lease = 0
    for r in lease_rows:
        lease += int(r["n"])
        nodes.add(r["b"])
        first = r["tmin"] if first is None or r["tmin"] < first else first
        last = r["tmax"] if last is None or r["tmax"] > last else last
    sent, rejected = n[(TRAFFIC, None)], n[(REJECTED, None)]
    envelopes = sent + rejected + n[(OTHER, "accepted")] + n[(OTHER, "other")]
    by_kind = {"message": n[(MESSAGE, None)], "threat": n[(THREAT, None)], "durable": n[(DURABLE, None)],
               **{kind: n[(OTHER, kind)] for kind in COUNTED_KINDS}}
    records = envelopes + lease + sum(by_kind.values())
    malformed, filtered = n[(LINES, "malformed")], n[(LINES, "filtered")]
    totals = {"lines": records + malformed + filtered, "malformed": malformed,
              "valid": records + filtered, "records": records, "envelope_records": envelopes,
              "lease_records": lease, **{f"{k}_records": v for k, v in sorted(by_kind.items())},
              "envelopes_sent": sent, "bytes_sent": sent_bytes, "chunk_envelopes_sent": chunk_envelopes,
              "accepted": n[(OTHER, "accepted")], "rejected": rejected, "nodes": len(nodes),
              "filtered_out": filtered}
    return totals, first, last
