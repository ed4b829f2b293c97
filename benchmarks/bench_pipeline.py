"""Benchmark: the Spark trace analytics against the pure-Python reference and DuckDB, in one run.

    python benchmarks/bench_pipeline.py --records 5M --rounds 3 --connect --data-dir /tmp/speed-bench
    python benchmarks/bench_pipeline.py --records 50M --rounds 1 --modes warm --data-dir /tmp/speed-bench
    python benchmarks/bench_pipeline.py --tiny --connect                # ~10k records, a smoke run

Modes (each prints medians, the ratios against the reference and against DuckDB measured in the
same run, and the 1-minute load average of every timing; runs of the compared variants are
interleaved):

  warm         reference.analyze, run_pipeline on one warm embedded SparkSession (one warm-up run
               first), the same through a warm Spark Connect server (--connect), and DuckDB reading
               the same journals (`read_json`) and answering the same questions
  process      the whole processes: `python -m speedtui.pipeline.reference`, `speedtui analyze
               --traces --embedded` (JVM start-up included), the same with an AppCDS archive
               (SPEED_SPARK_CDS=1), and `speedtui analyze --traces --remote` against the running
               Connect server (--connect)
  incremental  the store: a first ingest of the journals, then, each round, 1 % more records
               appended to the journals and analysed again (embedded, and through Connect with
               --connect), against the warm full analysis and against DuckDB appending the same
               bytes to a persistent table and answering every question again

DuckDB answers: envelopes sent and their bytes, accepted, rejected, rejections per reason, the
traffic rows (source, target, type, minute), the top talkers, SPC calls and successes per (target,
service) and the lease records; the benchmark checks they equal Spark's (availability's session
rules and the extension tables are not asked of DuckDB: its ratio is, if anything, in its favour).

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


def report(name: str, runs: dict[str, list], floor: str, peer: str | None = None) -> None:
    """runs: variant -> [(seconds, load)]; prints medians, ratios to the floor variant and (peer)
    each variant's time over the peer's (DuckDB's)."""
    runs = {k: v for k, v in runs.items() if v}
    base = statistics.median(s for s, _ in runs[floor])
    peer_med = statistics.median(s for s, _ in runs[peer]) if peer in runs else None
    print(f"\n{name}")
    print(f"| variant | runs (s) | median s | {floor} / variant |" + (" variant / DuckDB |" if peer_med else "")
          + " load averages |")
    print("|---|---|---:|---:|" + ("---:|" if peer_med else "") + "---|")
    for variant, rs in runs.items():
        med = statistics.median(s for s, _ in rs)
        print(f"| {variant} | {', '.join(f'{s:.2f}' for s, _ in rs)} | {med:.2f} | {base / med:.2f}x |"
              + (f" {med / peer_med:.2f}x |" if peer_med else "")
              + f" {', '.join(f'{ld:.1f}' for _, ld in rs)} |", flush=True)


DUCK_COLUMNS = ("{kind: 'VARCHAR', ts: 'DOUBLE', node: 'VARCHAR', dir: 'VARCHAR', peer: 'VARCHAR', type: 'VARCHAR', "
                "size: 'BIGINT', outcome: 'VARCHAR', reason: 'VARCHAR', requestId: 'VARCHAR', service: 'VARCHAR', "
                "status: 'VARCHAR', subject: 'VARCHAR', event: 'VARCHAR'}")


def duck_read(paths: list[str]) -> str:
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    return (f"SELECT * FROM read_json({files}, format = 'newline_delimited', columns = {DUCK_COLUMNS}, "
            f"ignore_errors = true) WHERE ts IS NOT NULL AND ts >= 0 AND ts < 1e11 AND node IS NOT NULL")


def duck_answers(con) -> dict:
    """The questions asked of DuckDB over table j, in the summary's terms."""
    env = "(kind IS NULL OR kind = 'envelope') AND dir IS NOT NULL AND peer IS NOT NULL AND type IS NOT NULL " \
          "AND outcome IS NOT NULL"
    one = lambda q: con.execute(q).fetchall()  # noqa: E731
    sent, sent_bytes, accepted, rejected = one(f"""
        SELECT count(*) FILTER (dir = 'out' AND outcome = 'sent'),
               coalesce(sum(coalesce(size, 0)) FILTER (dir = 'out' AND outcome = 'sent'), 0),
               count(*) FILTER (dir = 'in' AND outcome = 'accepted'),
               count(*) FILTER (dir = 'in' AND outcome = 'rejected') FROM j WHERE {env}""")[0]
    by_reason = dict(one(f"""SELECT coalesce(reason, 'unknown'), count(*) FROM j
                             WHERE {env} AND dir = 'in' AND outcome = 'rejected' GROUP BY 1"""))
    traffic_rows = one(f"""SELECT count(*) FROM (SELECT DISTINCT node, peer, type, floor(ts / 60) FROM j
                           WHERE {env} AND dir = 'out' AND outcome = 'sent')""")[0][0]
    top = [list(r) for r in one(f"""SELECT node, peer, count(*) AS e, sum(coalesce(size, 0)) AS b FROM j
                                    WHERE {env} AND dir = 'out' AND outcome = 'sent' GROUP BY 1, 2
                                    ORDER BY e DESC, b DESC, node, peer LIMIT 10""")]
    spc = {(t, svc): [c, ok] for t, svc, c, ok in one(f"""
        WITH legs AS (
          SELECT node AS caller, peer AS target, coalesce(requestId, 'row' || CAST(rowid AS VARCHAR)) AS rid,
                 type = 'SPC_REQUEST' AS is_req, service, status, ts FROM j
          WHERE {env} AND ((dir = 'out' AND outcome = 'sent' AND type = 'SPC_REQUEST')
                        OR (dir = 'in' AND outcome = 'accepted' AND type = 'SPC_RESPONSE'))
        ), calls AS (
          SELECT target, coalesce(max(service) FILTER (is_req), max(service) FILTER (NOT is_req), '(unknown)') AS svc,
                 arg_min(status, ts) FILTER (NOT is_req) AS status
          FROM legs GROUP BY caller, target, rid
        )
        SELECT target, svc, count(*), count(*) FILTER (status = 'SUCCESS') FROM calls GROUP BY 1, 2""")}
    lease = one("SELECT count(*) FROM j WHERE kind = 'lease' AND subject IS NOT NULL AND event IS NOT NULL")[0][0]
    return {"envelopes_sent": sent, "bytes_sent": int(sent_bytes), "accepted": accepted, "rejected": rejected,
            "by_reason": by_reason, "traffic_rows": traffic_rows, "top": top, "spc": spc, "lease_records": lease}


def spark_answers(summary: dict, traffic_rows: int) -> dict:
    t = summary["totals"]
    return {"envelopes_sent": t["envelopes_sent"], "bytes_sent": t["bytes_sent"], "accepted": t["accepted"],
            "rejected": t["rejected"], "by_reason": summary["rejections"]["by_reason"], "traffic_rows": traffic_rows,
            "top": [[r["source"], r["target"], r["envelopes"], r["bytes"]] for r in summary["top_talkers"]],
            "spc": {(r["target"], r["service"]): [r["calls"], r["successes"]] for r in summary["spc"]},
            "lease_records": t["lease_records"]}


def check_duck(duck: dict, summary: dict, out: str) -> None:
    import pyarrow.parquet as pq
    rows = pq.read_table(os.path.join(out, "traffic")).num_rows
    got = spark_answers(summary, rows)
    bad = [k for k in duck if duck[k] != got[k]]
    print(f"#   DuckDB and Spark agree on {', '.join(duck)}" if not bad else
          f"#   WARNING: DuckDB and Spark differ on {', '.join(bad)}", flush=True)


def duck_full(data: str) -> dict:
    import duckdb
    con = duckdb.connect()
    try:
        con.execute(f"CREATE TABLE j AS {duck_read(journal_paths(data))}")
        return duck_answers(con)
    finally:
        con.close()


def journal_paths(d: str) -> list[str]:
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if not n.startswith((".", "_"))]


