"""Where an SPC round trip's time goes, stage by stage, beside a floor marked at the same stages,
with a budget per stage that adds up to 1.5 times the floor's round trip.

    python -m benchmarks.rtt_stages [--calls 1500] [--rounds 2] [--size 64]
    python -m benchmarks.rtt_stages --callgrind [--calls 200]     # instructions per stage

The runtime is `call("srv", "echo")` between two `Node` processes. The floor is two processes that
do each leg the cheapest way with the same primitives (`benchmarks/workers.py: FloorEnd`: seal,
write `tmp/`, `renameat2` into the peer's inbox; raw inotify, read, unlink, open), marked at the
same points: the request's rename into the callee's inbox, the inotify wake-up, the end of the
inbound read, open and checks, the start of the service, the start of the reply's send and its
rename, the caller's wake-up and read. A send's rename wakes the peer, which on this 2-core VM often
runs before the sender is back from the call, so a send's stage ends where its rename begins; what
the send does from there (the rename's return, the runtime's look at the target's entry, counters)
runs beside the peer's stages and is shown apart, below the round trip. The floor has no hand-off to a worker, no service and no hand-off back to the
calling thread: those stages are 0 there.

Timing: a round runs floor, runtime, runtime, floor (A B B A); each stage's figure is its mean over
the calls of all runs less the tenth with the slowest round trips (means add up to the round trip,
medians do not); the round trips are also given as medians. The marks wrap the runtime's methods (about a
microsecond each). `time.perf_counter` is CLOCK_MONOTONIC, comparable across processes.

`--callgrind` runs each variant once under valgrind's callgrind and counts, per thread, the
instructions between that thread's marks: each stage on the threads that do its work (the
hand-off on the callee: the protocol thread's submit and the worker's start; on the caller: the
protocol thread's resolve and the calling thread's return). A wake-up stage counts what the woken
thread runs from its previous mark (the end of its last loop step, the return from `poll`).
Threads that never mark (lease renewal, deadlines) and idle wake-ups are left out, so the counts
do not move with the machine's load; they leave out what waiting costs. Per stage: the mean
segment less the largest tenth.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks import callgrind

# (key, the runtime's stage, the floor's stage at the same marks, allowance beyond the floor as a
# fraction of the floor's round trip). The allowances add up to 0.5: the budget of each stage is
# the floor's time plus its allowance, so the budgets add up to 1.5 times the floor's round trip.
STAGES = [
    ("c_sent", "caller: call_async until the request's rename (judge, encode, seal, write tmp/)", "seal, write tmp/",
     0.06),
    ("s_woke", "callee: the rename and the inotify wake-up", "rename, inotify wake-up", 0.0),
    ("s_checked", "callee: read, open, check, replay (protocol thread)", "read, unlink, open", 0.06),
    ("s_service", "callee: hand-off to the SPC pool, policy checks", "—", 0.10),
    ("s_reply", "callee: service ran, response built and encoded", "—", 0.06),
    ("s_replied", "callee: the response until its rename (judge, seal, write tmp/)", "seal, write tmp/", 0.06),
    ("c_woke", "caller: the rename and the inotify wake-up", "rename, inotify wake-up", 0.0),
    ("c_resolved", "caller: read, open, check (protocol thread)", "read, unlink, open", 0.06),
    ("end", "caller: hand-off from the protocol thread to the calling thread", "—", 0.10),
]
KEYS = [key for key, *_ in STAGES]
# what a send does after its file is in the peer's inbox (the post-delivery look at the target's
# entry, counters, traces): beside the peer's next stages, not before them
AFTER = {"c_after": "caller: the request's send from the rename on (beside the callee)",
         "s_after": "callee: the response's send from the rename on (beside the caller)"}
assert abs(sum(share for *_, share in STAGES) - 0.5) < 1e-9


class Marks:
    """Named time stamps of one process; under callgrind each mark also dumps its count."""

    def __init__(self) -> None:
        self.stamps: list[tuple[str, float]] = []
        self._dump = callgrind.marker()

    def __call__(self, name: str) -> None:
        self.stamps.append((name, time.perf_counter()))
        if self._dump is not None:
            self._dump(name)


def wrap(owner, name, marks, before=None, after=None):
    original = getattr(owner, name)

    def wrapper(self, *args, **kwargs):
        if before:
            marks(before(args) if callable(before) else before)
        result = original(self, *args, **kwargs)
        if after:
            marks(after(args, result) if callable(after) else after)
        return result
    setattr(owner, name, wrapper)


def instrument(marks: Marks, runtime: bool) -> None:
    import speed_runtime.inotify as inotify

    wrap(inotify.Watch, "wait", marks, after=lambda a, r: "woke" if r[0] else "idle")
    import benchmarks.workers as workers
    import speed_runtime.transport as transport

    for owner in (transport, workers):  # the runtime's deliver() and the floor's send rename with it
        rename = owner._move_noreplace

        def renaming(name, src_fd, dst_fd, rename=rename):  # the peer may wake from here on
            marks("renaming")
            return rename(name, src_fd, dst_fd)
        owner._move_noreplace = renaming
    if runtime:
        import speed_runtime.node.calls as calls
        import speed_runtime.node.sender as sender
        from speed_runtime.core.envelope import type_name

        wrap(sender.Sender, "send", marks, before=lambda a: "send_start:" + type_name(a[1]),
             after=lambda a, r: "send_done:" + type_name(a[1]))

        wrap(calls.Callee, "submit", marks, before="serve", after="submitted")
        wrap(calls.Caller, "resolve", marks, before="resolve", after="resolved")


# ------------------------------------------------------------------ the two callees
def runtime_callee(root: str, key_path: str, conn) -> None:
    marks = Marks()
    instrument(marks, runtime=True)
    from speed_runtime import Node

    def echo(args):
        marks("service")
        return args

    with Node(root, key_path, "srv", allow=["cli"]) as n:
        n.register("echo", echo)
        conn.send("ready")
        conn.recv()
        conn.send(marks.stamps)


def floor_callee(root: str, key: bytes, conn) -> None:
    marks = Marks()
    instrument(marks, runtime=False)
    from benchmarks.workers import FloorEnd

    end = FloorEnd(root, "srv", "cli", key)
    conn.send("ready")
    while True:
        for payload in end.receive(0.5):
            if payload == b"stop":
                conn.send(marks.stamps)
                return
            marks("serve")
            marks("service")
            marks("send_start:SPC_RESPONSE")
            end.send(payload)
            marks("send_done:SPC_RESPONSE")


# ------------------------------------------------------------------ one run of a variant
def session(variant: str, base: str, key_path: str, calls: int, warm: int, size: int) -> tuple[list, list, list, dict]:
    """Run `calls` measured round trips; returns (spans, caller marks, callee marks, pids)."""
    root = tempfile.mkdtemp(prefix=f"{variant}-", dir=base)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    marks = Marks()
    for _ in range(CALIBRATION_MARKS):  # what a mark itself costs (counted under callgrind)
        marks("calibrate")
    instrument(marks, runtime=variant == "runtime")
    spans: list[tuple[float, float]] = []
    if variant == "floor":
        from benchmarks.workers import FloorEnd

        for name in ("srv", "cli"):
            for sub in ("inbox", "tmp"):
                os.makedirs(os.path.join(root, name, sub), mode=0o700)
        from speed_runtime.keyfile import load_key

        raw = load_key(key_path).raw
        proc = ctx.Process(target=floor_callee, args=(root, raw, child))
        proc.start()
        assert parent.recv() == "ready"
        end, payload = FloorEnd(root, "cli", "srv", raw), os.urandom(size)
        for i in range(warm + calls):
            t0 = time.perf_counter()
            if i >= warm:
                marks("call")
            end.send(payload)
            marks("send_done:SPC_REQUEST")
            while not end.receive(5.0):
                pass
            marks("resolve")
            if i >= warm:
                spans.append((t0, time.perf_counter()))
                marks("end")
        end.send(b"stop")
    else:
        from speed_runtime import Node

        proc = ctx.Process(target=runtime_callee, args=(root, key_path, child))
        proc.start()
        assert parent.recv() == "ready"
        pad = "x" * size
        with Node(root, key_path, "cli", allow=["srv"]) as n:
            for i in range(warm):
                n.call("srv", "echo", {"p": pad})
            for i in range(calls):
                t0 = time.perf_counter()
                marks("call")
                n.call("srv", "echo", {"p": pad})
                spans.append((t0, time.perf_counter()))
                marks("end")
            parent.send("stop")
            server = parent.recv()  # before this node closes: its closing must not wait on the callee
    if variant == "floor":
        server = parent.recv()
    proc.join()
    return spans, marks.stamps, server, {"caller": os.getpid(), "callee": proc.pid}


def first(marks, name, lo, hi):
    return next((t for n, t in marks if n == name and lo <= t <= hi), None)


def stage_times(spans, caller, callee) -> list[dict[str, float]]:
    """Per call, each stage's µs (calls missing a mark are left out)."""
    rows = []
    for t0, t1 in spans:
        r = {"c_sent": first(caller, "renaming", t0, t1)}
        r["s_woke"] = first(callee, "woke", r["c_sent"] or t1, t1)
        r["s_checked"] = first(callee, "serve", r["s_woke"] or t1, t1)
        r["s_service"] = first(callee, "service", r["s_checked"] or t1, t1)
        r["s_reply"] = first(callee, "send_start:SPC_RESPONSE", r["s_service"] or t1, t1)
        r["s_replied"] = first(callee, "renaming", r["s_reply"] or t1, t1)
        r["c_woke"] = first(caller, "woke", r["s_replied"] or t1, t1)
        r["c_resolved"] = first(caller, "resolve", r["c_woke"] or t1, t1)
        r["end"] = t1
        after = {"c_after": (r["c_sent"], first(caller, "send_done:SPC_REQUEST", r["c_sent"] or t1, t1)),
                 # the callee may still be at it when the call has returned
                 "s_after": (r["s_replied"], first(callee, "send_done:SPC_RESPONSE", r["s_replied"] or t1, t1 + 1))}
        if any(v is None for v in r.values()) or any(v is None for pair in after.values() for v in pair):
            continue
        row, last = {"round trip": (t1 - t0) * 1e6}, t0
        for key in KEYS:
            row[key] = (r[key] - last) * 1e6
            last = r[key]
        for key, (start, end) in after.items():
            row[key] = (end - start) * 1e6
        rows.append(row)
    return rows


