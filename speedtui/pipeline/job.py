"""Trace analytics on Spark: SPEED trace journals (wire contract section 8) -> Parquet tables
plus a compact ``summary.json`` for the console.

This module is self-contained (standard library + pyspark, no other project imports) so that it
runs unchanged under ``spark-submit speedtui/pipeline/job.py --traces ... --out ...``.
pyspark is imported lazily, so importing this module for its constants is cheap.

Only built-in Spark SQL functions are used (no Python UDFs): executors need no project code and
no Python beyond what PySpark itself needs.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import shutil
import sys
import threading
import time
from typing import Any, Callable, Iterable

SUMMARY_SCHEMA = "speed-analytics-summary/1"
TABLES = ("traffic", "top_talkers", "spc", "security", "availability")

#: percentile_approx accuracy: the rank of a returned percentile is within n / accuracy of the
#: exact nearest rank (n = number of latencies in the group). With 10000 and fewer than 10000
#: latencies per (target, service) the answer is the exact nearest-rank percentile.
PERCENTILE_ACCURACY = 10000
#: a (node, reason, minute) group with at least this many rejections is flagged as a burst.
BURST_THRESHOLD = 5
#: the summary keeps this many rows of the ranked tables.
SUMMARY_TOP = 10
#: the summary's over-time series use the smallest of these bucket sizes giving <= MAX_BUCKETS.
BUCKET_CHOICES = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 120
#: timestamps outside [0, MAX_TS) make a line malformed (guards against Infinity / garbage).
MAX_TS = 1e11

ERROR_CODES = ("SERVICE_NOT_FOUND", "ACCESS_DENIED", "INVALID_ARGUMENTS", "EXECUTION_FAILED",
               "TIMEOUT", "INTERNAL_ERROR")
TERMINAL_EVENTS = ("deregistered", "observed_leave", "observed_expiry", "reaped")
GRACEFUL_EVENTS = ("deregistered", "observed_leave")
START_EVENTS = ("registered", "reclaimed")
SELF_EVENTS = ("registered", "reclaimed", "deregistered", "renewed_late", "lost")

REASON_LABELS = {
    "bad_tag": "wrong key or tampering",
    "replayed_nonce": "replay",
    "replayed_sequence": "replay",
    "unauthorized": "missing grant or probing",
    "stale_timestamp": "clock skew or delayed replay",
    "unknown_sender": "unknown or restarted sender",
    "wrong_target": "stale registry entry or misrouting",
    "bad_size": "malformed or truncated envelope",
    "bad_version": "malformed or truncated envelope",
    "too_large": "oversized envelope",
    "bad_payload": "malformed payload",
    "bad_file": "file-system tampering",
}
DEFAULT_LABEL = "other rejection"


def reason_label(reason: str | None) -> str:
    if reason is None:
        return DEFAULT_LABEL
    if reason.startswith("replayed_"):
        return "replay"
    return REASON_LABELS.get(reason, DEFAULT_LABEL)


class PipelineError(Exception):
    """A user-facing error of the pipeline: its message is one clear sentence."""


class JavaMissingError(PipelineError):
    pass


JAVA_MISSING = ("Java was not found (no `java` on PATH and JAVA_HOME unset or invalid): "
                "install Java 17+, e.g. `apt-get install openjdk-17-jre-headless`.")


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = os.path.join(home, "bin", "java")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
        return None
    return shutil.which("java")


def java_major(java: str) -> int | None:
    """Major version of `java -version` (8 for 1.8), None if it cannot be told."""
    import subprocess
    try:
        p = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', p.stderr + p.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> str:
    """Path of the java Spark will use; JavaMissingError (one sentence) if there is none or it
    is older than 17. Runs before any Spark start-up."""
    home = os.environ.get("JAVA_HOME")
    java = find_java()
    if java is None:
        if home:
            raise JavaMissingError(f"JAVA_HOME ({home}) has no bin/java: point it at Java 17+ or "
                                   f"unset it, and install Java 17+ if needed, e.g. "
                                   f"`apt-get install openjdk-17-jre-headless`.")
        raise JavaMissingError(JAVA_MISSING)
    major = java_major(java)
    if major is not None and major < 17:
        raise JavaMissingError(f"{java} is Java {major}, too old for Spark 4: install Java 17+, "
                               f"e.g. `apt-get install openjdk-17-jre-headless`.")
    return java


# --------------------------------------------------------------------------------------------
# small helpers shared with reference.py and commands.py
# --------------------------------------------------------------------------------------------

def parse_time(text: str | float | int | None) -> float | None:
    """Epoch seconds, or ISO 8601 (naive = local time). Raises PipelineError."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    try:
        return float(s)
    except ValueError:
        pass
    try:
        d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
    except ValueError:
        raise PipelineError(f"cannot read time {text!r}: give epoch seconds or ISO 8601 "
                            f"such as 2025-01-31T12:00:00Z.") from None
    return d.timestamp()


