"""Errors, settings and small helpers shared by the Spark job, the store and the reference."""
from __future__ import annotations

import datetime as _dt
import math
import re

from .records import MAX_TS

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


# The runtime's rule for untrusted text (speed_runtime/core/visible.py), here again: the pipeline
# imports nothing of the rest of the project (it ships alone to spark-submit, pipeline.zip); a test
# pins the two to the same result on every code point (tests/pipeline/test_pipeline_hostile_output.py)
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069\u2028\u2029]")


def inline_visible(text: str) -> str:
    """`text` with every control character written out (`\\x1b`, `\\u202e`): data, never a sequence."""
    return _HIDDEN.sub(lambda m: (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                  else f"\\u{ord(m.group()):04x}"), text)


class PipelineError(Exception):
    """A user-facing error of the pipeline: its message is one clear sentence."""


class JavaMissingError(PipelineError):
    pass


def parse_time(text: str | float | int | None) -> float | None:
    """Epoch seconds, or ISO 8601 (naive = local time), within the journals' range of times
    [0, MAX_TS] (records.py; NaN and infinities refused). Raises PipelineError."""
    if text is None:
        return None
    shown = visible(repr(text) if isinstance(text, str) else str(text))
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        try:
            ts = float(text)
        except OverflowError:
            ts = math.inf
    else:
        s = str(text).strip()
        try:
            ts = float(s)
        except ValueError:
            try:
                d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
                ts = d.timestamp()
            except (ValueError, OverflowError, OSError):
                raise PipelineError(f"cannot read time {shown}: give epoch seconds or ISO 8601 "
                                    f"such as 2025-01-31T12:00:00Z.") from None
    if not (0.0 <= ts <= MAX_TS):       # NaN fails this too
        raise PipelineError(f"time {shown} is out of range: give epoch seconds from 0 to {MAX_TS:.0f} "
                            f"(1970 to 5138) or an ISO 8601 date in those years.")
    return ts


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
    """ts as ISO 8601 UTC; None for None and for a number no date has (NaN, infinities, out of
    the platform's range): never raises."""
    if ts is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError, TypeError):
        return None


def visible(text) -> str:
    """str(text) with every control character written out (the rule of speed_runtime.core.visible)."""
    return inline_visible(str(text))


def empty_message(inputs: list[str]) -> str:
    return "no trace records found in " + ", ".join(inputs) + "."
