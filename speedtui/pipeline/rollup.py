"""The Spark side of the analysis: journal lines -> a batch of small roll-ups (one pass), and the
roll-ups of any number of batches -> the report's tables.

A *batch* is what one run ingests: either every line of the inputs (``speedtui analyze --traces``)
or what is new in the journals since the last run (the incremental store, store.py). Its roll-ups
are a few Parquet datasets:

``rows/tag=N``   one hash aggregation over the parsed lines, keyed by (tag, a, b, c, d, m, x):
                 0 traffic (source, target, type, minute), 1 rejections (node, reason, peer,
                 minute), 2 SPC call legs (caller, target, requestId, service; only until the
                 batch is split, below), 3 lease events (subject, writer, event, ts), 4 accepted
                 and other records per node, 5 malformed / out-of-range lines; counts, bytes,
                 first and last ts
``spc_done``     calls answered (or without request id) inside the batch, per (target, service):
                 counts per outcome, latency sum/max and a KLL sketch of the latencies
``spc_open``     call legs still waiting for their other half (caller, target, requestId)

Every aggregate of the big pass has a fixed-width buffer, so Spark keeps one hash aggregation
(a string min/max would make it sort all rows). Roll-ups merge by key (sums, min/max, sketch
union), so the tables of many batches cost about what their roll-ups weigh, not their records.
"""
from __future__ import annotations

from .common import PERCENTILE_ACCURACY
from .records import DEFAULT_LABEL, ERROR_CODES, REASON_LABELS

TRAFFIC, REJECTED, CALL, LEASE, OTHER, LINES = 0, 1, 2, 3, 4, 5
#: response outcome codes: 0 success, 1..6 ERROR_CODES, 7 any other (or missing) code
CODE_OTHER = len(ERROR_CODES) + 1
ROW_ID_PREFIX = "\u0000row"


def batch_rows(p, since=None, until=None, batch_id: int = 0):
    """Records (records.read_records) -> the aggregated rows of one batch (one scan, one hash
    aggregation)."""
    from pyspark.sql import functions as F
    ts, kind, d, out = F.col("ts"), F.col("kind"), F.col("dir"), F.col("outcome")
    in_win = F.col("valid")
    if since is not None:
        in_win = in_win & (ts >= F.lit(float(since)))
    if until is not None:
        in_win = in_win & (ts < F.lit(float(until)))
    env = kind == "envelope"
    sent = env & (d == "out") & (out == "sent")
    is_req = sent & (F.col("type") == "SPC_REQUEST")
    acc = env & (d == "in") & (out == "accepted")
    is_resp = acc & (F.col("type") == "SPC_RESPONSE")
    rej = env & (d == "in") & (out == "rejected")
    tags = (F.when(~F.col("valid"), F.array(F.lit(LINES)))
            .when(~in_win, F.array(F.lit(LINES)))
            .when(is_req, F.array(F.lit(TRAFFIC), F.lit(CALL)))
            .when(sent, F.array(F.lit(TRAFFIC)))
            .when(is_resp, F.array(F.lit(CALL), F.lit(OTHER)))
            .when(rej, F.array(F.lit(REJECTED)))
            .when(kind == "lease", F.array(F.lit(LEASE)))
            .otherwise(F.array(F.lit(OTHER))))
    minute = (F.floor(ts / 60) * 60).cast("long")
    rid = F.coalesce(F.col("requestId"), F.concat(F.lit(f"{ROW_ID_PREFIX}{batch_id}-"),
                                                   F.monotonically_increasing_id().cast("string")))
    ok = F.col("status") == "SUCCESS"
    code = F.coalesce(F.col("errorCode"), F.lit("UNKNOWN"))
    code_idx = F.when(ok, 0)
    for i, ec in enumerate(ERROR_CODES):
        code_idx = code_idx.when(code == ec, i + 1)
    code_idx = code_idx.otherwise(CODE_OTHER)
    pre = p.select(
        F.explode(tags).alias("tag"), "node", "peer", "type", "reason", "subject", "event",
        "service", ts, minute.alias("minute"), F.coalesce(F.col("size"), F.lit(0)).alias("size"),
        is_req.alias("is_req"), is_resp.alias("is_resp"), acc.alias("is_acc"), F.col("valid"),
        F.when(is_req | is_resp, rid).alias("rid"),
        F.when(is_resp, ts).alias("resp_ts"), F.when(is_resp, code_idx).alias("code"),
        F.when(is_resp, F.col("latencyMs")).alias("lat"))
    tag = F.col("tag")
    t = lambda k: tag == k  # noqa: E731
    keyed = pre.select(
        tag,
        F.when(t(LEASE), F.col("subject")).when(t(LINES), F.lit(None)).otherwise(F.col("node")).alias("a"),
        F.when(t(TRAFFIC) | t(CALL), F.col("peer")).when(t(REJECTED), F.coalesce(F.col("reason"), F.lit("unknown")))
         .when(t(LEASE), F.col("node")).alias("b"),
        F.when(t(TRAFFIC), F.col("type")).when(t(REJECTED), F.col("peer")).when(t(CALL), F.col("rid"))
         .when(t(LEASE), F.col("event")).when(t(LINES), F.when(F.col("valid"), "filtered").otherwise("malformed"))
         .when(t(OTHER), F.when(F.col("is_acc"), "accepted").otherwise("other"))
         .alias("c"),
        F.when(t(CALL), F.col("service")).alias("d"),
        F.when(t(TRAFFIC) | t(REJECTED), F.col("minute")).alias("m"),
        F.when(t(LEASE), F.col("ts")).alias("x"),
        F.when(t(LINES), F.lit(None)).otherwise(F.col("ts")).alias("ts"),
        F.when(t(TRAFFIC), F.col("size")).otherwise(F.lit(0)).alias("size"),
        F.when(t(CALL) & F.col("is_req"), 1).otherwise(0).alias("req"),
        F.when(t(CALL) & F.col("is_resp"), 1).otherwise(0).alias("resp"),
        "resp_ts", "code", "lat")
    return (keyed.groupBy("tag", "a", "b", "c", "d", "m", "x")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes"),
                 F.min("ts").alias("tmin"), F.max("ts").alias("tmax"),
                 F.sum("req").alias("nreq"), F.sum("resp").alias("nresp"),
                 F.min("resp_ts").alias("resp_ts"),
                 F.min_by("code", "resp_ts").alias("code"), F.min_by("lat", "resp_ts").alias("lat")))


