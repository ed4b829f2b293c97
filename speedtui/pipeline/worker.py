"""The console's analyses run in a child process that keeps one JVM between analyses.

Textual draws on the terminal, so nothing of the JVM or Spark may reach it: the child's stdout
and stderr go to a log file (the JVM inherits them), it has no controlling terminal (its own
session), and it talks to the console over its own pipes, one JSON object per line:

    console -> child   {"traces": [...], "store": DIR, "out": DIR, "rebuild": false}
                       {"warm": true, "traces": [...]}   start Spark, run the ingest and the report on
                                        the journals' last lines (or sample lines), keep nothing
                       {"ping": true}   the Analytics view is open: do not exit for idleness
    child -> console   {"event": "plan", "new_bytes": N, "estimate": S or null}
                       {"event": "progress", "fraction": F, "text": T}
                       {"event": "done", "summary": {...}} | {"event": "error", "message": M}
                       {"event": "warm", "seconds": S, "bytes": B} | {"event": "pong"}

With --remote sc://HOST:PORT the child is a client of that Spark Connect server (a warm JVM that
outlives the console; `speedtui analytics-server`), else it runs an embedded Spark. The child
exits, and so frees the JVM's memory, after `idle` seconds without a request, or when the console
closes its stdin (also when the console dies). ``AnalyticsWorker`` is the console's side: it
starts the child when needed and runs one request at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from .common import PipelineError

DEFAULT_IDLE_SECONDS = 300.0


# ---------------------------------------------------------------------------------- the child
def child_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="speedtui-analytics-worker")
    ap.add_argument("--idle", type=float, default=DEFAULT_IDLE_SECONDS)
    ap.add_argument("--remote", default=None)
    args = ap.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)                       # our stdout (and the JVM's) is the log from here on
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(obj: dict) -> None:
        with lock:
            proto.write(json.dumps(obj) + "\n")
            proto.flush()

    spark = None
    try:
        while True:
            ready, _, _ = select.select([sys.stdin], [], [], args.idle)
            if not ready:
                print(f"idle for {args.idle:g}s: exiting to free the JVM's memory", file=sys.stderr)
                return 0
            line = sys.stdin.readline()
            if not line:
                return 0                # the console closed the pipe or died
            try:
                request = json.loads(line)
                if request.get("ping"):
                    send({"event": "pong"})
                    continue
                t0 = time.monotonic()
                spark = spark or _session(send, args.remote)
                if request.get("warm"):
                    warmed = _warm_up(spark, request.get("traces") or [])
                    send({"event": "warm", "seconds": round(time.monotonic() - t0, 3), "bytes": warmed})
                    continue
                summary = _analyse(spark, request, send)
                send({"event": "done", "summary": summary})
            except PipelineError as exc:
                send({"event": "error", "message": str(exc)})
            except Exception as exc:  # noqa: BLE001 - the console shows one sentence, the log has it all
                import traceback
                traceback.print_exc()
                send({"event": "error", "message": f"the analysis failed ({type(exc).__name__}: "
                                                   f"{str(exc).splitlines()[0] if str(exc) else ''}); "
                                                   f"see the log."})
    finally:
        if spark is not None:
            spark.stop()


def _session(send, remote: str | None):
    from .session import make_spark, require_modules
    require_modules(remote=bool(remote))
    send({"event": "progress", "fraction": 0.0, "text": "connecting to Spark" if remote else "starting Spark"})
    return make_spark(os.environ.get("SPEED_SPARK_MASTER"), app_name="speedtui-console-analytics", remote=remote)


#: a few records of the kinds the ingest tags: running its query on them compiles what a real
#: analysis runs (the generated code depends on the query, not on the data)
WARM_LINES = (
    '{"ts":1,"node":"a","dir":"out","peer":"b","type":"SPC_REQUEST","seq":1,"size":9,"outcome":"sent",'
    '"requestId":"r","service":"s"}',
    '{"ts":2,"node":"a","dir":"in","peer":"b","type":"SPC_RESPONSE","seq":1,"size":9,"outcome":"accepted",'
    '"requestId":"r","service":"s","status":"SUCCESS","latencyMs":1.0}',
    '{"ts":3,"node":"b","dir":"in","peer":"a","type":"MESSAGE","seq":2,"size":9,"outcome":"rejected","reason":"bad_tag"}',
    '{"kind":"lease","ts":4,"node":"a","subject":"a","event":"registered"}',
    '{"kind":"message","ts":5,"node":"a","dir":"out","peer":"b","event":"sent","chunks":2}',
    '{"kind":"health","ts":6,"node":"a","event":"ok"}',
    "torn",
)


#: how often the warm-up runs the job (the ingest, then the report) on its sample: a first run
#: compiles the query's plan and code; the JVM's JIT compiles the parser's and the aggregation's hot
#: paths only after many thousands of records (measured: an ingest of 8.7 MB right after a warm-up of
#: WARM_LINES alone took 5.8 s, about four times a warm one)
WARM_RUNS = 3
#: the sample: the last whole lines of each journal of the environment, as they are (their fields,
#: kinds and sizes are what the first real analysis parses: the first analysis of 5M records with
#: 1 % new took 2.7-3.3 s after a warm-up on WARM_LINES, 1.8-1.9 s after one on this sample; A B B A)
WARM_BYTES_PER_JOURNAL = 1 << 20
WARM_BYTES = 16 << 20
#: without journals, WARM_LINES repeated this often
WARM_REPEAT = 10_000


def _warm_up(spark, traces: list[str]) -> int:
    """Run the ingest and the report WARM_RUNS times on a sample of the journals in `traces` (or on
    WARM_LINES repeated when there are none), in a directory of its own removed after: the plan, its
    code and the JIT. Nothing of it is kept. Returns the sample's bytes."""
    import shutil
    import tempfile
    from .batches import ingest
    from .journals import bundle, stage_tails
    from .report import build_report, write_tables
    d = tempfile.mkdtemp(prefix="speed-warm-")
    try:
        sample = os.path.join(d, "sample")
        staged = bundle(stage_tails(traces, sample, WARM_BYTES_PER_JOURNAL, WARM_BYTES), sample)  # as a run reads
        if not staged:
            staged = [os.path.join(d, "warm.jsonl")]
            with open(staged[0], "w", encoding="utf-8") as f:
                for i in range(WARM_REPEAT):
                    f.write("\n".join(line.replace('"r"', f'"r{i}"') for line in WARM_LINES) + "\n")
        for _ in range(WARM_RUNS):
            _parts, tables = build_report([ingest(spark, staged)])
            write_tables(tables, os.path.join(d, "out"), spark)
        return sum(os.path.getsize(p) for p in staged)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _analyse(spark, request: dict, send) -> dict:
    from .job import run_incremental
    from .store import estimate_seconds

    def on_plan(plan, state):
        send({"event": "plan", "new_bytes": plan.new_bytes, "estimate": estimate_seconds(plan, state)})

    return run_incremental(request["traces"], request["store"], request["out"], spark=spark,
                           rebuild=bool(request.get("rebuild")), on_plan=on_plan,
                           progress=lambda f, t: send({"event": "progress", "fraction": f, "text": t}))


