"""How many of the project's functions, files and threads one operator-visible flow passes
through: the measure of the seams between parts (docs/ARCHITECTURE.md, "Two flows, counted").

    python -m benchmarks.flow_hops [--flow envelope|grant|both] [--runs 3] [--list]

Everything runs in one process with a profiler on every thread (set before any thread starts);
while a flow runs, every call of a function defined under speed_runtime/ or speedtui/ is recorded
with the project function that called it (the nearest project frame up its stack, on its thread):

- **envelope**: a `speed send` process (the sender, not counted) delivers one MESSAGE to `billing`
  (a traced node in this process); counted from then until billing's handler has the message and
  the console's Traces view (the real app, driven by its Pilot) has drawn the accepted record.
- **grant**: the operator grants `gateway` on `billing`, a node the console did not start that
  trusts the operator key: counted from the grant dialog's confirmation until billing applied it,
  the console shows the new grant and the operator was told.

Background work (timers, heartbeats, registry scans) runs during a flow too; so each run first
records an idle window of IDLE_SECONDS with everything up, and what the idle window also called is
left out: the figures are what the flow made the project do. Printed per flow (the median run): `functions` (distinct project functions called), `hops` (distinct caller → callee
pairs of project functions, the caller being the nearest project frame up the stack, on the same
thread), `crossings` (the hops from one file to another: the seams a flow crosses), `files`,
`threads` (that ran any of them). `--list` prints the functions per file.
Comprehensions and generator expressions are not counted (they are not a hop between parts).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

PROJECT = str(Path(__file__).resolve().parent.parent)
PACKAGES = tuple(os.path.join(PROJECT, p) + os.sep for p in ("speed_runtime", "speedtui"))
_INNER = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")
IDLE_SECONDS = 1.5  # longer than every periodic timer of the node and the console


class CallRecorder:
    """A profile function for every thread; records project calls while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.calls: set[tuple[str, str]] = set()       # (file, qualname)
        self.edges: set[tuple[tuple[str, str] | None, tuple[str, str]]] = set()
        self.threads: dict[tuple[str, str], set[str]] = defaultdict(set)  # function -> threads that ran it
        self._lock = threading.Lock()
        self._idle: tuple[set, set] = (set(), set())

    def install(self) -> None:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)

    def uninstall(self) -> None:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)

    def reset(self) -> None:
        with self._lock:
            self.calls, self.edges, self.threads = set(), set(), defaultdict(set)

    async def idle_then_start(self, pilot) -> None:
        """Record an idle window (kept as the background to leave out), then start recording."""
        self.reset()
        self.on = True
        await pilot.pause(IDLE_SECONDS)
        self.on = False
        self._idle = (self.calls, self.edges)
        self.reset()
        self.on = True

    @staticmethod
    def _ident(frame) -> tuple[str, str] | None:
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGES) or code.co_name in _INNER:
            return None
        return os.path.relpath(code.co_filename, PROJECT), code.co_qualname

    def _profile(self, frame, event, arg) -> None:
        if not self.on or event != "call":
            return
        me = self._ident(frame)
        if me is None:
            return
        caller, back = None, frame.f_back
        while back is not None and caller is None:
            caller = self._ident(back)
            back = back.f_back
        with self._lock:
            self.calls.add(me)
            self.edges.add((caller, me))
            self.threads[me].add(threading.current_thread().name.rstrip("0123456789-"))

    def figures(self) -> dict:
        idle_calls, idle_edges = self._idle
        calls = self.calls - idle_calls
        edges = self.edges - idle_edges
        files = {f for f, _ in calls}
        threads = set().union(*(self.threads[c] for c in calls)) if calls else set()
        crossings = {(a, b) for a, b in edges if a is not None and a[0] != b[0]}
        return {"functions": len(calls), "hops": len(edges), "crossings": len(crossings), "files": len(files),
                "threads": len(threads), "calls": sorted(calls), "thread_names": sorted(threads)}