def _call_aggs(accuracy: int):
    """Per (target, service) aggregates of resolved calls (columns answered, code, lat)."""
    from pyspark.sql import functions as F
    answered = F.col("answered") == 1
    c = lambda cond: F.sum(F.when(cond, 1).otherwise(0))  # noqa: E731
    aggs = [F.count(F.lit(1)).alias("calls"), c(answered).alias("answered"),
            c(answered & (F.col("code") == 0)).alias("successes"),
            c(answered & (F.col("code") != 0)).alias("errors"), c(~answered).alias("no_response")]
    for i, ec in enumerate(ERROR_CODES):
        aggs.append(c(answered & (F.col("code") == i + 1)).alias(f"err_{ec}"))
    aggs.append(c(answered & (F.col("code") == CODE_OTHER)).alias("err_OTHER"))
    aggs += [F.count("lat").alias("latency_count"), F.sum("lat").alias("latency_sum"),
             F.max("lat").alias("latency_max_ms"),
             F.kll_sketch_agg_double("lat", F.lit(int(accuracy))).alias("sketch")]
    return aggs


SPC_SUMS = ("calls", "answered", "successes", "errors", "no_response",
            *(f"err_{ec}" for ec in ERROR_CODES), "err_OTHER", "latency_count", "latency_sum")


def split_calls(calls, accuracy: int = PERCENTILE_ACCURACY):
    """The CALL rows of one batch -> (spc_done per (target, service), spc_open legs)."""
    from pyspark.sql import functions as F
    resolved = ((F.col("nreq") > 0) & (F.col("nresp") > 0)) | F.col("c").startswith(ROW_ID_PREFIX)
    done = (calls.filter(resolved)
            .select(F.col("b").alias("target"), F.coalesce("d", F.lit("(unknown)")).alias("service"),
                    (F.col("nresp") > 0).cast("int").alias("answered"), "code", "lat")
            .groupBy("target", "service").agg(*_call_aggs(accuracy)))
    open_legs = calls.filter(~resolved).select("a", "b", "c", "d", "nreq", "nresp", "resp_ts", "code", "lat")
    return done, open_legs


