"""Analytics view: the pipeline runs in the analytics child process (one JVM, reused, released
when idle, its output in a log file), per environment, with progress; the real `speedtui` under a
pseudo-terminal gets no byte of the JVM's output."""

import json
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from speedtui.services.history import AuditLog
from speedtui.pipeline.reference import analyze

from ..helpers.proc import descendants, running
from .conftest import SIZE, run_async, wait_for

#: lines the JVM and Spark print at start-up (they must end up in the log, never on the terminal)
JVM_MARKERS = (b"WARNING: Using incubator modules", b"log4j", b"NativeCodeLoader", b"SLF4J",
               b"Using Spark's default", b"setLogLevel", b"restricted mode")




@pytest.mark.timeout(900)   # a cold JVM and two analyses: minutes on a loaded 2-core machine
@run_async
async def test_analysis_in_child_reused_then_released(fixture_app, fixture_env, monkeypatch):
    """The real pipeline runs from the view in the child; its report (in the environment's data
    directory) agrees with the pure-Python reference; the second analysis reuses the child's JVM
    and reads nothing new; while the view is open the child outlives its idle time; once the view
    is left it exits when idle, taking its JVM with it."""
    monkeypatch.setenv("SPEED_ANALYTICS_IDLE", "6")
    root, _key, paths = fixture_env
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        view = app.view_widget("analytics")
        await pilot.press("a")
        await wait_for(pilot, lambda: view.running, timeout=30, what="the analysis to start")
        await wait_for(pilot, lambda: "elapsed" in str(view.query_one("#an-status").render()),
                       timeout=30, what="elapsed time shown")
        await wait_for(pilot, lambda: not view.running, timeout=600, what="the analysis to finish")
        status = str(view.query_one("#an-status").render())
        assert "report of /fixture/speed written" in status, status
        assert str(paths.env_dir(root) / "analytics.log") in status
        child = view.worker.proc.pid
        jvms = descendants(child)
        assert jvms, "the child runs the JVM"
        assert view.runs == 1
        await pilot.press("a")                                  # again: same child, same JVM
        # counted, not watched: with nothing new to read the second run may start and end
        # between two polls (waiting to see it running failed under load)
        await wait_for(pilot, lambda: view.runs == 2, timeout=300, what="the second analysis")
        assert view.worker.proc.pid == child and view.summary["ingest"]["new_bytes"] == 0
        # while the view is open the child is kept: well past its idle time it still runs
        since, pings = time.monotonic(), view.keepalives
        await wait_for(pilot, lambda: view.keepalives >= pings + 4 and time.monotonic() - since > 9,
                       timeout=120, what="keep-alives beyond the idle time")
        assert view.worker.alive and view.worker.proc.pid == child
        await pilot.press("1")                                  # the view closed: now it may idle out
        await wait_for(pilot, lambda: not view.worker.alive, timeout=120, what="the idle child to exit")
        await wait_for(pilot, lambda: not any(running(p) for p in jvms), timeout=60,
                       what="the JVM to end with the child")
    written = json.loads((paths.env_dir(root) / "analytics" / "summary.json").read_text())
    expected = analyze([str(root / "speed_traces")])["summary"]
    assert written["engine"] == "spark"
    # the fixture's journals end in torn lines: the reference counts them as malformed, the store
    # waits for their ends (they are not records yet)
    assert expected["totals"]["malformed"] == 2
    assert written["totals"] == dict(expected["totals"], malformed=0, lines=expected["totals"]["lines"] - 2)
    assert written["spc"] == expected["spc"]
    assert AuditLog(paths.audit_log(root)).entries()[-1].action == "analyze"
    log = (paths.env_dir(root) / "analytics.log").read_bytes()
    assert b"WARNING: Using incubator modules" in log          # the JVM spoke, into the log


@pytest.mark.timeout(900)
@run_async
async def test_the_child_is_pre_warmed_where_the_environment_was_analysed_before(fixture_app, fixture_env):
    """A report exists: the console starts the analytics child and its Spark in the background at
    its start (no key pressed), runs the ingest's query there, and `a` then uses that child."""
    from speedtui.environments.fixture import sample_summary
    root, _key, paths = fixture_env
    report = paths.env_dir(root) / "analytics"
    report.mkdir(parents=True)
    (report / "summary.json").write_text(json.dumps(sample_summary()))
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        view = app.view_widget("analytics")
        await wait_for(pilot, lambda: view.warmed is not None, timeout=600, what="the pre-warm to finish")
        child = view.worker.proc.pid
        assert descendants(child), "the pre-warmed child runs the JVM"
        await pilot.press("6")
        await pilot.press("a")
        await wait_for(pilot, lambda: view.runs == 1, timeout=300, what="the analysis to finish")
        assert "written" in str(view.query_one("#an-status").render())
        assert view.worker.proc.pid == child