def start_connect(args):
    """A local Spark Connect server for the run (speedtui analytics-server's code), or None."""
    if not args.connect:
        return None
    import socket
    from speedtui.pipeline import server
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t, ld, st = timed(lambda: server.start(port=port, directory=os.path.join(args.data_dir, "connect-server")))
    print(f"# Spark Connect server up in {t:.1f}s (load {ld:.1f}) at {st['url']}", flush=True)
    return st["url"]


def check(ref: dict, got: dict) -> None:
    for key in ("totals", "top_talkers", "rejections", "traffic_over_time", "availability", "other_records",
                "messages", "threats", "durable"):
        if ref[key] != got[key]:
            print(f"#   WARNING: {key} differs between the reference and Spark", flush=True)


def mode_warm(args, data, out, url):
    from speedtui.pipeline.job import make_spark, run_pipeline
    spark = make_spark(args.master)
    remote = make_spark(remote=url) if url else None
    out_remote = out + "-connect"
    try:
        if not args.no_warmup:
            t, ld, _ = timed(lambda: run_pipeline([data], out, spark=spark))
            print(f"# warm-up run of the Spark job: {t:.1f}s (load {ld:.1f})", flush=True)
            if remote is not None:
                t, ld, _ = timed(lambda: run_pipeline([data], out_remote, spark=remote))
                print(f"# warm-up run through Spark Connect: {t:.1f}s (load {ld:.1f})", flush=True)
        variants = [("reference.analyze", lambda: analyze([data])["summary"]),
                    ("run_pipeline (warm)", lambda: run_pipeline([data], out, spark=spark)),
                    ("DuckDB read_json + queries", lambda: duck_full(data))]
        if args.skip_reference:
            variants.pop(0)
        if remote is not None:
            variants.insert(2 - args.skip_reference, ("run_pipeline through Connect (warm)", lambda: run_pipeline([data], out_remote,
                                                                                             spark=remote)))
        runs: dict[str, list] = {name: [] for name, _ in variants}
        for i in range(args.rounds):
            got = {}
            for name, fn in (variants if i % 2 == 0 else variants[::-1]):
                t, ld, got[name] = timed(fn)
                runs[name].append((t, ld))
                print(f"#   round {i + 1} {name}: {t:.1f}s (load {ld:.1f})", flush=True)
            if not args.skip_reference:
                check(got["reference.analyze"], got["run_pipeline (warm)"])
            if remote is not None and not args.skip_reference:
                check(got["reference.analyze"], got["run_pipeline through Connect (warm)"])
            check_duck(got["DuckDB read_json + queries"], got["run_pipeline (warm)"], out)
        report(f"warm session, {args.records_text} records", runs,
               "run_pipeline (warm)" if args.skip_reference else "reference.analyze", "DuckDB read_json + queries")
        return statistics.median(s for s, _ in runs["run_pipeline (warm)"])
    finally:
        spark.stop()
        shutil.rmtree(out_remote, ignore_errors=True)


