"""Where an SPC round trip's time goes: timestamps at each stage of `call("srv", "echo")` between
two processes (time.perf_counter is CLOCK_MONOTONIC, comparable across processes on Linux).

    python -m benchmarks.rtt_stages [--calls 1500] [--size BYTES]

The stages are marked by wrapping the runtime's methods in both processes; the wrappers add about
a microsecond each. Prints the median of each stage over all calls.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time

STAGES = ["c_sent", "s_woke", "s_checked", "s_service", "s_reply", "s_replied", "c_woke", "c_resolved", "end"]
LABELS = {
    "c_sent": "caller: call_async until the request is in the inbox",
    "s_woke": "callee: inotify wake-up",
    "s_checked": "callee: read, open, check, replay (protocol thread)",
    "s_service": "callee: hand-off to the SPC pool, policy checks",
    "s_reply": "callee: service ran, response built",
    "s_replied": "callee: response sealed and delivered",
    "c_woke": "caller: inotify wake-up",
    "c_resolved": "caller: read, open, check (protocol thread)",
    "end": "caller: hand-off from the protocol thread to the calling thread",
}


def instrument(marks: list) -> None:
    import speed_runtime.inotify as inotify
    import speed_runtime.node.calls as calls
    import speed_runtime.node.sender as sender

    def wrap(owner, name, before=None, after=None):
        original = getattr(owner, name)

        def wrapper(self, *args, **kwargs):
            if before:
                marks.append((before(args) if callable(before) else before, time.perf_counter()))
            result = original(self, *args, **kwargs)
            if after:
                marks.append((after(args, result) if callable(after) else after, time.perf_counter()))
            return result
        setattr(owner, name, wrapper)

    from speed_runtime.core.envelope import type_name

    wrap(inotify.Watch, "wait", after=lambda a, r: "woke" if r[0] else "idle")
    wrap(sender.Sender, "send", before=lambda a: "send_start:" + type_name(a[1]),
         after=lambda a, r: "send_done:" + type_name(a[1]))
    wrap(calls.Callee, "submit", before="serve")
    wrap(calls.Caller, "resolve", before="resolve")


def callee(root: str, key: str, conn) -> None:
    marks: list = []
    instrument(marks)
    from speed_runtime import Node

    def echo(args):
        marks.append(("service", time.perf_counter()))
        return args

    with Node(root, key, "srv", allow=["cli"]) as n:
        n.register("echo", echo)
        conn.send("ready")
        conn.recv()
        conn.send(marks)


def first(marks, name, lo, hi):
    return next((t for n, t in marks if n == name and lo <= t <= hi), None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--size", type=int, default=0, help="bytes of payload string in the arguments")
    args = parser.parse_args(argv)
    from speed_runtime import Node, generate_key_file

    base = tempfile.mkdtemp(prefix="speedstages-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(base, 0o700)
    try:
        generate_key_file(base + "/k")
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=callee, args=(base + "/env", base + "/k", child))
        proc.start()
        assert parent.recv() == "ready"
        marks: list = []
        instrument(marks)
        spans, pad = [], "x" * args.size
        with Node(base + "/env", base + "/k", "cli", allow=["srv"]) as n:
            for i in range(300):
                n.call("srv", "echo", {"i": i})
            marks.clear()
            for i in range(args.calls):
                t0 = time.perf_counter()
                n.call("srv", "echo", {"i": i, "p": pad})
                spans.append((t0, time.perf_counter()))
            parent.send("stop")
            server = parent.recv()
        proc.join()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    for t0, t1 in spans:
        r = {"c_sent": first(marks, "send_done:SPC_REQUEST", t0, t1), "s_woke": first(server, "woke", t0, t1),
             "s_checked": first(server, "serve", t0, t1), "s_service": first(server, "service", t0, t1),
             "s_reply": first(server, "send_start:SPC_RESPONSE", t0, t1),
             "s_replied": first(server, "send_done:SPC_RESPONSE", t0, t1), "end": t1}
        r["c_woke"] = first(marks, "woke", r["s_replied"] or t1, t1)
        r["c_resolved"] = first(marks, "resolve", r["c_woke"] or t1, t1)
        if all(v is not None for v in r.values()):
            rows.append((t0, r))
    print(f"{len(rows)} calls; median round trip {statistics.median(r['end'] - t0 for t0, r in rows) * 1e6:.0f} µs")
    print("| stage | median µs |\n| --- | --- |")
    last = None
    for stage in STAGES:
        values = [(r[stage] - (t0 if last is None else r[last])) * 1e6 for t0, r in rows]
        print(f"| {LABELS[stage]} | {statistics.median(values):.0f} |")
        last = stage
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
