"""Batches of roll-ups on disk and the report computed from them (see rollup.py).

    write_batch(spark, lines, batch_dir)          # one pass over the lines -> roll-ups
    report(spark, batch_dirs, out_uri, ...)       # roll-ups of all batches -> tables + summary
    compact(spark, batch_dirs, new_dir)           # many batches -> one, same answers
"""
from __future__ import annotations

import json
from collections import defaultdict

from .common import BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_TOP, choose_bucket
from .records import TERMINAL_EVENTS, read_records
from .rollup import (CALL, LEASE, LINES, OTHER, REJECTED, TRAFFIC, batch_rows, merge_spc,
                     resolve_open, security_table, spc_table, split_calls, traffic_table)
from .summary import availability, build_summary

ROW_PARTS = "rows"
SPC_DONE = "spc_done"
SPC_OPEN = "spc_open"


def write_batch(spark, paths: list[str], batch_dir: str, *, since=None, until=None,
                batch_id: int = 0, accuracy: int = PERCENTILE_ACCURACY, step=None) -> None:
    """Roll up the journal files `paths` into batch_dir: one scan of the lines, then a split of
    the (much smaller) call legs."""
    from pyspark.sql import functions as F
    if step:
        step("parse")
    rows = batch_rows(read_records(spark, paths), since, until, batch_id)
    (rows.write.mode("overwrite").option("compression", "lz4")
     .partitionBy("tag").parquet(f"{batch_dir}/{ROW_PARTS}"))
    if step:
        step("calls")
    calls = spark.read.parquet(f"{batch_dir}/{ROW_PARTS}").filter(F.col("tag") == CALL)
    done, open_legs = split_calls(calls, accuracy)
    done.coalesce(1).write.mode("overwrite").parquet(f"{batch_dir}/{SPC_DONE}")
    open_legs.coalesce(1).write.mode("overwrite").parquet(f"{batch_dir}/{SPC_OPEN}")
    _drop_call_rows(spark, f"{batch_dir}/{ROW_PARTS}")


