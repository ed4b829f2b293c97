"""argparse subcommands of the trace analytics: ``analyze``, ``analytics-server`` and ``simulate-traces``.

    from speedtui.pipeline.commands import add_subcommands
    add_subcommands(subparsers)      # each sets func=fn, fn(args) -> int exit code

User errors print one sentence on stderr (``error: ...``) and return 2; no tracebacks.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

DEFAULT_ROOT = "/dev/shm/speed"
DEFAULT_OUT = "./speed-report"


def default_root() -> str:
    return os.environ.get("SPEED_DIR") or DEFAULT_ROOT


def env_locations(root: str) -> tuple[str, str, str]:
    """(report, store, log) of the environment ROOT in the console's data directory: the console
    and `speedtui analyze` share them, and no environment sees another's."""
    from ..paths import Paths
    env = Paths.default().env_dir(root)
    return str(env / "analytics"), str(env / "analytics-store"), str(env / "analytics.log")


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="analyse trace journals with Spark and write a report",
        description="Analyse SPEED trace journals with Spark: Parquet tables + summary.json. "
                    "By default what is new in ROOT/speed_traces is added to the environment's "
                    "incremental store and the report is made from the store; --traces, "
                    "--full, --since and --until analyse every line of the journals instead.")
    p.add_argument("--traces", nargs="+", action="extend", metavar="PATH", default=None,
                   help="analyse exactly these journal files or directories (any URI Spark "
                        f"reads; report in --out, default {DEFAULT_OUT}); no store")
    p.add_argument("--dir", metavar="ROOT", default=None,
                   help=f"communication directory (default: $SPEED_DIR or {DEFAULT_ROOT})")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="report directory (default: the environment's, in the console's data "
                        f"directory; {DEFAULT_OUT} with --traces)")
    p.add_argument("--store", metavar="DIR", default=None,
                   help="incremental store (default: the environment's, in the data directory)")
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild the store from the journals as they are now")
    p.add_argument("--full", action="store_true",
                   help="analyse every line of ROOT/speed_traces without the store")
    p.add_argument("--master", metavar="URL", default=None,
                   help="Spark master URL for an embedded driver (default: local[*])")
    p.add_argument("--remote", metavar="sc://HOST:PORT", default=None,
                   help="run the job through this Spark Connect server (default: $SPEED_ANALYTICS_REMOTE, "
                        "else a running `speedtui analytics-server`, else an embedded Spark)")
    p.add_argument("--embedded", action="store_true",
                   help="use an embedded Spark even when a server is configured or running")
    p.add_argument("--since", metavar="TIME", default=None,
                   help="only records at or after TIME (ISO 8601 or epoch seconds)")
    p.add_argument("--until", metavar="TIME", default=None,
                   help="only records before TIME (ISO 8601 or epoch seconds)")
    p.add_argument("--quiet", action="store_true",
                   help="print the result only: no progress, and Spark's and Java's own output goes to the "
                        "environment's analytics log")
    p.set_defaults(func=cmd_analyze)

    a = subparsers.add_parser(
        "analytics-server", help="start, stop or check a local Spark Connect server for the analytics",
        description="A Spark Connect server from the installed pyspark, bound to 127.0.0.1, its log in the "
                    "console's data directory: `speedtui analyze` and the console use it while it runs, "
                    "so no analysis pays the JVM's start and warm-up.")
    a.add_argument("action", choices=("start", "stop", "status"))
    a.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default 15002)")
    a.add_argument("--master", metavar="URL", default="local[*]", help="the server's Spark master (default local[*])")
    a.set_defaults(func=cmd_server)

    s = subparsers.add_parser(
        "simulate-traces", help="write realistic simulated trace journals",
        description="Write seeded, realistic SPEED trace journals (one <node>.jsonl per node).")
    s.add_argument("--out", metavar="DIR", required=True, help="directory for the journals")
    s.add_argument("--nodes", type=int, default=8, metavar="N")
    s.add_argument("--records", type=int, default=100_000, metavar="M")
    s.add_argument("--seed", type=int, default=0, metavar="S")
    s.add_argument("--minutes", type=float, default=60.0, help="simulated duration (default 60)")
    s.add_argument("--start", default=None, metavar="TIME",
                   help="start time (ISO 8601 or epoch seconds; default 2025-06-15T15:06:40Z)")
    s.add_argument("--malformed", type=float, default=0.0, metavar="FRACTION",
                   help="add this fraction of torn/invalid lines (e.g. 0.001)")
    s.set_defaults(func=cmd_simulate)


