"""CI runs the benchmark command in its tiny mode only, to prove it still works (no timing asserts)."""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_benchmark_command_tiny_mode_prints_every_measurement(tmp_path):
    out = tmp_path / "BENCH.md"
    result = subprocess.run([sys.executable, "-m", "benchmarks.run", "--tiny", "--write", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    for row in ("round trip, floor, 64 B", "round trip, zmq, 64 B", "round trip, mp.connection, 64 B",
                "round trip, unix socket, 64 B", "round trip, dirq, 64 B", "round trip, persist-queue, 64 B",
                "round trip, runtime SPC, 64 B", "round trip, runtime SPC, journals",
                "one-way rate, floor, 64 B", "one-way rate, dirq, 64 B", "one-way rate, persist-queue, 64 B",
                "one-way rate, runtime 1 sender, 64 B",
                "one-way rate, runtime 8 senders, 64 B", "one-way rate, runtime 1 sender, journals, 64 B",
                "SPC round trip ≤ 1.5× floor", "journals cost ≤ 15% of throughput"):
        assert row in result.stdout, row
    medians = [float(m) for m in re.findall(r"\| (\d+) µs \|", result.stdout)]
    rates = [float(m.replace(",", "")) for m in re.findall(r"\| ([\d,]+) /s \|", result.stdout)]
    assert len(medians) >= 6 and all(m > 0 for m in medians)
    assert len(rates) == 6 and all(r > 0 for r in rates)
    page = out.read_text()
    assert page.startswith("# Benchmarks") and "## Method" in page and "SPC round trip" in page
    out.write_text(page.replace("## Method", "## Analysis\nkept by hand\n\n## Method"))
    again = subprocess.run([sys.executable, "-m", "benchmarks.run", "--tiny", "--write", str(out)],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "kept by hand" in out.read_text() and out.read_text().count("## Results") == 1


def test_chunks_benchmark_tiny_mode_reports_every_measurement():
    import json
    result = subprocess.run([sys.executable, "-m", "benchmarks.bench_chunks", "--tiny"], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    for size in ("64 KiB", "1 MiB"):
        row = report["oneWay"][size]
        assert set(row["MiBps"]) == {"floor", "send", "reliable"} and all(v > 0 for v in row["MiBps"].values())
        assert row["sendVsFloor"] > 0 and row["reliableVsSend"] > 0 and row["peakRssMiB"]["receiver"]["VmHWM"] > 0
    assert report["spc4MiB"]["argumentBytes"] == 4 << 20 and report["spc4MiB"]["callVsFloor"] > 0
    loss = report["loss"]
    assert loss["kills"] == 1 and loss["sent"] > 0 and loss["neverHandled"] == 0
    assert loss["handledTwiceWithinAnInstance"] == 0


def test_receiver_cpu_benchmark_reports_its_figures_live_and_from_a_backlog():
    for extra in ([], ["--backlog"]):
        result = subprocess.run([sys.executable, "benchmarks/receiver_cpu.py", "--senders", "2", "--messages", "300",
                                 *extra], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "300 messages" in result.stdout and re.search(r"receiver CPU \d+ µs user \+ \d+ µs system", result.stdout)
        assert ("drained at" in result.stdout) == bool(extra)


def test_a_run_without_64_byte_envelopes_reports_no_goals_instead_of_failing():
    sys.path.insert(0, REPO)
    from benchmarks.run import goals
    assert goals({}) == "(the goals are measured on 64 B envelopes, which this run left out)"