def has_scheme(path: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def is_local(path: str) -> bool:
    return not has_scheme(path) or path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def choose_bucket(start: float | None, end: float | None) -> int:
    if start is None or end is None:
        return BUCKET_CHOICES[0]
    span = max(0.0, end - start)
    for b in BUCKET_CHOICES:
        if span / b <= MAX_BUCKETS:
            return b
    return BUCKET_CHOICES[-1]


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def empty_message(inputs: list[str]) -> str:
    return "no trace records found in " + ", ".join(inputs) + "."


# --------------------------------------------------------------------------------------------
# Spark session and progress
# --------------------------------------------------------------------------------------------

def default_driver_memory() -> str:
    """Half of this machine's memory, between 1g and 16g: in local mode the driver is the only
    executor, and 4g ran out of heap at 50M records where 12g (half of 24 GiB) was enough."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "4g"
    return f"{max(1, min(16, total // 2 // 2**30))}g"


def make_spark(master: str | None = None, shuffle_partitions: int | None = None,
               app_name: str = "speed-trace-analytics"):
    check_java()
    from pyspark.sql import SparkSession
    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    parts = shuffle_partitions or int(os.environ.get("SPEED_SHUFFLE_PARTITIONS", "0") or 0)
    if not parts:
        parts = max(8, 4 * (os.cpu_count() or 2))
    b = (b.config("spark.sql.shuffle.partitions", str(parts))
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.sql.session.timeZone", "UTC"))
    if not os.environ.get("SPARK_UI"):
        b = b.config("spark.ui.enabled", "false")
    mem = os.environ.get("SPEED_SPARK_DRIVER_MEMORY") or default_driver_memory()
    b = b.config("spark.driver.memory", mem)
    try:
        spark = b.getOrCreate()
    except Exception as exc:  # JVM failed to start
        raise PipelineError(f"Spark could not start: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Progress:
    """Polls spark.sparkContext.statusTracker() and reports (fraction, text) monotonically."""

    def __init__(self, spark, callback: Callable[[float, str], Any] | None, steps: list[str],
                 interval: float = 0.25):
        self.cb = callback
        self.spark = spark
        self.steps = steps
        self.index = 0
        self.last = 0.0
        self.interval = interval
        self.lock = threading.Lock()
        self.emit_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self):
        if self.cb is not None:
            self.thread = threading.Thread(target=self._run, name="speed-pipeline-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def step(self, name: str) -> None:
        with self.lock:
            self.index = self.steps.index(name)
        self._emit(0.0, name)

    def done(self, text: str = "done") -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self._emit_raw(1.0, text)

    def _emit(self, inner: float, text: str) -> None:
        with self.lock:
            frac = (self.index + max(0.0, min(1.0, inner))) / len(self.steps)
        self._emit_raw(frac, text)

    def _emit_raw(self, frac: float, text: str) -> None:
        if self.cb is None:
            return
        with self.emit_lock:  # one call at a time, fractions never go down
            frac = max(self.last, min(1.0, frac))
            self.last = frac
            try:
                self.cb(frac, text)
            except Exception:
                pass

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self.stop_event.wait(self.interval):
            try:
                ids = tracker.getActiveStageIds()
                done = total = 0
                for sid in ids:
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:
                continue
            if total:
                name = self.steps[self.index]
                self._emit(done / total * 0.95,
                           f"{name}: {len(ids)} active stage(s), {done}/{total} tasks done")


# --------------------------------------------------------------------------------------------
# the job
# --------------------------------------------------------------------------------------------

def _schema():
    from pyspark.sql import types as T
    S, D, L = T.StringType(), T.DoubleType(), T.LongType()
    fields = [("kind", S), ("ts", D), ("node", S), ("dir", S), ("peer", S), ("type", S),
              ("seq", L), ("size", L), ("outcome", S), ("reason", S), ("requestId", S),
              ("service", S), ("status", S), ("errorCode", S), ("latencyMs", D),
              ("subject", S), ("event", S)]
    return T.StructType([T.StructField(n, t, True) for n, t in fields])


JSON_OPTIONS = {"mode": "PERMISSIVE", "allowSingleQuotes": "false",
                "allowNonNumericNumbers": "false", "allowUnquotedFieldNames": "false"}


def parse_lines(df):
    """value:string lines -> parsed columns + `valid` (bool). Shared by the job and its tests."""
    from pyspark.sql import functions as F
    r = F.from_json(F.col("value"), _schema(), JSON_OPTIONS).alias("r")
    p = df.select(r).select("r.*")
    kind = F.col("kind")
    base = (F.col("ts").isNotNull() & (F.col("ts") >= 0) & (F.col("ts") < MAX_TS)
            & F.col("node").isNotNull())
    env = ((kind.isNull() | (kind == "envelope")) & F.col("dir").isNotNull()
           & F.col("peer").isNotNull() & F.col("type").isNotNull() & F.col("outcome").isNotNull())
    lease = (kind == "lease") & F.col("subject").isNotNull() & F.col("event").isNotNull()
    valid = F.coalesce(base & (env | lease), F.lit(False))
    return p.withColumn("valid", valid).withColumn(
        "kind", F.when(kind.isNull(), F.lit("envelope")).otherwise(kind))


def run_pipeline(inputs: list[str], out_dir: str, master: str | None = None,
                 since: float | None = None, until: float | None = None,
                 progress: Callable[[float, str], Any] | None = None, spark=None, *,
                 burst_threshold: int = BURST_THRESHOLD,
                 percentile_accuracy: int = PERCENTILE_ACCURACY,
                 shuffle_partitions: int | None = None) -> dict:
    """Analyse trace journals; write Parquet tables + summary.json in out_dir; return the summary.

    inputs: files or directories, any URI Spark can read (local, hdfs://, s3a://, file://).
    since/until: epoch seconds (or strings parse_time understands); records with
    since <= ts < until are analysed. progress(fraction 0..1, text) is called from a
    background thread. Raises PipelineError (JavaMissingError) with a one-sentence message.
    """
    t0 = time.time()
    if isinstance(inputs, str):
        inputs = [inputs]
    inputs = [str(p) for p in inputs]
    if not inputs:
        raise PipelineError("no trace inputs given.")
    since, until = parse_time(since), parse_time(until)
    if since is not None and until is not None and until <= since:
        raise PipelineError("--until must be later than --since.")
    shown_inputs = [os.path.abspath(local_path(p)) if not has_scheme(p) else p for p in inputs]
    read_paths: list[str] = []
    for p, shown in zip(inputs, shown_inputs):
        if is_local(p):
            lp = os.path.abspath(local_path(p))
            if not os.path.exists(lp):
                raise PipelineError(f"trace path {lp} does not exist.")
            if os.path.isdir(lp) and not any(not n.startswith((".", "_")) for n in os.listdir(lp)):
                continue  # empty directory: nothing to read
            read_paths.append(lp)
        else:
            read_paths.append(p)
    out_shown = os.path.abspath(local_path(out_dir)) if is_local(out_dir) else out_dir
    if is_local(out_dir):
        try:
            os.makedirs(out_shown, exist_ok=True)
        except OSError as exc:
            raise PipelineError(f"cannot create report directory {out_shown}: "
                                f"{exc.strerror or exc}.") from None
        if not os.access(out_shown, os.W_OK):
            raise PipelineError(f"report directory {out_shown} is not writable.")
        out_uri = out_shown
    else:
        out_uri = out_dir

    own_spark = False
    if spark is None:
        check_java()
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is None:  # otherwise reuse the caller's session (and leave it running)
            if progress:
                progress(0.0, "starting Spark")
            spark = make_spark(master, shuffle_partitions)
            own_spark = True
    steps = ["read", "traffic", "top_talkers", "spc", "security", "availability", "summary"]
    try:
        with _Progress(spark, progress, steps) as prog:
            summary = _run(spark, read_paths, shown_inputs, out_uri, out_shown, since, until, prog,
                           burst_threshold, percentile_accuracy)
            summary["elapsed_seconds"] = round(time.time() - t0, 3)
            _write_summary(spark, out_uri, summary)
            prog.done(summary.get("message") or "done")
        return summary
    except PipelineError:
        raise
    except Exception as exc:
        name = type(exc).__name__
        if name in ("AnalysisException", "Py4JJavaError", "IllegalArgumentException"):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
            raise PipelineError(f"Spark failed: {first}") from exc
        raise
    finally:
        if own_spark:
            spark.stop()


def _run(spark, read_paths, shown_inputs, out_uri, out_shown, since, until, prog,
         burst_threshold, accuracy) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import Window

    prog.step("read")
    # one bad field nulls only that field (as reference.py reads it), not the whole record
    spark.conf.set("spark.sql.json.enablePartialResults", "true")
    if read_paths:
        raw = spark.read.text(read_paths)
    else:
        raw = spark.createDataFrame([], "value string")
    parsed = parse_lines(raw)
    ts = F.col("ts")
    in_win = F.lit(True)
    if since is not None:
        in_win = in_win & (ts >= F.lit(float(since)))
    if until is not None:
        in_win = in_win & (ts < F.lit(float(until)))
    parsed = parsed.withColumn("in_window", F.col("valid") & in_win)
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    good = parsed.filter("in_window").drop("valid", "in_window")

    iw = F.col("in_window")
    env = iw & (F.col("kind") == "envelope")
    c = lambda cond: F.sum(F.when(cond, 1).otherwise(0))  # noqa: E731
    row = parsed.agg(
        F.count(F.lit(1)).alias("lines"),
        c(~F.col("valid")).alias("malformed"),
        c(F.col("valid")).alias("valid"),
        c(iw).alias("records"),
        c(env).alias("envelope_records"),
        c(iw & (F.col("kind") == "lease")).alias("lease_records"),
        c(env & (F.col("dir") == "out") & (F.col("outcome") == "sent")).alias("envelopes_sent"),
        F.sum(F.when(env & (F.col("dir") == "out") & (F.col("outcome") == "sent"),
                     F.coalesce(F.col("size"), F.lit(0)))).alias("bytes_sent"),
        c(env & (F.col("dir") == "in") & (F.col("outcome") == "accepted")).alias("accepted"),
        c(env & (F.col("dir") == "in") & (F.col("outcome") == "rejected")).alias("rejected"),
        F.min(F.when(iw, ts)).alias("first_ts"),
        F.max(F.when(iw, ts)).alias("last_ts"),
        F.countDistinct(F.when(iw, F.col("node"))).alias("nodes"),
    ).collect()[0].asDict()
    totals = {k: int(row[k] or 0) for k in ("lines", "malformed", "valid", "records",
                                             "envelope_records", "lease_records", "envelopes_sent",
                                             "bytes_sent", "accepted", "rejected", "nodes")}
    totals["filtered_out"] = totals["valid"] - totals["records"]
    first_ts, last_ts = row["first_ts"], row["last_ts"]
    win_start = since if since is not None else first_ts
    win_end = until if until is not None else last_ts

    minute = (F.floor(ts / 60) * 60).cast("long").alias("minute")
    sent = good.filter((F.col("kind") == "envelope") & (F.col("dir") == "out")
                       & (F.col("outcome") == "sent"))
    size = F.coalesce(F.col("size"), F.lit(0))

    # ---- traffic
    prog.step("traffic")
    traffic = (sent.groupBy(F.col("node").alias("source"), F.col("peer").alias("target"),
                            F.col("type"), minute)
               .agg(F.count(F.lit(1)).alias("envelopes"), F.sum(size).alias("bytes"))
               .sortWithinPartitions("minute", "source", "target", "type"))
    traffic.write.mode("overwrite").parquet(f"{out_uri}/traffic")

    # ---- top talkers
    prog.step("top_talkers")
    w_rank = Window.orderBy(F.desc("envelopes"), F.desc("bytes"), "source", "target")
    top = (sent.groupBy(F.col("node").alias("source"), F.col("peer").alias("target"))
           .agg(F.count(F.lit(1)).alias("envelopes"), F.sum(size).alias("bytes"),
                c(F.col("type") == "MESSAGE").alias("messages"),
                c(F.col("type") == "SPC_REQUEST").alias("spc_requests"),
                F.min(ts).alias("first_ts"), F.max(ts).alias("last_ts"))
           .withColumn("rank", F.row_number().over(w_rank)))
    top.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/top_talkers")

    # ---- spc
    prog.step("spc")
    is_req = (F.col("dir") == "out") & (F.col("outcome") == "sent") & (F.col("type") == "SPC_REQUEST")
    is_resp = (F.col("dir") == "in") & (F.col("outcome") == "accepted") & (F.col("type") == "SPC_RESPONSE")
    legs = (good.filter((F.col("kind") == "envelope") & (is_req | is_resp))
            .select(F.col("node").alias("caller"), F.col("peer").alias("target"),
                    F.coalesce(F.col("requestId"),
                               F.concat(F.lit("\u0000row"), F.monotonically_increasing_id().cast("string"))
                               ).alias("rid"),
                    is_req.alias("is_req"), "ts", "service", "status", "errorCode", "latencyMs"))
    first_resp = F.when(~F.col("is_req"), F.col("ts"))
    calls = (legs.groupBy("caller", "target", "rid")
             .agg(F.max(F.when(F.col("is_req"), F.col("service"))).alias("req_service"),
                  F.max(F.when(~F.col("is_req"), F.col("service"))).alias("resp_service"),
                  F.max(F.col("is_req").cast("int")).alias("has_req"),
                  F.max((~F.col("is_req")).cast("int")).alias("answered"),
                  F.min_by(F.struct("status", "errorCode", "latencyMs"), first_resp).alias("resp"))
             .select("target",
                     F.coalesce("req_service", "resp_service", F.lit("(unknown)")).alias("service"),
                     "answered", F.col("resp.status").alias("status"),
                     F.col("resp.errorCode").alias("errorCode"),
                     F.col("resp.latencyMs").alias("latencyMs")))
    ok = F.col("status") == "SUCCESS"
    failed = (F.col("answered") == 1) & ~F.coalesce(ok, F.lit(False))
    code = F.coalesce(F.col("errorCode"), F.lit("UNKNOWN"))
    aggs = [F.count(F.lit(1)).alias("calls"),
            F.sum("answered").alias("answered"),
            c(F.coalesce(ok, F.lit(False))).alias("successes"),
            c(failed).alias("errors"),
            c(F.col("answered") == 0).alias("no_response")]
    for ec in ERROR_CODES:
        aggs.append(c(failed & (code == ec)).alias(f"err_{ec}"))
    aggs.append(c(failed & ~code.isin(*ERROR_CODES)).alias("err_OTHER"))
    aggs.append(F.count("latencyMs").alias("latency_count"))
    aggs.append(F.percentile_approx("latencyMs", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)),
                                    F.lit(int(accuracy))).alias("pct"))
    aggs.append(F.avg("latencyMs").alias("latency_mean_ms"))
    aggs.append(F.max("latencyMs").alias("latency_max_ms"))
    spc = (calls.groupBy("target", "service").agg(*aggs)
           .withColumn("success_rate", F.col("successes") / F.col("calls"))
           .withColumn("latency_p50_ms", F.col("pct")[0])
           .withColumn("latency_p95_ms", F.col("pct")[1])
           .withColumn("latency_p99_ms", F.col("pct")[2])
           .drop("pct"))
    spc.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/spc")

    # ---- security
    prog.step("security")
    label = F.lit(DEFAULT_LABEL)
    reason = F.coalesce(F.col("reason"), F.lit("unknown"))
    lab = (F.when(reason.startswith("replayed_"), F.lit("replay")))
    for k, v in REASON_LABELS.items():
        if not k.startswith("replayed_"):
            lab = lab.when(reason == k, F.lit(v))
    lab = lab.otherwise(label)
    security = (good.filter((F.col("kind") == "envelope") & (F.col("dir") == "in")
                            & (F.col("outcome") == "rejected"))
                .groupBy("node", reason.alias("reason"), minute)
                .agg(F.count(F.lit(1)).alias("rejections"),
                     F.countDistinct("peer").alias("peers"),
                     F.slice(F.sort_array(F.collect_set("peer")), 1, 5).alias("peers_sample"),
                     F.min(ts).alias("first_ts"), F.max(ts).alias("last_ts"))
                .withColumn("burst", F.col("rejections") >= F.lit(int(burst_threshold)))
                .withColumn("label", lab))
    security.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/security")

    # ---- availability
    prog.step("availability")
    availability = _availability(good, win_start, win_end)
    availability.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/availability")

    # ---- summary from the written tables (small)
    prog.step("summary")
    rd = lambda name: spark.read.parquet(f"{out_uri}/{name}")  # noqa: E731
    bucket = choose_bucket(win_start, win_end)
    tr = rd("traffic")
    tbucket = (F.floor(F.col("minute") / bucket) * bucket).cast("long").alias("t")
    traffic_rows = (tr.groupBy(tbucket).agg(F.sum("envelopes").alias("envelopes"),
                                            F.sum("bytes").alias("bytes")).orderBy("t").collect())
    sec = rd("security")
    sec_rows = (sec.groupBy(tbucket, "reason").agg(F.sum("rejections").alias("n"))
                .orderBy("t", "reason").collect())
    burst_rows = (sec.filter("burst").orderBy(F.desc("rejections"), "minute", "node", "reason")
                  .limit(20).collect())
    by_reason: dict[str, int] = {}
    for r in sec_rows:
        by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + int(r["n"])
    spc_rows = rd("spc").orderBy("target", "service").collect()
    top_rows = rd("top_talkers").orderBy("rank").limit(SUMMARY_TOP).collect()
    av_rows = rd("availability").orderBy("node").collect()

    summary = build_summary(
        inputs=shown_inputs, out_dir=out_shown, since=since, until=until,
        totals=totals, first_ts=first_ts, last_ts=last_ts, bucket=bucket,
        traffic_buckets=[(r["t"], r["envelopes"], r["bytes"]) for r in traffic_rows],
        rejection_buckets=[(r["t"], r["reason"], r["n"]) for r in sec_rows],
        bursts=[r.asDict() for r in burst_rows],
        by_reason=by_reason,
        spc=[r.asDict() for r in spc_rows],
        top=[r.asDict() for r in top_rows],
        availability=[r.asDict() for r in av_rows],
        burst_threshold=burst_threshold, accuracy=accuracy, engine="spark")
    parsed.unpersist()
    return summary


def _availability(good, win_start, win_end):
    from pyspark.sql import functions as F
    from pyspark.sql import Window
    ws = F.lit(float(win_start) if win_start is not None else None).cast("double")
    we = F.lit(float(win_end) if win_end is not None else None).cast("double")
    ev = F.col("event")
    is_self = F.col("node") == F.col("subject")
    terminal = ev.isin(*TERMINAL_EVENTS)
    startish = ev.isin("registered", "reclaimed", "observed_join")
    prio = F.when(terminal, 0).when(startish, 2).otherwise(1)
    lease = (good.filter(F.col("kind") == "lease")
             .select("ts", "node", "subject", "event", prio.alias("prio")))
    by_subject = Window.partitionBy("subject")
    w = by_subject.orderBy("ts", "prio", "node", "event")
    lease = lease.withColumn(
        "has_self", F.max((is_self & ev.isin(*SELF_EVENTS)).cast("int")).over(by_subject))
    prev = F.lag("event").over(w)
    is_start = F.when(F.col("has_self") == 1, is_self & ev.isin(*START_EVENTS)).otherwise(
        (ev == "observed_join") & (prev.isNull() | prev.isin(*TERMINAL_EVENTS)))
    lease = lease.withColumn("is_start", is_start)
    lease = lease.withColumn(
        "session", F.sum(F.col("is_start").cast("int")).over(
            w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    sess = (lease.groupBy("subject", "session")
            .agg(F.min(F.when(F.col("is_start"), F.col("ts"))).alias("start_ts"),
                 F.min(F.when(terminal, F.struct("ts", "prio", "node", "event"))).alias("term"),
                 F.max((is_self & ev.isin("renewed_late", "lost")).cast("int")).alias("self_evt"),
                 F.sum((is_self & (ev == "lost")).cast("int")).alias("lost"),
                 F.sum((is_self & (ev == "renewed_late")).cast("int")).alias("late"),
                 F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")))
    ws_sub = Window.partitionBy("subject").orderBy("session")
    sess = sess.withColumn("next_start", F.lead("start_ts").over(ws_sub))
    exists = (F.col("session") > 0) | F.col("term").isNotNull() | (F.col("self_evt") == 1)
    start = F.coalesce(F.col("start_ts"), ws)
    end_kind = (F.when(F.col("term").isNotNull(),
                       F.when(F.col("term.event").isin(*GRACEFUL_EVENTS), "graceful").otherwise("crash"))
                .when(F.col("next_start").isNotNull(), "crash").otherwise("open"))
    end = (F.when(F.col("term").isNotNull(), F.col("term.ts"))
           .when(F.col("next_start").isNotNull(), F.col("next_start")).otherwise(we))
    sess = (sess.withColumn("exists", exists).withColumn("kind", end_kind)
            .withColumn("dur", F.greatest(F.lit(0.0), end - start)))
    e = F.col("exists")
    c = lambda cond: F.sum(F.when(e & cond, 1).otherwise(0))  # noqa: E731
    window_seconds = (float(win_end) - float(win_start)) if (win_start is not None and win_end is not None) else None
    av = (sess.groupBy(F.col("subject").alias("node"))
          .agg(c(F.lit(True)).alias("sessions"),
               F.sum(F.when(e, F.col("dur")).otherwise(0.0)).alias("online_seconds"),
               c(F.col("kind") == "crash").alias("crashes"),
               c(F.col("kind") == "graceful").alias("graceful_departures"),
               F.sum("lost").alias("lost_leases"),
               F.sum("late").alias("late_renewals"),
               F.max(F.when(e, F.col("session"))).alias("last_session"),
               F.max_by(F.col("kind"), F.when(e, F.col("session"))).alias("last_kind"),
               F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts"))
          .withColumn("restarts", F.greatest(F.col("sessions") - 1, F.lit(0)))
          .withColumn("online_at_end", F.coalesce(F.col("last_kind") == "open", F.lit(False)))
          .withColumn("window_seconds", F.lit(window_seconds).cast("double"))
          .withColumn("availability",
                      F.when(F.col("window_seconds") > 0,
                             F.least(F.lit(1.0), F.col("online_seconds") / F.col("window_seconds"))))
          .select("node", "online_seconds", "window_seconds", "availability", "sessions", "restarts",
                  "crashes", "graceful_departures", "lost_leases", "late_renewals", "online_at_end",
                  "first_ts", "last_ts"))
    return av


# --------------------------------------------------------------------------------------------
# summary (shared with reference.py so both produce the same document)
# --------------------------------------------------------------------------------------------

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
                  burst_threshold, accuracy, engine) -> dict:
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
        "burst_threshold": burst_threshold,
        "percentile_accuracy": accuracy,
    }


def _write_summary(spark, out_uri: str, summary: dict) -> None:
    data = json.dumps(summary, indent=1, sort_keys=False, allow_nan=False).encode()
    if is_local(out_uri):
        path = os.path.join(local_path(out_uri), "summary.json")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(f"{out_uri}/summary.json")
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
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
    """A few lines for a terminal."""
    t = s["totals"]
    lines = []
    if s.get("message"):
        lines.append(s["message"])
    tr = s["time_range"]
    lines.append(f"records {t['records']:,} (malformed lines skipped: {s['malformed_lines']:,}, "
                 f"outside time range: {t['filtered_out']:,}), nodes {t['nodes']}, "
                 f"{tr['start_iso'] or '-'} .. {tr['end_iso'] or '-'}")
    lines.append(f"envelopes sent {t['envelopes_sent']:,} ({t['bytes_sent']:,} bytes), accepted "
                 f"{t['accepted']:,}, rejected {t['rejected']:,}; SPC calls {t['spc_calls']:,}"
                 + (f" ({t['spc_success_rate'] * 100:.1f}% success)" if t["spc_success_rate"] is not None else ""))
    if s["top_talkers"]:
        tt = s["top_talkers"][0]
        lines.append(f"top talker {tt['source']} -> {tt['target']}: {tt['envelopes']:,} envelopes")
    if s["rejections"]["bursts"]:
        b = s["rejections"]["bursts"][0]
        lines.append(f"{len(s['rejections']['bursts'])} rejection burst(s); largest {b['rejections']} "
                     f"x {b['reason']} at {b['node']} ({b['label']})")
    crashes = sum(a["crashes"] for a in s["availability"])
    if s["availability"]:
        lines.append(f"availability: {len(s['availability'])} nodes, {crashes} crash(es)")
    lines.append(f"report: {s['out_dir']}/summary.json")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# spark-submit entry point
# --------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="job.py", description="SPEED trace analytics (Spark)")
    ap.add_argument("--traces", nargs="+", action="extend", required=True,
                    help="journal files or directories (any Spark URI)")
    ap.add_argument("--out", required=True, help="output directory (any Spark URI)")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's / local[*])")
    ap.add_argument("--since", default=None)
    ap.add_argument("--until", default=None)
    ap.add_argument("--shuffle-partitions", type=int, default=None)
    ap.add_argument("--burst-threshold", type=int, default=BURST_THRESHOLD)
    args = ap.parse_args(argv)

    def show(frac: float, text: str) -> None:
        print(f"[{frac * 100:5.1f}%] {text}", file=sys.stderr, flush=True)

    try:
        summary = run_pipeline(args.traces, args.out, master=args.master, since=args.since,
                               until=args.until, progress=show,
                               shuffle_partitions=args.shuffle_partitions,
                               burst_threshold=args.burst_threshold)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