@contextlib.contextmanager
def output_to(log: str | None):
    """With a log path (--quiet): while the job runs, this process's stdout and stderr (file
    descriptors 1 and 2, which the JVM it starts inherits: its "Using incubator modules" and
    "restricted mode" warnings are written there, past log4j) go to the environment's analytics
    log; the result and the error sentences are printed after, on the terminal."""
    if log is None:
        yield
        return
    os.makedirs(os.path.dirname(log), mode=0o700, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _err(msg: str) -> int:
    """Print the error sentence, its control characters and newlines escaped (it may hold a journal's
    name or other text a member wrote), and return exit status 2."""
    from .common import visible
    print(f"error: {visible(msg)}", file=sys.stderr)
    return 2


class _StderrProgress:
    def __init__(self) -> None:
        self.last_text = None
        self.last_time = 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, frac: float, text: str) -> None:
        now = time.monotonic()
        if text == self.last_text or (now - self.last_time < 1.0 and frac < 1.0 and not self.tty):
            return
        self.last_text, self.last_time = text, now
        from .common import visible
        line = f"[{frac * 100:5.1f}%] {visible(text)}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line + ("\n" if frac >= 1.0 else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def choose_remote(remote: str | None, master: str | None = None, embedded: bool = False) -> str | None:
    """The Spark Connect URL an analysis uses: the one given, else $SPEED_ANALYTICS_REMOTE, else a
    running `speedtui analytics-server`; None (an embedded Spark) with --embedded or a --master."""
    if remote:
        return remote
    if embedded or master:
        return None
    if os.environ.get("SPEED_ANALYTICS_REMOTE"):
        return os.environ["SPEED_ANALYTICS_REMOTE"]
    from .server import running_url
    return running_url()


def cmd_analyze(args) -> int:
    from .common import PipelineError
    from .session import require_modules
    try:
        if args.remote and (args.master or args.embedded):
            return _err("--remote runs the job on the server: leave out --master and --embedded.")
        remote = choose_remote(args.remote, args.master, args.embedded)
        require_modules(remote=bool(remote))
        from .job import check_java, format_summary, parse_time, run_incremental, run_pipeline
        since, until = parse_time(args.since), parse_time(args.until)
        root = os.path.abspath(args.dir or default_root())
        traces = args.traces or [os.path.join(root, "speed_traces")]
        for t in traces:
            if "://" not in t and not os.path.exists(t):
                return _err(f"trace path {os.path.abspath(t)} does not exist "
                            f"(give --traces PATH or --dir ROOT).")
        direct = bool(args.traces or args.full or since is not None or until is not None)
        if direct and (args.rebuild or args.store):
            return _err("--rebuild and --store go with the incremental store: leave out --traces, "
                        "--full, --since and --until.")
        report, store, log = env_locations(root)
        out = args.out or (DEFAULT_OUT if args.traces else report)
        if not remote:
            check_java()
        progress = None if args.quiet else _StderrProgress()
        with output_to(log if args.quiet else None):
            if direct:
                summary = run_pipeline(traces, out, master=args.master, since=since, until=until,
                                       progress=progress, remote=remote)
            else:
                summary = run_incremental(traces, args.store or store, out, master=args.master,
                                          progress=progress, rebuild=args.rebuild, remote=remote)
    except PipelineError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        _err("interrupted.")
        return 130
    print(format_summary(summary))
    return 0


def cmd_server(args) -> int:
    from . import server
    from .common import PipelineError
    from .session import require_modules
    try:
        if args.action == "start":
            require_modules()
            st = server.start(port=args.port or server.DEFAULT_PORT, master=args.master)
            print(f"analytics server running at {st['url']} (pid {st['pid']}); log {st['log']}")
        elif args.action == "stop":
            st = server.stop()
            print("no analytics server was started." if st is None else
                  f"analytics server at {st['url']} stopped.")
        else:
            st = server.status()
            if st is None:
                print("no analytics server was started (`speedtui analytics-server start`).")
                return 1
            state = "running" if st["running"] else "not running (it died or was ended; start it again)"
            print(f"analytics server {st['url']} (pid {st['pid']}): {state}; log {st['log']}")
            return 0 if st["running"] else 1
    except PipelineError as exc:
        return _err(str(exc))
    return 0


def cmd_simulate(args) -> int:
    from .job import PipelineError, parse_time
    from .simulate import simulate
    if args.nodes < 2:
        return _err("--nodes must be at least 2.")
    if args.records < 0:
        return _err("--records must not be negative.")
    if not (0.0 <= args.malformed < 0.5):
        return _err("--malformed must be a fraction between 0 and 0.5, e.g. 0.001.")
    if args.minutes <= 0:
        return _err("--minutes must be positive.")
    try:
        start = parse_time(args.start)
        os.makedirs(args.out, exist_ok=True)
        stats = simulate(args.out, nodes=args.nodes, records=args.records, seed=args.seed,
                         start_ts=start, minutes=args.minutes, malformed=args.malformed)
    except PipelineError as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot write journals in {args.out}: {exc.strerror or exc}.")
    print(f"wrote {stats['records']:,} records (+{stats['malformed']:,} malformed lines) for "
          f"{stats['files']} nodes, {stats['bytes'] / 1e6:,.1f} MB, in {stats['out_dir']} "
          f"({stats['seconds']:.1f}s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone driver (`python -m speedtui.pipeline.commands analyze ...`)."""
    ap = argparse.ArgumentParser(prog="speedtui")
    sub = ap.add_subparsers(dest="command", required=True)
    add_subcommands(sub)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