async def _until(pilot, cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def _console(root: Path, key_path: Path, work: Path, **kwargs):
    from speedtui.paths import Paths
    from speedtui.services import runtime as rt
    from speedtui.ui.app import make_app

    return make_app(root, rt.load_key(key_path), paths=Paths(work / "config", work / "data"), pace_gc=False,
                    **kwargs)


async def envelope_flow(recorder: CallRecorder, work: Path) -> dict:
    from speed_runtime import Node, generate_key_file

    root, key_path = work / "env", work / "speed.key"
    generate_key_file(key_path)
    got: list = []
    with Node(root, key_path, "billing", allow=["gateway"], trace=True) as billing:
        billing.on_message(got.append)
        app = _console(root, key_path, work, initial_view="traces")
        async with app.run_test(size=(120, 36)) as pilot:
            await _until(pilot, lambda: "billing" in app.state.registry.by_name(), "billing in the console")
            table = app.query_one("#traces-table")
            shown = len(table.rows)
            await recorder.idle_then_start(pilot)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "speed_runtime", "send", "billing", '{"invoice": 7}', "--as", "gateway",
                "--dir", str(root), "--key", str(key_path), cwd=PROJECT,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"speed send failed: {err.decode().strip()}")
            await _until(pilot, lambda: got and any(r.outcome == "accepted" and r.peer == "gateway"
                                                    for r in app.state.traces.ring) and len(table.rows) > shown,
                         "the accepted record in the Traces view")
            await pilot.pause(0.05)  # the table paints the new row
            recorder.on = False
    return recorder.figures()


async def grant_flow(recorder: CallRecorder, work: Path) -> dict:
    from speed_runtime import Node, generate_key_file
    from speed_runtime.control import generate_operator_key
    from speedtui.services.operator import resolve_operator_key

    root, key_path, op_path = work / "env", work / "speed.key", work / "operator.key"
    generate_key_file(key_path)
    op = generate_operator_key(op_path)
    with Node(root, key_path, "billing", trace=True, features=["control"], operators=[op.public_text]) as billing, \
            Node(root, key_path, "gateway", trace=True):
        app = _console(root, key_path, work, operator=resolve_operator_key(op_path))
        async with app.run_test(size=(120, 36), notifications=True) as pilot:
            await _until(pilot, lambda: {"billing", "gateway"} <= set(app.state.registry.by_name()), "the nodes")
            app.controller.grants.open("billing", "gateway")
            await _until(pilot, lambda: app.screen.query("#gr-go"), "the grant dialog")
            told = len(app._notifications)
            await recorder.idle_then_start(pilot)
            await pilot.click("#gr-go")
            await _until(pilot, lambda: "gateway" in billing.allowed
                         and "gateway" in app.state.registry.by_name()["billing"].allow
                         and len(app._notifications) > told, "the grant applied, shown and told")
            await pilot.pause(0.05)
            recorder.on = False
    return recorder.figures()


FLOWS = {"envelope": envelope_flow, "grant": grant_flow}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flow", choices=[*FLOWS, "both"], default="both")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--list", action="store_true", help="print the functions of the median run, per file")
    args = ap.parse_args(argv)
    recorder = CallRecorder()
    recorder.install()
    try:
        for name in (FLOWS if args.flow == "both" else [args.flow]):
            runs = []
            for _ in range(args.runs):
                work = Path(tempfile.mkdtemp(prefix="speed-hops-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
                os.chmod(work, 0o700)
                try:
                    runs.append(asyncio.run(FLOWS[name](recorder, work)))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
            best = sorted(runs, key=lambda r: r["hops"])[len(runs) // 2]  # the median run
            print(f"{name}: functions {best['functions']}, hops {best['hops']}, crossings {best['crossings']}, "
                  f"files {best['files']}, threads {best['threads']} ({', '.join(best['thread_names'])})   "
                  f"[runs: hops {sorted(r['hops'] for r in runs)}, crossings {sorted(r['crossings'] for r in runs)}]")
            if args.list:
                by_file = defaultdict(list)
                for file, qual in best["calls"]:
                    by_file[file].append(qual)
                for file in sorted(by_file):
                    print(f"  {file}: {', '.join(sorted(by_file[file]))}")
    finally:
        recorder.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
