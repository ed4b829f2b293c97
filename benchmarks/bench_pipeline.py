"""Benchmark: the Spark trace analytics (local[*]) against the pure-Python reference.

    python benchmarks/bench_pipeline.py --tiny                  # ~10k records, for CI
    python benchmarks/bench_pipeline.py --sizes 1M,10M          # default sizes: 1M
    nice python benchmarks/bench_pipeline.py --sizes 50M --data-dir /tmp/speed-bench

For each size it simulates journals (speedtui.pipeline.simulate, seeded), then times
reference.analyze and run_pipeline on the same files in the same process, checks that both
agree on the totals, and prints a table: records, seconds, records/s, the Spark/pure-Python
time ratio and the growth of each engine's time against the previous size.
Spark uses one session for all sizes; its start-up time is printed once and not in the table.
The 1-minute load average after each timing is printed too: on a shared machine it matters.
Generated data and reports are deleted afterwards unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from speedtui.pipeline.job import make_spark, run_pipeline  # noqa: E402
from speedtui.pipeline.reference import analyze  # noqa: E402
from speedtui.pipeline.simulate import simulate  # noqa: E402


def parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = 1
    if t.endswith("K"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("M"):
        mult, t = 1_000_000, t[:-1]
    return int(float(t) * mult)


def human(n: float) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(int(n))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1M", help="comma-separated record counts, e.g. 1M,10M,50M")
    ap.add_argument("--tiny", action="store_true", help="~10k records only (CI)")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--data-dir", default=os.path.join("/tmp", "speed-bench"))
    ap.add_argument("--keep", action="store_true", help="keep generated journals and reports")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse journals kept by an earlier --keep run with the same arguments")
    ap.add_argument("--no-reference", action="store_true", help="time Spark only")
    args = ap.parse_args(argv)
    sizes = [10_000] if args.tiny else [parse_size(s) for s in args.sizes.split(",") if s.strip()]

    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, master {args.master}", flush=True)
    t = time.time()
    spark = make_spark(args.master)
    print(f"# Spark {spark.version} session start-up: {time.time() - t:.1f}s", flush=True)
    rows = []
    try:
        for n in sizes:
            data = os.path.join(args.data_dir, f"traces-{n}")
            out = os.path.join(args.data_dir, f"report-{n}")
            stats_file = data + f"-{args.nodes}-{args.seed}-{args.minutes:g}.stats.json"
            if args.reuse and os.path.exists(stats_file) and os.path.isdir(data):
                with open(stats_file) as f:
                    stats = json.load(f)
                print(f"# {human(n)}: reusing {stats['records']:,} records, "
                      f"{stats['bytes'] / 1e9:.2f} GB in {data}", flush=True)
            else:
                shutil.rmtree(data, ignore_errors=True)
                stats = simulate(data, nodes=args.nodes, records=n, seed=args.seed,
                                 minutes=args.minutes, malformed=0.0001)
                print(f"# {human(n)}: simulated {stats['records']:,} records, "
                      f"{stats['bytes'] / 1e9:.2f} GB in {stats['seconds']:.1f}s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
                if args.keep:
                    with open(stats_file, "w") as f:
                        json.dump(stats, f)
            ref_s = ref_load = None
            ref = None
            if not args.no_reference:
                t = time.time()
                ref = analyze([data])["summary"]
                ref_s = time.time() - t
                ref_load = os.getloadavg()[0]
                print(f"#   reference: {ref_s:.1f}s (load average {ref_load:.1f})", flush=True)
            t = time.time()
            summary = run_pipeline([data], out, spark=spark)
            spark_s = time.time() - t
            spark_load = os.getloadavg()[0]
            print(f"#   spark:     {spark_s:.1f}s (load average {spark_load:.1f})", flush=True)
            if ref is not None and ref["totals"] != summary["totals"]:
                print("#   WARNING: totals differ between reference and Spark", flush=True)
            rows.append((stats["records"] + stats["malformed"], stats["bytes"], ref_s, spark_s,
                         ref_load, spark_load))
            if not args.keep:
                shutil.rmtree(data, ignore_errors=True)
                shutil.rmtree(out, ignore_errors=True)
                if os.path.exists(stats_file):
                    os.unlink(stats_file)
    finally:
        spark.stop()

    print()
    print("| records | GB | pure-Python s | pure-Python rec/s | Spark s | Spark rec/s | Spark/pure time | growth pure | growth Spark | load avg (pure, Spark) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for lines, size, ref_s, spark_s, ref_load, spark_load in rows:
        g_ref = g_spark = "-"
        if prev is not None:
            scale = lines / prev[0]
            if ref_s and prev[2]:
                g_ref = f"x{ref_s / prev[2]:.2f} for x{scale:.0f} records"
            g_spark = f"x{spark_s / prev[3]:.2f} for x{scale:.0f} records"
        print(f"| {lines:,} | {size / 1e9:.2f} | {ref_s:.1f} | {lines / ref_s:,.0f} | " if ref_s else
              f"| {lines:,} | {size / 1e9:.2f} | - | - | ", end="")
        print(f"{spark_s:.1f} | {lines / spark_s:,.0f} | "
              f"{(spark_s / ref_s) if ref_s else float('nan'):.2f} | {g_ref} | {g_spark} | "
              f"{ref_load if ref_load is not None else float('nan'):.1f}, {spark_load:.1f} |")
        prev = (lines, size, ref_s, spark_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