def mode_process(args, data, out, url):
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("SPEED_ANALYTICS_REMOTE", None)
    cds_env = dict(env, SPEED_SPARK_CDS="1", XDG_CACHE_HOME=os.path.join(args.data_dir, "cache"))
    ref = [sys.executable, "-m", "speedtui.pipeline.reference", "--traces", data]
    job = [sys.executable, "-m", "speedtui", "analyze", "--traces", data, "--out", out, "--quiet"]
    embedded = job + (["--master", args.master] if args.master else ["--embedded"])
    variants = [("reference process", ref, env), ("speedtui analyze process (embedded)", embedded, env),
                ("speedtui analyze process (embedded, AppCDS)", embedded, cds_env)]
    if url:
        variants.append(("speedtui analyze --remote process (running Connect server)", job + ["--remote", url], env))
    shutil.rmtree(cds_env["XDG_CACHE_HOME"], ignore_errors=True)
    t, ld, _ = timed(lambda: subprocess.run(embedded, env=cds_env, capture_output=True, text=True))
    print(f"# first AppCDS run (writes the archive at its exit): {t:.1f}s (load {ld:.1f})", flush=True)
    runs: dict[str, list] = {name: [] for name, _, _ in variants}
    for i in range(args.rounds):
        for name, cmd, e in (variants if i % 2 == 0 else variants[::-1]):
            t, ld, p = timed(lambda: subprocess.run(cmd, env=e, capture_output=True, text=True))
            if p.returncode != 0:
                raise SystemExit(f"{name} failed: {p.stderr[-2000:]}")
            runs[name].append((t, ld))
            print(f"#   round {i + 1} {name}: {t:.1f}s (load {ld:.1f})", flush=True)
    report(f"whole processes, {args.records_text} records", runs, "reference process")