# ------------------------------------------------------------------ instructions
# Under callgrind each thread counts apart: a mark dumps what its own thread executed since that
# thread's previous mark. So a segment belongs to the stage its closing mark ends, on the thread
# doing that stage's work; what threads without marks do (lease renewal, the deadline thread)
# and a protocol thread's idle wake-ups ("idle") are nobody's stage and left out.
CLOSES = {
    "caller": {"renaming": "c_sent", "send_done:SPC_REQUEST": "c_after", "woke": "c_woke", "resolve": "c_resolved",
               "resolved": "end", "end": "end"},
    "callee": {"woke": "s_woke", "serve": "s_checked", "submitted": "s_service", "service": "s_service",
               "send_start:SPC_RESPONSE": "s_reply", "renaming": "s_replied", "send_done:SPC_RESPONSE": "s_after"},
}
CALIBRATION_MARKS = 50


def stage_segments(threads: dict, closes: dict[str, str], calls: int, per_mark: float) -> list[tuple[str, list[float]]]:
    """[(stage, [instructions of each segment]), ...]: per thread of one process and mark that
    closes a stage, that thread's last `calls` segments closed by it (the measured calls come last),
    less a mark's cost."""
    out: list[tuple[str, list[float]]] = []
    for sequence in threads.values():
        by_mark: dict[str, list[float]] = {}
        pending = 0
        for name, count in sequence:
            pending += count
            if name in closes:
                by_mark.setdefault(name, []).append(pending - per_mark)
            if name in closes or name == "idle" or name == "calibrate" or name == "call":
                pending = 0  # closed, or idle or set-up work that is no stage's
        out += [(closes[name], segments[-calls:]) for name, segments in by_mark.items()]
    return out