def _drop_call_rows(spark, rows_uri: str) -> None:
    """The call legs are now in spc_done/spc_open: remove their partition (Hadoop FS: any URI)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{rows_uri}/tag={CALL}")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if fs.exists(path):
        fs.delete(path, True)


def schemas(spark) -> dict:
    """The roll-up datasets' schemas, from the plans themselves (no job runs), so that an empty
    batch (nothing new) reads back without schema inference."""
    rows = batch_rows(read_records(spark, []))
    done, open_legs = split_calls(rows)
    return {ROW_PARTS: rows.schema, SPC_DONE: done.schema, SPC_OPEN: open_legs.schema}


def _read(spark, batch_dirs: list[str], name: str):
    """One dataset of every batch (read one by one: Spark's partition discovery does not take
    several partitioned roots at once)."""
    schema = schemas(spark)[name]
    if not batch_dirs:
        return spark.createDataFrame([], schema)
    frames = [spark.read.schema(schema).parquet(f"{d}/{name}") for d in batch_dirs]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def compact(spark, batch_dirs: list[str], new_dir: str) -> None:
    """Merge the roll-ups of many batches into one batch that gives the same report."""
    from pyspark.sql import functions as F
    legs = [F.sum("nreq").alias("nreq"), F.sum("nresp").alias("nresp"), F.min("resp_ts").alias("resp_ts"),
            F.min_by("code", "resp_ts").alias("code"), F.min_by("lat", "resp_ts").alias("lat")]
    rows = _read(spark, batch_dirs, ROW_PARTS).filter(F.col("tag") != CALL)
    (rows.groupBy("tag", "a", "b", "c", "d", "m", "x")
     .agg(F.sum("n").alias("n"), F.sum("bytes").alias("bytes"), F.min("tmin").alias("tmin"),
          F.max("tmax").alias("tmax"), *legs)
     .write.mode("overwrite").option("compression", "lz4").partitionBy("tag").parquet(f"{new_dir}/{ROW_PARTS}"))
    merge_spc(_read(spark, batch_dirs, SPC_DONE)).coalesce(1).write.mode("overwrite").parquet(f"{new_dir}/{SPC_DONE}")
    (_read(spark, batch_dirs, SPC_OPEN).groupBy("a", "b", "c", "d").agg(*legs)
     .coalesce(1).write.mode("overwrite").parquet(f"{new_dir}/{SPC_OPEN}"))


def merged_parts(spark, batch_dirs: list[str], accuracy: int = PERCENTILE_ACCURACY):
    """(rows, spc per (target, service)) of all batches, calls across batches joined up."""
    from pyspark.sql import functions as F
    rows = _read(spark, batch_dirs, ROW_PARTS)
    open_legs = _read(spark, batch_dirs, SPC_OPEN)
    done = _read(spark, batch_dirs, SPC_DONE).unionByName(resolve_open(open_legs, accuracy))
    return rows.filter(F.col("tag") != CALL), merge_spc(done)


def driver_facts(rows, security, spc):
    """Everything the summary needs, as one small collect (one Spark job): per-node totals,
    lease events, traffic per minute and per link, rejections per minute and reason, bursts
    candidates and the spc rows; each part is a JSON object tagged with its name."""
    from pyspark.sql import functions as F
    tag, n = F.col("tag"), F.col("n")
    node = F.when(tag == LEASE, F.col("b")).otherwise(F.col("a"))

    def part(name, df):
        return df.select(F.lit(name).alias("part"), F.to_json(F.struct(*df.columns)).alias("j"))

    facts = (rows.filter(tag.isin(TRAFFIC, REJECTED, OTHER, LINES))
             .groupBy("tag", node.alias("node"), F.when(tag.isin(OTHER, LINES), F.col("c")).alias("c"))
             .agg(F.sum(n).alias("n"), F.sum("bytes").alias("bytes"),
                  F.min("tmin").alias("tmin"), F.max("tmax").alias("tmax")))
    lease = rows.filter(tag == LEASE).select("a", "b", "c", "x", "n", "tmin", "tmax")
    traffic = rows.filter(tag == TRAFFIC)
    minutes = traffic.groupBy("m").agg(F.sum(n).alias("e"), F.sum("bytes").alias("b"))
    links = (traffic.groupBy(F.col("a").alias("source"), F.col("b").alias("target"))
             .agg(F.sum(n).alias("envelopes"), F.sum("bytes").alias("bytes"),
                  F.sum(F.when(F.col("c") == "MESSAGE", n).otherwise(0)).alias("messages"),
                  F.sum(F.when(F.col("c") == "SPC_REQUEST", n).otherwise(0)).alias("spc_requests"),
                  F.min("tmin").alias("first_ts"), F.max("tmax").alias("last_ts")))
    rejected = security.groupBy("minute", "reason").agg(F.sum("rejections").alias("n"))
    bursts = security.filter("burst").select("node", "reason", "minute", "rejections", "label")
    out = part("facts", facts)
    for name, df in (("lease", lease), ("minutes", minutes), ("links", links),
                     ("rejected", rejected), ("bursts", bursts), ("spc", spc)):
        out = out.unionByName(part(name, df))
    got: dict[str, list] = defaultdict(list)
    for r in out.collect():
        got[r["part"]].append(json.loads(r["j"]))
    return got


def report(spark, batch_dirs: list[str], out_uri: str, *, since=None, until=None,
           burst_threshold: int = BURST_THRESHOLD, accuracy: int = PERCENTILE_ACCURACY,
           step=None) -> dict:
    """Write the five tables in out_uri; return the arguments of summary.build_summary (less
    inputs/out_dir). One collect for the driver, one write per table."""
    if step:
        step("tables")
    rows, spc_merged = merged_parts(spark, batch_dirs, accuracy)
    security = security_table(rows, burst_threshold)
    spc = spc_table(spc_merged)
    got = driver_facts(rows, security, spc)
    totals, first_ts, last_ts = _totals(got["facts"], got["lease"])
    win_start = since if since is not None else first_ts
    win_end = until if until is not None else last_ts
    bucket = choose_bucket(win_start, win_end)

    traffic = traffic_table(rows).drop("first_ts", "last_ts")
    (traffic.sortWithinPartitions("minute", "source", "target", "type")
     .write.mode("overwrite").parquet(f"{out_uri}/traffic"))
    security.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/security")
    if step:
        step("spc")
    spc.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/spc")
    top = sorted(got["links"], key=lambda r: (-r["envelopes"], -r["bytes"], r["source"], r["target"]))
    for i, r in enumerate(top):
        r["rank"] = i + 1
    _small_table(spark, top, "source string, target string, envelopes long, bytes long, messages long, "
                 "spc_requests long, first_ts double, last_ts double, rank int", f"{out_uri}/top_talkers")
    events: dict[str, list] = defaultdict(list)
    for r in got["lease"]:
        prio = 0 if r["c"] in TERMINAL_EVENTS else (2 if r["c"] in ("registered", "reclaimed", "observed_join") else 1)
        events[r["a"]].extend([(r["x"], prio, r["b"], r["c"])] * int(r["n"]))
    av = availability(events, win_start, win_end)
    _small_table(spark, av, "node string, online_seconds double, window_seconds double, availability double, "
                 "sessions long, restarts long, crashes long, graceful_departures long, lost_leases long, "
                 "late_renewals long, online_at_end boolean, first_ts double, last_ts double",
                 f"{out_uri}/availability")

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
    spc_rows = sorted(({k: r.get(k) for k in spc.columns} for r in got["spc"]),
                      key=lambda r: (r["target"], r["service"]))
    return dict(since=since, until=until, totals=totals, first_ts=first_ts, last_ts=last_ts,
                bucket=bucket, traffic_buckets=[(t, v[0], v[1]) for t, v in sorted(tb.items())],
                rejection_buckets=[(k[0], k[1], v) for k, v in sorted(rb.items())],
                bursts=bursts, by_reason=dict(by_reason), spc=spc_rows, top=top[:SUMMARY_TOP],
                availability=av, burst_threshold=burst_threshold, accuracy=accuracy)


def _small_table(spark, rows: list[dict], schema: str, uri: str) -> None:
    names = [c.strip().split(" ")[0] for c in schema.split(",")]
    df = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)
    df.coalesce(1).write.mode("overwrite").parquet(uri)


def _totals(facts, lease_rows) -> tuple[dict, float | None, float | None]:
    n = defaultdict(int)
    nodes: set[str] = set()
    first = last = None
    sent_bytes = 0
    for r in facts:
        tag, cnt = r["tag"], int(r["n"])
        n[(tag, r.get("c"))] += cnt             # (to_json leaves out null fields)
        if tag == TRAFFIC:
            sent_bytes += int(r.get("bytes") or 0)
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
    records = sent + rejected + lease + n[(OTHER, "accepted")] + n[(OTHER, "other")]
    malformed, filtered = n[(LINES, "malformed")], n[(LINES, "filtered")]
    totals = {"lines": records + malformed + filtered, "malformed": malformed,
              "valid": records + filtered, "records": records, "envelope_records": records - lease,
              "lease_records": lease, "envelopes_sent": sent, "bytes_sent": sent_bytes,
              "accepted": n[(OTHER, "accepted")], "rejected": rejected, "nodes": len(nodes),
              "filtered_out": filtered}
    return totals, first, last