def mode_incremental(args, data, out, full_warm: float | None, url):
    """Journals grow by 1 % of their records per round; each round is analysed from the store
    (embedded, and through Connect), and DuckDB appends the same bytes to a persistent table."""
    import duckdb
    from speedtui.pipeline.job import make_spark, run_incremental, run_pipeline
    live, delta = os.path.join(args.data_dir, "live"), os.path.join(args.data_dir, "delta")
    stores = {"embedded": os.path.join(args.data_dir, "store"), "connect": os.path.join(args.data_dir, "store-c")}
    duck_file = os.path.join(args.data_dir, "duck.db")
    for p in (live, delta, *stores.values(), duck_file):
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.unlink(p))
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
    sessions = {"embedded": spark}
    if url:
        sessions["connect"] = make_spark(remote=url)
    con = duckdb.connect(duck_file)
    try:
        if full_warm is None:
            run_pipeline([live], out, spark=spark)       # warm the session up
            full_warm, _, _ = timed(lambda: run_pipeline([live], out, spark=spark))
        for how, session in sessions.items():
            t_first, ld, s = timed(lambda: run_incremental([live], stores[how], out, spark=session))
            print(f"# first ingest into the store ({how}): {t_first:.1f}s (load {ld:.1f}), "
                  f"{s['totals']['records']:,} records", flush=True)
        t, ld, _ = timed(lambda: con.execute(f"CREATE TABLE j AS {duck_read(journal_paths(live))}"))
        print(f"# DuckDB persistent table of the live journals: {t:.1f}s (load {ld:.1f})", flush=True)
        variants = {"after +1 % records (embedded)": "embedded", "after +1 % records (Connect)": "connect",
                    "DuckDB: append +1 % to the table, every query again": "duck"}
        runs: dict[str, list] = {"full analysis (warm)": [(full_warm, load())], **{v: [] for v in variants}}
        for i in range(args.rounds):
            shutil.rmtree(delta, ignore_errors=True)
            os.makedirs(delta)
            for n in names:                              # append the next 1 %
                step = int(sizes[n] * 0.01 * share)
                with open(os.path.join(data, n), "rb") as src, open(os.path.join(live, n), "ab") as dst, \
                        open(os.path.join(delta, n), "wb") as dd:
                    src.seek(cut[n] + step)
                    src.readline()
                    end = src.tell()
                    src.seek(cut[n])
                    chunk = src.read(end - cut[n])
                    dst.write(chunk)
                    dd.write(chunk)
                    cut[n] = end
            order = list(variants.items())
            for name, how in (order if i % 2 == 0 else order[::-1]):
                if how == "duck":
                    def duck_round():
                        con.execute(f"INSERT INTO j {duck_read(journal_paths(delta))}")
                        return duck_answers(con)
                    t, ld, duck = timed(duck_round)
                elif how in sessions:
                    t, ld, s = timed(lambda: run_incremental([live], stores[how], out, spark=sessions[how]))
                    print(f"#   round {i + 1} {how}: +{s['ingest']['new_bytes'] / 1e6:.1f} MB; "
                          f"ingest {s['ingest'].get('ingest_seconds')}s, report {s['ingest'].get('report_seconds')}s",
                          flush=True)
                else:
                    continue
                runs[name].append((t, ld))
                print(f"#   round {i + 1} {name}: {t:.2f}s (load {ld:.1f})", flush=True)
        check(analyze([live])["summary"], s)
        check_duck(duck, s, out)
        report(f"incremental store, {args.records_text} records (ratio: full / incremental)", runs,
               "full analysis (warm)", "DuckDB: append +1 % to the table, every query again")
    finally:
        con.close()
        spark.stop()
        for p in (live, delta, *stores.values(), duck_file):
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.unlink(p))


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
    ap.add_argument("--connect", action="store_true",
                    help="also run every mode through a local Spark Connect server started for the run")
    ap.add_argument("--data-dir", default=os.path.join("/tmp", "speed-bench"))
    ap.add_argument("--full-warm", type=float, default=None,
                    help="incremental mode: the warm full analysis's seconds from an earlier warm run of the same "
                         "journals (else it is measured first)")
    ap.add_argument("--skip-reference", action="store_true",
                    help="warm mode without the reference (at 20M and more it takes minutes a round)")
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
    full_warm = args.full_warm
    url = start_connect(args)
    try:
        if "warm" in modes:
            full_warm = mode_warm(args, data, out, url)
        if "process" in modes:
            mode_process(args, data, out, url)
        if "incremental" in modes:
            mode_incremental(args, data, out, full_warm, url)
    finally:
        if url:
            from speedtui.pipeline import server
            server.stop(os.path.join(args.data_dir, "connect-server"))
        shutil.rmtree(out, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    print(json.dumps({"records": n, "load_at_end": round(load(), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
