"""Console responsiveness under load: 500 registry entries + 2,000 traced envelopes per second.

A separate writer process renews 500 registry entries (temporary file + rename, like nodes do)
and appends trace records to 20 journals at the target rate.  The console runs headless
(Textual run_test, 120x36); a key event is posted the way the terminal driver posts it, and the
time until the screen is recomposed with the moved cursor is measured.

The machine is shared and noisy, so the run alternates windows: the writer runs ("load") or
holds still ("quiet": same 500 entries and full trace ring on screen, nothing arriving).  Keys
pressed in quiet windows are the same run's reference: what this machine gives a console with
nothing to do.  Memory (RSS), the trace ring and the garbage-collector pacer are sampled each
second; the memory verdict compares the first and the last minute.

    python benchmarks/bench_console.py [--seconds 60] [--rate 2000] [--entries 500] [--window 10]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual import events  # noqa: E402

from speedtui.services import runtime as rt  # noqa: E402
from speedtui.ui.app import make_app  # noqa: E402
from speedtui.paths import Paths  # noqa: E402

JOURNALS = 20


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def entry(i: int, now: float) -> dict:
    rnd = random.Random(i)
    groups = rnd.sample(["edge", "finance", "analytics", "ops", "batch", "audit"], rnd.randint(0, 2))
    return {"name": f"node-{i:03d}", "id": f"{i:08x}-0000-4000-8000-000000000000", "pid": 100000 + i,
            "host": "bench-host", "status": "online", "startupTimestamp": now - 3600, "lastHeartbeat": now,
            "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1, "groups": groups,
            "allow": [f"node-{rnd.randrange(500):03d}" for _ in range(rnd.randint(0, 6))],
            "services": rnd.sample(["echo", "calculateTax", "sleep", "fail"], rnd.randint(0, 3)),
            "runtime": "bench/1", "counters": {"sent": i, "received": i}}


def writer(root: str, entries: int, rate: int, stop_at: float, quiet) -> None:
    reg = Path(root) / "speed_registry"
    tr = Path(root) / "speed_traces"
    files = [open(tr / f"node-{j:03d}.jsonl", "a") for j in range(JOURNALS)]
    env = base64.b64encode(os.urandom(240)).decode()
    seq = 0
    renew = 0
    tick = 0.05
    per_tick = max(1, int(rate * tick))
    next_t = time.monotonic()
    while time.time() < stop_at:
        if quiet.is_set():
            time.sleep(tick)
            next_t = time.monotonic()
            continue
        now = time.time()
        lines = [[] for _ in range(JOURNALS)]
        for k in range(per_tick):
            seq += 1
            j = seq % JOURNALS
            out = seq % 2 == 0
            rec = {"kind": "envelope", "ts": now, "node": f"node-{j:03d}", "dir": "out" if out else "in",
                   "peer": f"node-{(j + 1) % JOURNALS:03d}", "type": "SPC_REQUEST" if seq % 3 else "MESSAGE",
                   "seq": seq, "size": 316, "outcome": "sent" if out else ("rejected" if seq % 97 == 0 else "accepted"),
                   "requestId": f"{seq:032x}", "service": "echo"}
            if seq % 10 == 0:
                rec["envelope"] = env
            lines[j].append(json.dumps(rec, separators=(",", ":")))
        for j, ls in enumerate(lines):
            if ls:
                files[j].write("\n".join(ls) + "\n")
                files[j].flush()
        # renew ~1/5 of the entries per second (heartbeat 5 s), by temp file + rename
        for _ in range(max(1, entries // 5 // int(1 / tick))):
            i = renew % entries
            renew += 1
            tmp = reg / f".bench-{i}.tmp"
            tmp.write_text(json.dumps(entry(i, now)))
            os.replace(tmp, reg / f"node-{i:03d}.node")
        next_t += tick
        time.sleep(max(0.0, next_t - time.monotonic()))
    for f in files:
        f.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def measure_key(app, table, key: str) -> float:
    """Post a key like the driver does; time until the screen recomposes after the cursor moved."""
    screen = app.screen
    before = table.cursor
    stamp = {"t": None}
    orig = screen._compositor_refresh

    def wrapped(*a, **k):
        r = orig(*a, **k)
        if stamp["t"] is None and table.cursor != before:
            stamp["t"] = time.perf_counter()
        return r

    screen._compositor_refresh = wrapped
    t0 = time.perf_counter()
    app.post_message(events.Key(key, None))
    deadline = t0 + 5.0
    while stamp["t"] is None and time.perf_counter() < deadline:
        await asyncio.sleep(0.0005)
    screen._compositor_refresh = orig
    return ((stamp["t"] or time.perf_counter()) - t0) * 1000.0


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "median": round(statistics.median(xs), 1), "p90": round(pct(xs, 90), 1),
            "p99": round(pct(xs, 99), 1), "max": round(max(xs), 1)} if xs else {"n": 0}


async def sample_memory(app, t_start: float, out: list) -> None:
    while True:
        pacer = app.gc_pacer
        out.append((round(time.monotonic() - t_start, 1), round(rss_mb(), 1), len(app.traces.ring),
                    pacer.full_collections if pacer else None, round(pacer.last_pause_ms, 1) if pacer else None))
        await asyncio.sleep(1.0)


async def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="speed-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    root = work / "env"
    (root / "speed_registry").mkdir(parents=True, mode=0o700)
    (root / "speed_traces").mkdir(mode=0o700)
    os.chmod(root, 0o700)
    now = time.time()
    for i in range(args.entries):
        (root / "speed_registry" / f"node-{i:03d}.node").write_text(json.dumps(entry(i, now)))
    rt.generate_key_file(work / "k.key")
    key = rt.load_key(work / "k.key")
    stop_at = time.time() + args.seconds + 15
    quiet = mp.Event()
    proc = mp.Process(target=writer, args=(str(root), args.entries, args.rate, stop_at, quiet), daemon=True)
    proc.start()
    app = make_app(root, key, paths=Paths(work / "c", work / "d"), steady=True, trace_capacity=args.capacity,
                   pace_gc=not args.no_gc_pacer)
    res: dict = {"entries": args.entries, "rate": args.rate, "seconds": args.seconds, "window": args.window,
                 "gc_pacer": not args.no_gc_pacer}
    lat: dict[tuple[str, str], list[float]] = {(v, m): [] for v in ("traces", "leases") for m in ("load", "quiet")}
    mem: list = []
    # windows: traces under load, traces quiet, leases under load, leases quiet, again
    plan = [("traces", "load"), ("traces", "quiet"), ("leases", "load"), ("leases", "quiet")]
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(3.0)  # the ring fills and the pacer's first collection is behind us
            t_start = time.monotonic()
            sampler = asyncio.get_running_loop().create_task(sample_memory(app, t_start, mem))
            seen0 = app.traces.total
            loaded_s = 0.0
            w = 0
            i = 0
            while time.monotonic() - t_start < args.seconds:
                view, mode = plan[w % len(plan)]
                w += 1
                if mode == "quiet":
                    quiet.set()
                else:
                    quiet.clear()
                if app.active_view() != view:
                    app.action_show(view)
                await pilot.pause(1.0)  # let the switch (and the writer's stop or start) settle
                table = app.view_widget(view).query_one("#traces-table" if view == "traces" else "#leases-table")
                if app.focused is not table:
                    table.focus()
                    await pilot.pause(0.05)
                w_end = min(time.monotonic() + args.window, t_start + args.seconds)
                w_start = time.monotonic()
                while time.monotonic() < w_end:
                    key = "down" if i % 20 < 10 else "up"
                    if table.cursor == 0:
                        key = "down"
                    elif table.cursor >= len(table.rows) - 1:
                        key = "up"
                    lat[(view, mode)].append(await measure_key(app, table, key))
                    i += 1
                    await asyncio.sleep(0.15)
                if mode == "load":
                    loaded_s += time.monotonic() - w_start
            quiet.clear()
            sampler.cancel()
            res["records_per_loaded_s"] = round((app.traces.total - seen0) / max(loaded_s, 1e-9))
            res["registry_rows"] = len(app.registry.rows)
    finally:
        proc.terminate()
        proc.join(10)
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    for (view, mode), xs in lat.items():
        res[f"{view}_{mode}_key_ms"] = summary(xs)
    loaded = lat[("traces", "load")] + lat[("leases", "load")]
    calm = lat[("traces", "quiet")] + lat[("leases", "quiet")]
    res["all_load_key_ms"] = summary(loaded)
    res["all_quiet_key_ms"] = summary(calm)
    if loaded and calm:
        res["p99_load_over_quiet"] = round(pct(loaded, 99) / pct(calm, 99), 2)
        res["share_of_load_keys_over_100ms"] = round(sum(x > 100 for x in loaded) / len(loaded), 4)
    first = [m[1] for m in mem if m[0] < 60] or [m[1] for m in mem[:1]]
    last = [m[1] for m in mem if m[0] >= mem[-1][0] - 60] if mem else []
    res["rss_mb"] = {"first_minute_median": statistics.median(first) if first else None,
                     "last_minute_median": statistics.median(last) if last else None,
                     "max": max(m[1] for m in mem) if mem else None}
    res["ring"] = {"capacity": args.capacity, "last": mem[-1][2] if mem else None}
    if mem and mem[-1][3] is not None:
        res["gc_full_collections"] = mem[-1][3]
        res["gc_last_pause_ms"] = mem[-1][4]
    res["memory_over_time"] = [m[:3] for m in mem[:: max(1, len(mem) // 12)]]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--entries", type=int, default=500)
    ap.add_argument("--capacity", type=int, default=20000)
    ap.add_argument("--window", type=float, default=10.0, help="seconds per load or quiet window")
    ap.add_argument("--no-gc-pacer", action="store_true", help="leave CPython's collector alone (comparison)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
