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


def test_round_trip_stages_print_the_floor_the_runtime_and_a_budget_for_every_stage():
    result = subprocess.run([sys.executable, "-m", "benchmarks.rtt_stages", "--rounds", "1", "--calls", "30", "--warm",
                             "5"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    from benchmarks.rtt_stages import AFTER, STAGES
    for _, label, floor_label, _ in STAGES:
        assert f"| {label} | {floor_label} |" in result.stdout, label
    for label in AFTER.values():
        assert f"| {label} |" in result.stdout
    budget = re.search(r"\| \*\*round trip\*\* \(sum of the stages\) \| \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \(1\.5×\)",
                       result.stdout)
    assert budget, result.stdout
    floor, _, total = (int(x.replace(",", "")) for x in budget.groups())
    assert abs(total - 1.5 * floor) <= 5  # the budgets add up to 1.5 times the floor (rounded per stage)


def test_stage_segments_count_each_thread_between_its_marks_and_leave_idle_work_out():
    sys.path.insert(0, REPO)
    from benchmarks.rtt_stages import CLOSES, stage_segments
    calling = [("calibrate", 10), ("call", 99), ("send_start:SPC_REQUEST", 30), ("renaming", 20),
               ("send_done:SPC_REQUEST", 15), ("end", 12), ("call", 5), ("renaming", 25), ("send_done:SPC_REQUEST", 5),
               ("end", 3)]
    protocol = [("idle", 50), ("woke", 8), ("resolve", 40), ("resolved", 6), ("idle", 70), ("woke", 9), ("resolve", 41),
                ("resolved", 7)]
    got = stage_segments({(1, 1): calling, (1, 2): protocol}, CLOSES["caller"], 2, per_mark=1)
    assert sorted(got) == sorted([("c_sent", [49, 24]), ("c_after", [14, 4]), ("end", [11, 2]), ("c_woke", [7, 8]),
                                  ("c_resolved", [39, 40]), ("end", [5, 6])])
    # only the last `calls` segments of each: the warm-up came first
    assert ("c_resolved", [40]) in stage_segments({(1, 2): protocol}, CLOSES["caller"], 1, per_mark=1)


def test_envelope_cpu_compares_both_forms_piece_by_piece():
    result = subprocess.run([sys.executable, "-m", "benchmarks.envelope_cpu", "--rounds", "1", "--calls", "200"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    from benchmarks.envelope_cpu import PIECES
    for piece in PIECES:
        row = re.search(rf"\| {piece} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", result.stdout)
        assert row and all(float(v) > 0 for v in row.groups()), piece


def test_receiver_cpu_beside_the_floor_prints_the_one_way_budget():
    result = subprocess.run([sys.executable, "benchmarks/receiver_cpu.py", "--senders", "2", "--messages", "400",
                             "--floor"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("floor: 2 sender(s), 400 messages") == 2
    for row in ("| receiver CPU, µs (user + system) |", "| senders' CPU, µs (user + system) |", "| rate, first to last |"):
        assert row in result.stdout


def test_calls_per_message_counts_both_sides_one_way_and_per_round_trip():
    for mode, sides in (([], ("sender (the sending thread)", "receiver (all threads, first message to last)")),
                        (["--spc"], ("caller (all threads)", "callee (all threads)"))):
        result = subprocess.run([sys.executable, "-m", "benchmarks.calls_per_message", "--messages", "40", "--top", "3",
                                 *mode], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        for side in sides:
            counted = re.search(rf"{re.escape(side)}: ([\d.]+) Python calls and ([\d.]+) C-function calls each",
                                result.stdout)
            assert counted and all(float(n) > 0 for n in counted.groups()), (side, result.stdout)