# ---------------------------------------------------------------------------------- the console
class AnalyticsWorker:
    """Runs analyses in the child; the child (and its JVM) is started on the first analysis and
    reused until it exits after `idle` seconds without one."""

    def __init__(self, log_path: str, idle_seconds: float = DEFAULT_IDLE_SECONDS, remote: str | None = None):
        self.log_path = log_path
        self.idle_seconds = idle_seconds
        self.remote = remote            # a Spark Connect URL, else the child runs an embedded Spark
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()        # one request at a time
        self._state = threading.Lock()       # `proc` and `_closed` together: no child starts after close
        self._closed = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _start(self) -> subprocess.Popen:
        os.makedirs(os.path.dirname(self.log_path), mode=0o700, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            log.write(f"--- analytics worker started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            cmd = [sys.executable, "-m", "speedtui.pipeline.worker", "--idle", str(self.idle_seconds)]
            if self.remote:
                cmd += ["--remote", self.remote]
            return subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, close_fds=True,
                start_new_session=True, env=env, text=True, encoding="utf-8", bufsize=1)
        finally:
            log.close()

    def analyse(self, request: dict, on_event: Callable[[dict], Any] | None = None) -> dict:
        """Run one analysis; on_event gets each plan/progress event. PipelineError on failure."""
        return self._request(request, "done", on_event)["summary"]

    def warm(self, traces: list[str] | None = None) -> float:
        """Start the child and its Spark now, and run the job on a sample of the journal
        directories `traces` (seconds it took)."""
        return float(self._request({"warm": True, "traces": list(traces or [])}, "warm")["seconds"])

    def ping(self, timeout: float = 5.0) -> bool:
        """Tell a running idle child not to exit for idleness (it restarts its idle time); False if
        no child runs or one is busy (a busy child does not idle)."""
        if not self.alive or not self._lock.acquire(timeout=timeout):
            return False
        try:
            self.proc.stdin.write(json.dumps({"ping": True}) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.strip() and json.loads(line).get("event") == "pong":
                    return True
            return False
        except (OSError, ValueError):
            return False
        finally:
            self._lock.release()

    def _request(self, request: dict, final: str, on_event: Callable[[dict], Any] | None = None) -> dict:
        with self._lock:
            for attempt in (1, 2):
                with self._state:
                    if self._closed:  # (a request the closing ended must not start a new child)
                        raise PipelineError("the analytics worker was closed.")
                    if not self.alive:
                        self.proc = self._start()
                try:
                    self.proc.stdin.write(json.dumps(request) + "\n")
                    self.proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    self._reap()
                    continue            # it was exiting for idleness: start a new one
                for line in self.proc.stdout:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if event.get("event") == final:
                        return event
                    if event.get("event") == "error":
                        raise PipelineError(event.get("message") or "the analysis failed.")
                    if on_event is not None:
                        on_event(event)
                self._reap()
                if attempt == 2:
                    break
            raise PipelineError(f"the analytics worker stopped unexpectedly; see {self.log_path}.")

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self.proc = None

    def close(self, timeout: float = 15.0) -> None:
        """Ask the child to exit (its stdin closes; it stops Spark); if it has not after `timeout`,
        or at once when it is in the middle of a request (a warm-up, an analysis: it would read
        its stdin only after it), end its process group (the child and its JVM): SIGTERM, then
        SIGKILL. No request starts a child after this."""
        with self._state:
            self._closed, proc = True, self.proc
        if proc is None:
            return
        if self._lock.locked():
            timeout = 0.0
        try:
            proc.stdin.close()
        except OSError:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL, None):
            try:
                proc.wait(timeout=timeout)
                break
            except subprocess.TimeoutExpired:
                if sig is None:
                    break
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                timeout = 5.0
        deadline = time.monotonic() + 10.0           # the JVM ends when its stdin (the child) closes
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.1)
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.stdout.close()
        except OSError:
            pass
        self.proc = None


def _group_alive(pgid: int) -> bool:
    """A process of the group still runs (zombies do not count: an orphan's zombie waits for a
    PID 1 that may never reap it)."""
    if not os.path.isdir("/proc"):
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


if __name__ == "__main__":
    sys.exit(child_main())
