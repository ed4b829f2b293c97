"""Trace analytics on Spark: SPEED trace journals (wire contract section 8) -> Parquet tables
plus a compact ``summary.json`` for the console.

The pipeline imports nothing from the rest of the project (standard library + pyspark + this
package), so it also runs under ``spark-submit speedtui/pipeline/job.py --traces ... --out ...``.
Only built-in Spark SQL functions are used (no Python UDFs): executors need no project code.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable

if __package__ in (None, ""):  # run as a script (spark-submit): import the package beside it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "speedtui.pipeline"

from .batches import ingest  # noqa: E402
from .common import (BURST_THRESHOLD, PERCENTILE_ACCURACY, SUMMARY_SCHEMA, TABLES,  # noqa: E402,F401
                     JavaMissingError, PipelineError, has_scheme, is_local, local_path, parse_time)
from .journals import bundle, stage_whole  # noqa: E402
from .records import reason_label  # noqa: E402,F401
from .report import build_report, write_tables  # noqa: E402
from .session import Progress, check_java, is_connect, make_spark, require_modules  # noqa: E402,F401
from .summary import build_summary, format_summary, load_summary, write_summary  # noqa: E402,F401

#: the steps of a run and their share of its time (measured at 5M records)
STEPS = (("parse", 0.90), ("calls", 0.02), ("tables", 0.03), ("spc", 0.02), ("summary", 0.03))


def check_inputs(inputs) -> tuple[list[str], list[str]]:
    """(paths Spark reads, paths shown to the user); PipelineError for a missing local path."""
    if isinstance(inputs, str):
        inputs = [inputs]
    inputs = [str(p) for p in inputs]
    if not inputs:
        raise PipelineError("no trace inputs given.")
    shown = [os.path.abspath(local_path(p)) if not has_scheme(p) else p for p in inputs]
    read_paths: list[str] = []
    for p in inputs:
        if not is_local(p):
            read_paths.append(p)
            continue
        lp = os.path.abspath(local_path(p))
        if not os.path.exists(lp):
            raise PipelineError(f"trace path {lp} does not exist.")
        if os.path.isdir(lp) and not any(not n.startswith((".", "_")) for n in os.listdir(lp)):
            continue  # an empty directory: nothing to read
        read_paths.append(lp)
    return read_paths, shown


def prepare_out(out_dir: str) -> tuple[str, str]:
    """(URI Spark writes to, path shown); creates a local report directory."""
    if not is_local(out_dir):
        return out_dir, out_dir
    shown = os.path.abspath(local_path(out_dir))
    try:
        os.makedirs(shown, exist_ok=True)
    except OSError as exc:
        raise PipelineError(f"cannot create report directory {shown}: {exc.strerror or exc}.") from None
    if not os.access(shown, os.W_OK):
        raise PipelineError(f"report directory {shown} is not writable.")
    return shown, shown


def spark_errors(exc: Exception) -> PipelineError | None:
    """A Spark failure as one sentence (None if exc is not one of Spark's)."""
    name = type(exc).__name__
    if name in ("AnalysisException", "Py4JJavaError", "IllegalArgumentException", "SparkRuntimeException") \
            or type(exc).__module__.startswith("pyspark.errors"):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        return PipelineError(f"Spark failed: {first}")
    return None


@contextmanager
def spark_run(spark, own: bool, os_error: str | None = None):
    """Spark's failures (and, with os_error, file-system errors) as one sentence; stops the
    session if this run created it."""
    try:
        yield
    except PipelineError:
        raise
    except OSError as exc:
        if os_error is None:
            raise
        raise PipelineError(f"{os_error}: {exc.strerror or exc}.") from exc
    except Exception as exc:
        err = spark_errors(exc)
        if err is None:
            raise
        raise err from exc
    finally:
        if own:
            spark.stop()


def session_for(spark, master, shuffle_partitions, progress, remote: str | None = None):
    """(session, whether this run owns it): the given or active session is reused and left running;
    with remote (sc://HOST:PORT) a Spark Connect session, which needs no Java here."""
    if spark is not None:
        return spark, False
    require_modules(remote=bool(remote))
    if not remote:
        check_java()
        from pyspark.sql import SparkSession
        active = SparkSession.getActiveSession()
        if active is not None:
            return active, False
    if progress:
        progress(0.0, "connecting to Spark" if remote else "starting Spark")
    return make_spark(master, shuffle_partitions, remote=remote), True


@contextmanager
def staged(inputs: list[str], out_shown: str, out_is_local: bool):
    """The local inputs copied through their checked descriptors into a staging directory the run
    owns (journals.stage_whole: links inside a directory are never followed, nothing is reopened by
    name); other URIs pass as they are. Yields (paths Spark reads, {"skipped": journals skipped,
    "problems": a line for each that was skipped for a reason}), which the summary reports."""
    local = [p for p in inputs if is_local(p)]
    if not local:
        yield inputs, {"skipped": [], "problems": []}
        return
    import tempfile
    area = os.path.join(out_shown, "_staging") if out_is_local else tempfile.mkdtemp(prefix="speed-staging-")
    shutil.rmtree(area, ignore_errors=True)
    try:
        problems: list[str] = []
        copies, skipped = stage_whole([local_path(p) for p in local], area, problems=problems)
        yield bundle(copies, area) + [p for p in inputs if not is_local(p)], {"skipped": skipped, "problems": problems}
    finally:
        shutil.rmtree(area, ignore_errors=True)


def run_pipeline(inputs: list[str], out_dir: str, master: str | None = None,
                 since: float | None = None, until: float | None = None,
                 progress: Callable[[float, str], Any] | None = None, spark=None, *,
                 burst_threshold: int = BURST_THRESHOLD,
                 percentile_accuracy: int = PERCENTILE_ACCURACY,
                 shuffle_partitions: int | None = None, remote: str | None = None) -> dict:
    """Analyse every line of the inputs; write the Parquet tables + summary.json in out_dir and
    return the summary. inputs: files or directories, any URI Spark reads. since/until: epoch
    seconds or ISO 8601; records with since <= ts < until are analysed. progress(fraction,
    text) is called from a background thread. remote: a Spark Connect URL (sc://HOST:PORT).
    Raises PipelineError with one sentence."""
    t0 = time.time()
    read_paths, shown = check_inputs(inputs)
    since, until = parse_time(since), parse_time(until)
    if since is not None and until is not None and until <= since:
        raise PipelineError("--until must be later than --since.")
    out_uri, out_shown = prepare_out(out_dir)
    spark, own = session_for(spark, master, shuffle_partitions, progress, remote)
    check_out(spark, out_uri)
    with spark_run(spark, own, "the journals cannot be staged"):
        with Progress(spark, progress, STEPS) as prog, staged(read_paths, out_shown, is_local(out_uri)) as (paths, staging):
            batch = ingest(spark, paths, since=since, until=until, accuracy=percentile_accuracy, step=prog.step)
            parts, tables = build_report([batch], since=since, until=until, burst_threshold=burst_threshold,
                                         accuracy=percentile_accuracy, step=prog.step)
            write_tables(tables, out_uri, spark)
            prog.step("summary")
            summary = build_summary(inputs=shown, out_dir=out_shown, engine="spark", **parts)
            summary["staging"] = staging
            summary["elapsed_seconds"] = round(time.time() - t0, 3)
            write_summary(spark, out_uri, summary)
            prog.done(summary.get("message") or "done")
        return summary


def check_out(spark, out_uri: str) -> None:
    """Through Spark Connect the report is written here, so it must be a local directory."""
    if is_connect(spark) and not is_local(out_uri):
        raise PipelineError(f"through a Spark Connect server the report is written by this process: give a "
                            f"local --out directory instead of {out_uri}.")


def run_incremental(traces: list[str], store_dir: str, out_dir: str, master: str | None = None,
                    progress: Callable[[float, str], Any] | None = None, spark=None, *,
                    rebuild: bool = False, burst_threshold: int = BURST_THRESHOLD,
                    percentile_accuracy: int = PERCENTILE_ACCURACY,
                    shuffle_partitions: int | None = None, on_plan=None, remote: str | None = None) -> dict:
    """Ingest what is new in the local journal directories `traces` into the store at store_dir
    (store.py), write the report from the store in out_dir and return its summary, which has an
    extra "ingest" entry (new bytes, batches, rotated or replaced journals, timings)."""
    from .store import run_store
    t0 = time.time()
    _, shown = check_inputs(traces)
    out_uri, out_shown = prepare_out(out_dir)
    spark, own = session_for(spark, master, shuffle_partitions, progress, remote)
    check_out(spark, out_uri)
    with spark_run(spark, own, f"the analytics store {store_dir} cannot be written"):
        with Progress(spark, progress, STEPS) as prog:
            parts, facts = run_store(spark, shown, store_dir, out_uri, rebuild=rebuild,
                                     burst_threshold=burst_threshold, accuracy=percentile_accuracy,
                                     step=prog.step, on_plan=on_plan)
            prog.step("summary")
            summary = build_summary(inputs=shown, out_dir=out_shown, engine="spark", **parts)
            summary["ingest"] = facts
            summary["elapsed_seconds"] = round(time.time() - t0, 3)
            write_summary(spark, out_uri, summary)
            prog.done(summary.get("message") or "done")
        return summary


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point."""
    ap = argparse.ArgumentParser(prog="job.py", description="SPEED trace analytics (Spark)")
    ap.add_argument("--traces", nargs="+", action="extend", required=True,
                    help="journal files or directories (any Spark URI)")
    ap.add_argument("--out", required=True, help="output directory (any Spark URI)")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's / local[*])")
    ap.add_argument("--remote", default=None, help="a Spark Connect server, sc://HOST:PORT")
    ap.add_argument("--since", default=None)
    ap.add_argument("--until", default=None)
    ap.add_argument("--shuffle-partitions", type=int, default=None)
    ap.add_argument("--burst-threshold", type=int, default=BURST_THRESHOLD)
    args = ap.parse_args(argv)

    def show(frac: float, text: str) -> None:
        print(f"[{frac * 100:5.1f}%] {text}", file=sys.stderr, flush=True)

    try:
        summary = run_pipeline(args.traces, args.out, master=args.master, remote=args.remote, since=args.since,
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
