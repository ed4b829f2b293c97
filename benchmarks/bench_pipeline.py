"""Benchmark: the Spark trace analytics against the pure-Python reference, in one run.

    python benchmarks/bench_pipeline.py --records 5M --rounds 3 --data-dir /work/speed-bench
    python benchmarks/bench_pipeline.py --records 50M --rounds 1 --modes warm --data-dir /work/speed-bench
    python benchmarks/bench_pipeline.py --tiny                          # ~10k records, a smoke run

Modes (each prints medians, the ratio against the reference measured in the same run, and the
1-minute load average of every timing; runs of the compared variants are interleaved):

  warm         reference.analyze vs run_pipeline on one warm SparkSession (one warm-up run first)
  process      the whole processes: `python -m speedtui.pipeline.reference` vs `speedtui analyze
               --traces` (JVM start-up included)
  incremental  the store: a first ingest of the journals, then, each round, 1 % more records
               appended to the journals and analysed again; against the warm full analysis

Journals are simulated (16 nodes, 60 minutes, 0.01 % malformed) and deleted afterwards unless
--keep; --reuse takes journals kept by an earlier run with the same arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from speedtui.pipeline.reference import analyze  # noqa: E402
from speedtui.pipeline.simulate import simulate  # noqa: E402


def parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def load() -> float:
    return os.getloadavg()[0]


def timed(fn) -> tuple[float, float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, load(), out


def report(name: str, runs: dict[str, list], floor: str) -> None:
    """runs: variant -> [(seconds, load)]; prints medians and ratios to the floor variant."""
    base = statistics.median(s for s, _ in runs[floor])
    print(f"\n{name}")
    print("| variant | runs (s) | median s | reference / variant | load averages |")
    print("|---|---|---:|---:|---|")
    for variant, rs in runs.items():
        med = statistics.median(s for s, _ in rs)
        print(f"| {variant} | {', '.join(f'{s:.1f}' for s, _ in rs)} | {med:.1f} | "
              f"{base / med:.2f}x | {', '.join(f'{ld:.1f}' for _, ld in rs)} |", flush=True)


def check(ref: dict, got: dict) -> None:
    for key in ("totals", "top_talkers", "rejections", "traffic_over_time", "availability", "other_records",
                "messages", "threats", "durable"):
        if ref[key] != got[key]:
            print(f"#   WARNING: {key} differs between the reference and Spark", flush=True)


def mode_warm(args, data, out):
    from speedtui.pipeline.job import make_spark, run_pipeline
    spark = make_spark(args.master)
    try:
        if not args.no_warmup:
            t, ld, _ = timed(lambda: run_pipeline([data], out, spark=spark))
            print(f"# warm-up run of the Spark job: {t:.1f}s (load {ld:.1f})", flush=True)
        runs: dict[str, list] = {"reference.analyze": [], "run_pipeline (warm)": []}
        for i in range(args.rounds):
            order = [("reference.analyze", lambda: analyze([data])["summary"]),
                     ("run_pipeline (warm)", lambda: run_pipeline([data], out, spark=spark))]
            got = {}
            for name, fn in (order if i % 2 == 0 else order[::-1]):
                t, ld, got[name] = timed(fn)
                runs[name].append((t, ld))
                print(f"#   round {i + 1} {name}: {t:.1f}s (load {ld:.1f})", flush=True)
            check(got["reference.analyze"], got["run_pipeline (warm)"])
        report(f"warm session, {args.records_text} records", runs, "reference.analyze")
        return statistics.median(s for s, _ in runs["run_pipeline (warm)"])
    finally:
        spark.stop()


def mode_process(args, data, out):
    env = dict(os.environ, PYTHONPATH=REPO)
    ref = [sys.executable, "-m", "speedtui.pipeline.reference", "--traces", data]
    job = [sys.executable, "-m", "speedtui", "analyze", "--traces", data, "--out", out, "--quiet"]
    if args.master:
        job += ["--master", args.master]
    runs: dict[str, list] = {"reference process": [], "speedtui analyze process": []}
    for i in range(args.rounds):
        order = [("reference process", ref), ("speedtui analyze process", job)]
        for name, cmd in (order if i % 2 == 0 else order[::-1]):
            t, ld, p = timed(lambda: subprocess.run(cmd, env=env, capture_output=True, text=True))
            if p.returncode != 0:
                raise SystemExit(f"{name} failed: {p.stderr[-2000:]}")
            runs[name].append((t, ld))
            print(f"#   round {i + 1} {name}: {t:.1f}s (load {ld:.1f})", flush=True)
    report(f"whole processes, {args.records_text} records", runs, "reference process")


def mode_incremental(args, data, out, full_warm: float | None):
    """Journals grow by 1 % of their records per round; each round is analysed from the store."""
    from speedtui.pipeline.job import make_spark, run_incremental, run_pipeline
    live, store = os.path.join(args.data_dir, "live"), os.path.join(args.data_dir, "store")
    shutil.rmtree(live, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(live)
    names = sorted(n for n in os.listdir(data) if not n.startswith((".", "_")))
    sizes = {n: os.path.getsize(os.path.join(data, n)) for n in names}
    share = 1.0 / (1.0 + 0.01 * args.rounds)             # the journals end 1 % per round later
    cut = {}
    for n in names:                                      # live journals: the first `share` of each
        with open(os.path.join(data, n), "rb") as src:
            src.seek(int(sizes[n] * share))
            src.readline()
            cut[n] = src.tell()
        with open(os.path.join(data, n), "rb") as src, open(os.path.join(live, n), "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
            dst.truncate(cut[n])
    spark = make_spark(args.master)
    try:
        if full_warm is None:
            run_pipeline([live], out, spark=spark)       # warm the session up
            full_warm, _, _ = timed(lambda: run_pipeline([live], out, spark=spark))
        t_first, ld, s = timed(lambda: run_incremental([live], store, out, spark=spark))
        print(f"# first ingest into the store: {t_first:.1f}s (load {ld:.1f}), "
              f"{s['totals']['records']:,} records", flush=True)
        runs: dict[str, list] = {"full analysis (warm)": [(full_warm, load())], "after +1 % records": []}
        for i in range(args.rounds):
            for n in names:                              # append the next 1 %
                step = int(sizes[n] * 0.01 * share)
                with open(os.path.join(data, n), "rb") as src, open(os.path.join(live, n), "ab") as dst:
                    src.seek(cut[n] + step)
                    src.readline()
                    end = src.tell()
                    src.seek(cut[n])
                    dst.write(src.read(end - cut[n]))
                    cut[n] = end
            t, ld, s = timed(lambda: run_incremental([live], store, out, spark=spark))
            runs["after +1 % records"].append((t, ld))
            print(f"#   round {i + 1}: +{s['ingest']['new_bytes'] / 1e6:.1f} MB, {t:.2f}s (load {ld:.1f}); "
                  f"ingest {s['ingest'].get('ingest_seconds')}s, report {s['ingest'].get('report_seconds')}s",
                  flush=True)
        check(analyze([live])["summary"], s)
        report(f"incremental store, {args.records_text} records (ratio: full / incremental)", runs,
               "full analysis (warm)")
    finally:
        spark.stop()
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", default="1M", help="records to simulate, e.g. 5M, 50M")
    ap.add_argument("--tiny", action="store_true", help="10k records, one round (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="warm,process,incremental")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default=None, help="Spark master (default: local[*])")
    ap.add_argument("--data-dir", default=os.path.join("/tmp", "speed-bench"))
    ap.add_argument("--no-warmup", action="store_true", help="no warm-up run (for 50M: it would double the time)")
    ap.add_argument("--keep", action="store_true", help="keep the simulated journals")
    ap.add_argument("--reuse", action="store_true", help="reuse journals kept by an earlier --keep run")
    args = ap.parse_args(argv)
    if args.tiny:
        args.records, args.rounds = "10k", 1
    n = parse_size(args.records)
    args.records_text = args.records
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {load():.1f}", flush=True)
    data = os.path.join(args.data_dir, f"traces-{n}-{args.nodes}-{args.seed}-{args.minutes:g}")
    out = os.path.join(args.data_dir, "report")
    if not (args.reuse and os.path.isdir(data)):
        shutil.rmtree(data, ignore_errors=True)
        st = simulate(data, nodes=args.nodes, records=n, seed=args.seed, minutes=args.minutes, malformed=0.0001)
        print(f"# simulated {st['records']:,} records, {st['bytes'] / 1e9:.2f} GB in {st['seconds']:.0f}s",
              flush=True)
    full_warm = None
    try:
        if "warm" in modes:
            full_warm = mode_warm(args, data, out)
        if "process" in modes:
            mode_process(args, data, out)
        if "incremental" in modes:
            mode_incremental(args, data, out, full_warm)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    print(json.dumps({"records": n, "load_at_end": round(load(), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
