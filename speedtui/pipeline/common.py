"""Errors, settings and small helpers shared by the Spark job, the store and the reference."""
from __future__ import annotations

import datetime as _dt
import re

SUMMARY_SCHEMA = "speed-analytics-summary/1"
TABLES = ("traffic", "top_talkers", "spc", "security", "availability", "messages", "threats", "durable")

#: latency percentiles come from KLL sketches with this k: exact (nearest rank) for groups of at
#: most k latencies, beyond that the rank is within about 0.03 % of n (docs/ANALYTICS.md)
PERCENTILE_ACCURACY = 10000
#: a (node, reason, minute) group with at least this many rejections is flagged as a burst
BURST_THRESHOLD = 5
#: the summary keeps this many rows of the ranked tables
SUMMARY_TOP = 10
#: the summary's over-time series use the smallest of these bucket sizes giving <= MAX_BUCKETS
BUCKET_CHOICES = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 120


class PipelineError(Exception):
    """A user-facing error of the pipeline: its message is one clear sentence."""


class JavaMissingError(PipelineError):
    pass


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


def hadoop_path(spark, uri: str):
    """(Hadoop FileSystem, Path) of uri in spark's JVM: file operations on any URI Spark writes to."""
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


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
