"""The argparse subcommands: clean one-sentence errors (subprocess), simulate-traces, and an
analyze run in-process on the test session's Spark."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from speedtui.pipeline.commands import add_subcommands

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = ("import sys, argparse; from speedtui.pipeline.commands import add_subcommands; "
          "p = argparse.ArgumentParser(prog='speedtui'); s = p.add_subparsers(required=True); "
          "add_subcommands(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")


def run_cli(args, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True,
                          env=e, timeout=120, cwd=REPO)


def test_analyze_without_java_is_one_clear_sentence(tmp_path):
    (tmp_path / "t").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)          # the venv only: no java
    env["PYTHONPATH"] = REPO
    p = subprocess.run([sys.executable, "-c", DRIVER, "analyze", "--traces", str(tmp_path / "t"),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env,
                       timeout=120, cwd=REPO)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0
    assert "install Java 17+" in p.stderr and "openjdk-17-jre-headless" in p.stderr


def test_analyze_missing_default_traces(tmp_path):
    p = run_cli(["analyze", "--out", str(tmp_path / "o")], env={"SPEED_DIR": str(tmp_path / "nope")})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{tmp_path}/nope/speed_traces does not exist" in p.stderr


def test_analyze_bad_time(tmp_path):
    p = run_cli(["analyze", "--traces", str(tmp_path), "--since", "last tuesday"])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "ISO 8601" in p.stderr


def test_simulate_traces_command(tmp_path):
    out = tmp_path / "sim"
    p = run_cli(["simulate-traces", "--out", str(out), "--nodes", "3", "--records", "2000",
                 "--seed", "3", "--malformed", "0.01"])
    assert p.returncode == 0, p.stderr
    assert "wrote" in p.stdout
    assert sorted(os.listdir(out)) == ["billing.jsonl", "gateway.jsonl", "reports.jsonl"]
    p = run_cli(["simulate-traces", "--out", str(out), "--nodes", "1"])
    assert p.returncode == 2 and "--nodes must be at least 2" in p.stderr
    p = run_cli(["simulate-traces", "--out", str(out), "--malformed", "2"])
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_analyze_command_in_process(spark, tmp_path, capsys):
    """analyze on hand journals + a 100-call latency journal; it reuses the active SparkSession
    (the test one) and leaves it running. Also checks percentiles worked out by hand."""
    from pipeline_journals import write_hand_journals, write_latency_journal
    root = tmp_path / "root"
    write_hand_journals(root / "speed_traces")
    big = write_latency_journal(tmp_path / "p.jsonl")
    ap = argparse.ArgumentParser()
    add_subcommands(ap.add_subparsers(required=True))
    args = ap.parse_args(["analyze", "--dir", str(root), "--traces", str(root / "speed_traces"), big,
                          "--out", str(tmp_path / "rep")])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    assert "malformed lines skipped: 9" in out and "summary.json" in out
    assert "%]" in err                                   # progress on stderr
    doc = json.load(open(tmp_path / "rep" / "summary.json"))
    assert doc["totals"]["nodes"] == 4                   # a, b, c + p
    (row,) = [r for r in doc["spc"] if r["service"] == "big"]
    # 100 latencies 1..100: nearest rank ceil(p*n) -> 50, 95, 99 (exact below 10000 values)
    assert (row["p50_ms"], row["p95_ms"], row["p99_ms"]) == (50.0, 95.0, 99.0)
    assert row["success_rate"] == 1.0 and row["calls"] == 100
    assert spark.range(3).count() == 3                    # session still alive


def test_java_home_without_java(tmp_path):
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "nojava"), PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-c", DRIVER, "analyze", "--traces", str(tmp_path),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env,
                       timeout=120, cwd=REPO)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "has no bin/java" in p.stderr and "Java 17+" in p.stderr


def test_unwritable_out(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "file").write_text("x")
    p = run_cli(["analyze", "--traces", str(tmp_path / "t"), "--out", str(tmp_path / "file" / "rep")])
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "cannot create report directory" in p.stderr


def test_analyze_quiet_prints_the_result_only_with_a_real_local_spark(tmp_path):
    """A JVM the pipeline starts writes its own warnings (\"WARNING: Using incubator modules\",
    \"restricted mode\") to the stderr it inherits, past log4j: with --quiet they go to the
    environment's analytics log, and the terminal gets the result and nothing else."""
    from speedtui.environments.fixture import build

    root, _key = build(tmp_path / "root")
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "SPEED_ANALYTICS_REMOTE"}
    env.update(XDG_DATA_HOME=str(data), PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-c", DRIVER, "analyze", "--dir", str(root), "--embedded", "--quiet"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.startswith("records ") and "SPC calls" in p.stdout and "WARN" not in p.stdout
    logs = list(data.rglob("analytics.log"))
    assert len(logs) == 1 and oct(logs[0].stat().st_mode & 0o777) == "0o600"
