"""Trace analytics for SPEED journals: Spark job, pure-Python reference, simulator, CLI.

Public API (pyspark is imported lazily, only when the Spark job runs)::

    from speedtui.pipeline import run_pipeline, PipelineError, JavaMissingError
    summary = run_pipeline(["/dev/shm/speed/speed_traces"], "./speed-report",
                           since=None, until=None, progress=lambda frac, text: ...)
    summary = run_incremental(["/dev/shm/speed/speed_traces"], STORE_DIR, REPORT_DIR)

See docs/ANALYTICS.md.
"""
from .common import SUMMARY_SCHEMA, TABLES, JavaMissingError, PipelineError, parse_time
from .job import run_incremental, run_pipeline
from .session import check_java
from .summary import format_summary, load_summary

__all__ = ["run_pipeline", "run_incremental", "PipelineError", "JavaMissingError", "SUMMARY_SCHEMA", "TABLES",
           "check_java", "format_summary", "load_summary", "parse_time"]