def count_instructions(variant: str, calls: int, warm: int, size: int) -> dict[str, float]:
    """Instructions per stage of `variant`, from one run under callgrind: per stage the sum over
    its threads of the mean segment less the TRIM largest."""
    directory = tempfile.mkdtemp(prefix="speed-callgrind-")
    try:
        callgrind.run(["-m", "benchmarks.rtt_stages", "--inner", variant, "--calls", str(calls), "--warm", str(warm),
                       "--size", str(size), "--pids", os.path.join(directory, "pids.json")], directory,
                      separate_threads=True)
        with open(os.path.join(directory, "pids.json"), encoding="utf-8") as f:
            pids = json.load(f)
        counted = callgrind.dumps(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    per_mark = statistics.median(n for (pid, _), marks in counted.items() if pid == pids["caller"]
                                 for name, n in marks if name == "calibrate")
    out = {key: 0.0 for key in KEYS + list(AFTER)}
    for side in ("caller", "callee"):
        threads = {key: marks for key, marks in counted.items() if key[0] == pids[side]}
        for stage, segments in stage_segments(threads, CLOSES[side], calls, per_mark):
            kept = sorted(segments)[:max(1, int(len(segments) * (1 - TRIM)))]
            out[stage] += statistics.fmean(kept) * len(segments) / calls  # a stage may span threads: add them
    out["round trip"] = sum(out[k] for k in KEYS)
    out["per mark"] = per_mark
    return out


TRIM = 0.10  # the slowest tenth of the calls: the shared machine's hiccups, garbage collections


def trimmed_means(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per stage, the mean over the calls less the TRIM with the largest total (the stages of a
    call add up to its total, so these means add up too, unlike medians)."""
    total = (lambda row: row["round trip"]) if rows and "round trip" in rows[0] else (lambda row: sum(row.values()))
    kept = sorted(rows, key=total)[:max(1, int(len(rows) * (1 - TRIM)))]
    return {key: statistics.fmean(row[key] for row in kept) for key in kept[0]}


# ------------------------------------------------------------------ the table
def table(floor: dict[str, float], runtime: dict[str, float], unit: str, scale: float = 1.0) -> str:
    total = floor["round trip"]
    lines = [f"| stage (runtime) | floor at the same marks | floor {unit} | runtime {unit} | budget {unit} | "
             "runtime − budget |", "| --- | --- | --- | --- | --- | --- |"]
    budget_sum = 0.0
    for key, label, floor_label, share in STAGES:
        budget = floor[key] + share * total
        budget_sum += budget
        over = runtime[key] - budget
        lines.append(f"| {label} | {floor_label} | {floor[key] / scale:,.0f} | {runtime[key] / scale:,.0f} | "
                     f"{budget / scale:,.0f} | {'+' if over > 0 else ''}{over / scale:,.0f} |")
    lines.append(f"| **round trip** (sum of the stages) | | {sum(floor[k] for k in KEYS) / scale:,.0f} | "
                 f"{sum(runtime[k] for k in KEYS) / scale:,.0f} | {budget_sum / scale:,.0f} (1.5×) | "
                 f"{(sum(runtime[k] for k in KEYS) - budget_sum) / scale:+,.0f} |")
    for key, label in AFTER.items():
        lines.append(f"| {label} | — | {floor[key] / scale:,.0f} | {runtime[key] / scale:,.0f} | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=None, help="measured round trips per run (1500; 200 under "
                                                                 "--callgrind)")
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds (floor, runtime, runtime, floor)")
    parser.add_argument("--size", type=int, default=64, help="payload bytes (the runtime: a string of that "
                                                             "many characters in the arguments)")
    parser.add_argument("--warm", type=int, default=None, help="unmeasured round trips first (300; 50 under "
                                                               "--callgrind)")
    parser.add_argument("--callgrind", action="store_true", help="count instructions per stage instead")
    parser.add_argument("--inner", choices=["floor", "runtime"], help=argparse.SUPPRESS)
    parser.add_argument("--pids", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    calls = args.calls or (200 if args.callgrind or args.inner else 1500)
    warm = args.warm if args.warm is not None else (50 if args.callgrind or args.inner else 300)
    from speed_runtime.core import accel

    if args.inner:  # one variant, inside a callgrind run
        base = tempfile.mkdtemp(prefix="speedstages-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            from speed_runtime import generate_key_file

            generate_key_file(base + "/k")
            _, _, _, pids = session(args.inner, base, base + "/k", calls, warm, args.size)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        with open(args.pids, "w", encoding="utf-8") as f:
            json.dump(pids, f)
        return 0
    if args.callgrind:
        callgrind.require()
        floor = count_instructions("floor", calls, warm, args.size)
        runtime = count_instructions("runtime", calls, warm, args.size)
        print(f"instructions per stage (thousands), means over {calls} calls after {warm} less the {TRIM:.0%} "
              f"largest, less {floor['per mark']:,.0f} per mark; per-envelope work {accel.FORM}; round trip: floor "
              f"{floor['round trip']:,.0f}, runtime {runtime['round trip']:,.0f} "
              f"({runtime['round trip'] / floor['round trip']:.2f}×)")
        print(table(floor, runtime, "k instr.", 1000.0))
        return 0
    from speed_runtime import generate_key_file

    base = tempfile.mkdtemp(prefix="speedstages-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(base, 0o700)
    runs: dict[str, list] = {"floor": [], "runtime": []}
    medians: dict[str, list[float]] = {"floor": [], "runtime": []}
    load = [os.getloadavg()[0]]
    try:
        generate_key_file(base + "/k")
        for r in range(args.rounds):
            for variant in ("floor", "runtime", "runtime", "floor"):
                spans, caller, callee, _ = session(variant, base, base + "/k", calls, warm, args.size)
                rows = stage_times(spans, caller, callee)
                runs[variant].append(rows)
                print(f"round {r + 1}: {variant}: {len(rows)} of {calls} calls marked, median round trip "
                      f"{statistics.median(x['round trip'] for x in rows):.0f} µs", file=sys.stderr)
                medians[variant].append(statistics.median(x["round trip"] for x in rows))
        load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    floor, runtime = (trimmed_means([row for rows in runs[v] for row in rows]) for v in ("floor", "runtime"))
    rtt = {v: statistics.median(m) for v, m in medians.items()}
    print(f"{args.rounds} A B B A round(s) of {calls} calls, {args.size} B; per-envelope work {accel.FORM}; load "
          f"average {load[0]:.1f} → {load[-1]:.1f}; median round trip floor {rtt['floor']:.0f} µs, runtime "
          f"{rtt['runtime']:.0f} µs ({rtt['runtime'] / rtt['floor']:.2f}×); stages: means over the calls less the "
          f"{TRIM:.0%} slowest (they add up)")
    print(table(floor, runtime, "µs"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