def resolve_open(open_legs, accuracy: int = PERCENTILE_ACCURACY):
    """Open legs of all batches -> calls per (target, service), in spc_done's columns. A call's
    service is its request's (the largest name if requests disagree), else its response's."""
    from pyspark.sql import functions as F
    calls = (open_legs.groupBy("a", "b", "c")
             .agg(F.max(F.when(F.col("nreq") > 0, F.col("d"))).alias("req_service"),
                  F.max(F.when(F.col("nresp") > 0, F.col("d"))).alias("resp_service"),
                  F.max((F.col("nresp") > 0).cast("int")).alias("answered"),
                  F.min_by(F.struct("code", "lat"), "resp_ts").alias("r")))
    return (calls.select(F.col("b").alias("target"),
                         F.coalesce("req_service", "resp_service", F.lit("(unknown)")).alias("service"),
                         "answered", F.col("r.code").alias("code"), F.col("r.lat").alias("lat"))
            .groupBy("target", "service").agg(*_call_aggs(accuracy)))


def merge_spc(done):
    """spc_done rows of any number of batches -> one row per (target, service), sketches merged."""
    from pyspark.sql import functions as F
    return (done.groupBy("target", "service")
            .agg(*[F.sum(k).alias(k) for k in SPC_SUMS], F.max("latency_max_ms").alias("latency_max_ms"),
                 F.kll_merge_agg_double("sketch").alias("sketch")))


def spc_table(merged):
    from pyspark.sql import functions as F
    q = lambda p: F.when(F.col("latency_count") > 0, F.kll_sketch_get_quantile_double("sketch", F.lit(p)))  # noqa: E731
    cols = ["target", "service", "calls", "answered", "successes", "errors", "no_response",
            *(f"err_{ec}" for ec in ERROR_CODES), "err_OTHER", "latency_count"]
    return merged.select(
        *[F.col(k).cast("long").alias(k) if k not in ("target", "service") else F.col(k) for k in cols],
        (F.col("latency_sum") / F.col("latency_count")).alias("latency_mean_ms"), "latency_max_ms",
        (F.col("successes") / F.col("calls")).alias("success_rate"),
        q(0.5).alias("latency_p50_ms"), q(0.95).alias("latency_p95_ms"), q(0.99).alias("latency_p99_ms"))


def traffic_table(rows):
    """TRAFFIC rows of any number of batches -> (source, target, type, minute) with first/last ts."""
    from pyspark.sql import functions as F
    return (rows.filter(F.col("tag") == TRAFFIC)
            .groupBy(F.col("a").alias("source"), F.col("b").alias("target"), F.col("c").alias("type"),
                     F.col("m").alias("minute"))
            .agg(F.sum("n").alias("envelopes"), F.sum("bytes").alias("bytes"),
                 F.min("tmin").alias("first_ts"), F.max("tmax").alias("last_ts")))


def security_table(rows, burst_threshold: int):
    from pyspark.sql import functions as F
    per_peer = (rows.filter(F.col("tag") == REJECTED)
                .groupBy("a", "b", "c", "m")
                .agg(F.sum("n").alias("n"), F.min("tmin").alias("tmin"), F.max("tmax").alias("tmax")))
    reason = F.col("reason")
    label = F.when(reason.startswith("replayed_"), F.lit("replay"))
    for k, v in REASON_LABELS.items():
        if not k.startswith("replayed_"):
            label = label.when(reason == k, F.lit(v))
    label = label.otherwise(F.lit(DEFAULT_LABEL))
    return (per_peer.groupBy(F.col("a").alias("node"), F.col("b").alias("reason"), F.col("m").alias("minute"))
            .agg(F.sum("n").alias("rejections"), F.count("c").alias("peers"),
                 F.slice(F.sort_array(F.collect_list("c")), 1, 5).alias("peers_sample"),
                 F.min("tmin").alias("first_ts"), F.max("tmax").alias("last_ts"))
            .withColumn("burst", F.col("rejections") >= F.lit(int(burst_threshold)))
            .withColumn("label", label))