@run_async
async def test_reports_are_per_environment(fixture_app, fixture_env, tmp_path, monkeypatch):
    """A report of one ROOT is never shown for another (a fresh demo, another directory)."""
    from speedtui.environments.fixture import build, sample_summary
    from speedtui.ui.app import make_app
    from speedtui.services.clock import FrozenClock
    from speedtui.environments.fixture import FIXED_NOW

    root, key, paths = fixture_env
    report = paths.env_dir(root) / "analytics"
    report.mkdir(parents=True)
    (report / "summary.json").write_text(json.dumps(sample_summary()))
    monkeypatch.setenv("SPEED_ANALYTICS_PREWARM", "0")   # the report would pre-warm a Spark child: none needed
    other, _ = build(tmp_path / "other")
    assert paths.env_dir(other) != paths.env_dir(root)
    app = make_app(other, key, clock=FrozenClock(FIXED_NOW), paths=paths, dir_label="/other/speed", steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        status = str(app.view_widget("analytics").query_one("#an-status").render())
        assert status.startswith("no report yet for /other/speed"), status
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        status = str(app.view_widget("analytics").query_one("#an-status").render())
        assert status.startswith("last report of /fixture/speed"), status


@run_async
async def test_analysis_failure_is_one_sentence(fixture_app, monkeypatch):
    """Without Java the child answers with the pipeline's one sentence (no JVM starts)."""
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-java")
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.press("a")
        view = app.view_widget("analytics")
        await wait_for(pilot, lambda: "analysis failed" in str(view.query_one("#an-status").render()),
                       timeout=120, what="the failure shown")
        status = str(view.query_one("#an-status").render())
        assert "analysis failed: JAVA_HOME (/nonexistent-java) has no bin/java" in status, status
        assert "Traceback" not in status


@pytest.mark.timeout(900)
def test_no_jvm_byte_reaches_the_terminal(tmp_path):
    """The real `speedtui` in a pseudo-terminal: view 6, `a`, wait for the report, `q`. The JVM's
    start-up lines are in the analytics log and nowhere in what the terminal received."""
    from speedtui.environments.fixture import build
    root, key = build(tmp_path / "root")
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               TERM="xterm-256color", COLUMNS="120", LINES="36", SPEED_ANALYTICS_IDLE="60")
    env.pop("TEXTUAL", None)
    speedtui = Path(sys.executable).with_name("speedtui")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console on the pty
        os.execve(str(speedtui), [str(speedtui), "--dir", str(root), "--key", str(key)], env)
    import fcntl
    import struct
    import termios
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    screen = bytearray()
    envs = tmp_path / "data" / "speedtui" / "envs"

    closed = []

    def pump(until, timeout: float) -> bool:
        """Read what the terminal gets until `until()` or the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until():
                return True
            if closed:                      # the console closed the terminal: just wait
                time.sleep(0.2)
                continue
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    data = os.read(fd, 65536)
                except OSError:             # EIO: no process has the terminal open any more
                    data = b""
                if not data:
                    closed.append(True)
                screen.extend(data)
        return until()

    def report() -> bool:
        return envs.is_dir() and any((d / "analytics" / "summary.json").exists() for d in envs.iterdir())

    exited = []

    def gone() -> bool:
        if not exited and os.waitpid(pid, os.WNOHANG) != (0, 0):
            exited.append(True)
        return bool(exited)

    try:
        assert pump(lambda: b"Analytics" in screen, 60), "the console did not draw"
        os.write(fd, b"6")
        pump(lambda: False, 1.0)
        os.write(fd, b"a")
        assert pump(report, 600), "no report was written"
        pump(lambda: b"written in" in screen, 30)
        helpers = descendants(pid)
        assert helpers, "the analytics child and its JVM run below the console"
        os.write(fd, b"q")
        # quitting ends the child (its pipe closes; after 15 s its process group is ended): on a
        # loaded machine that takes a while, so the bound is generous
        assert pump(gone, 180), "the console did not quit"
        assert pump(lambda: not any(running(p) for p in helpers), 180), \
            "outlived the console: " + "; ".join(open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:150]
                                                 for p in helpers if running(p))
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
    (log,) = list(envs.glob("*/analytics.log"))
    text = log.read_bytes()
    assert b"WARNING: Using incubator modules" in text           # the JVM did speak...
    for marker in JVM_MARKERS:
        assert marker not in screen, marker                       # ...but not to the terminal


def test_the_report_cuts_no_label_at_80_columns():
    """Issue 16, defect 9: at 80 columns the totals and SPC headers were cut ("envelo…", "targ…")."""
    from rich.console import Console

    from speedtui.environments.fixture import sample_summary
    from speedtui.ui.views.analytics import TOTALS, summary_renderable
    console = Console(width=78, record=True)
    console.print(summary_renderable(sample_summary()))
    text = console.export_text()
    assert "…" not in text
    for header in ("target", "service", "calls", "succ", "p50", "p99", "codes", "availability", "restarts"):
        assert f" {header} " in text or f" {header}\n" in text, header
    for label in TOTALS.values():
        assert label.replace(" ", "\u00a0") in text, label


def test_the_reports_names_are_never_broken_mid_word_at_80_columns():
    """A service drawn as "calculateT" / "ax" on two lines: names keep whole, numbers and codes give way."""
    from rich.console import Console

    from speedtui.environments.fixture import sample_summary
    from speedtui.ui.views.analytics import summary_renderable
    console = Console(width=78, record=True)
    console.print(summary_renderable(sample_summary()))
    rows = console.export_text().splitlines()
    assert any(row.split()[:2] == ["billing", "calculateTax"] for row in rows if row.strip())
    assert any(row.split()[:2] == ["gateway", "billing"] for row in rows if row.strip())  # top talkers


def test_the_report_says_what_its_figures_cover():
    """Issue 28 item 5: "journals from 4 of 6 nodes", who keeps none, and the calls counted from callees."""
    from speedtui.ui.views.analytics import coverage_line, summary_renderable
    from speedtui.environments.fixture import sample_summary
    text = str(coverage_line({"journals": 4, "nodes": 6, "without_journal": ["cli-1", "cli-2"],
                              "spc_calls_from_callees": 598}))
    assert text == ("covers  journals from 4 of 6 nodes · no journal: cli-1, cli-2 · 598 SPC calls counted from "
                    "their callees' records")
    assert str(coverage_line({"journals": 6, "nodes": 6})) == "covers  journals from all 6 nodes"
    doc = dict(sample_summary(), coverage={"journals": 2, "nodes": 3, "without_journal": ["x"],
                                           "spc_calls_from_callees": 0})
    rendered = summary_renderable(doc).renderables
    assert any(str(r) == "covers  journals from 2 of 3 nodes · no journal: x" for r in rendered)


def test_the_report_names_the_journals_the_run_skipped():
    """A whole run (`staging`) and the store's (`ingest`) skip a journal that does not decompress:
    the report on screen says so, as `speedtui analyze` does (it said nothing in the console)."""
    from speedtui.environments.fixture import sample_summary
    from speedtui.ui.views.analytics import summary_renderable
    problem = "/t/speed_traces/junk.jsonl.gz: not a readable gzip file; skipped"
    for part in ("staging", "ingest"):
        doc = dict(sample_summary(), **{part: {"skipped": ["/t/speed_traces/junk.jsonl.gz", "/t/x"],
                                               "problems": [problem], "skipped_more": 3}})
        head = str(summary_renderable(doc).renderables[0])
        assert f"5 journals skipped: {problem}; …" in head.splitlines()
    assert "skipped" not in str(summary_renderable(sample_summary()).renderables[0])


@run_async
async def test_the_traffic_chart_spans_the_traffic_not_the_reports_window(fixture_app, fixture_env, monkeypatch):
    """The fixture's report covers 22:00-23:59 (lease records) and its traffic one minute, 23:59:
    the axis was two hours wide with all traffic in one bar at its edge."""
    from speedtui.environments.fixture import sample_summary

    root, _key, paths = fixture_env
    summary = sample_summary()
    assert summary["time_range"]["start_iso"] == "2025-12-31T22:00:00Z"
    assert [b["t"] for b in summary["traffic_over_time"]["buckets"]] == [1767225540]  # 23:59
    report = paths.env_dir(root) / "analytics"
    report.mkdir(parents=True)
    (report / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setenv("SPEED_ANALYTICS_PREWARM", "0")
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        chart = app.view_widget("analytics").query_one("#an-chart")
        await wait_for(pilot, lambda: chart.display and chart.size.height > 0, what="the chart")
        lines = [line.plain for line in chart.render().split("\n")]
        assert lines[-1].split() == ["23:59"]  # the one label: where the traffic is
        axis = lines[-2]
        bar = len(axis.rstrip()) - axis.index("└") - 1  # the axis is as long as the data: one bar
        assert 1 <= bar <= 4 and axis.rstrip().endswith("└┬" + "─" * (bar - 1))
        assert lines[1].rstrip().endswith("┤" + "█" * bar)  # the peak's row: the bar at the axis' start
