"""Logs of the nodes the console started: the bounded ring per node (models/logs.py), both output
pipes of a launched process followed for as long as it runs (services/processes.py), the exit
status kept, in-process nodes' health and lease lines, and the `L` screen: follow, pick a node,
search with highlighted words and `n` / `N` (only while a search is set: otherwise `n` is the
app's "launch node"), and a node's output drawn as text, never markup or a control sequence."""

import asyncio
import os
from contextlib import contextmanager
import signal
import sys

import speed_runtime

from speedtui.models.commands import NodeSpec
from speedtui.models.logs import LogBook, exit_sentence
from speedtui.services import own_nodes
from speedtui.services.own_nodes import NodeLogs, launch_process, stop_own
from speedtui.ui.app import make_app
from speedtui.ui.screens.forms import LaunchScreen
from speedtui.ui.screens.logs import OTHERS, LogPane, LogsScreen

from . import hostile
from .conftest import SIZE, run_async, wait_for
from tests.helpers.wait import wait_until


# ---------------------------------------------------------------- the model
def test_a_node_log_is_a_bounded_ring_of_visible_cut_lines():
    book = LogBook(lines_per_node=3)
    book.open("a", "process", 1.0, pid=7)
    for i in range(5):
        book.add("a", "stdout", f"line {i}", 2.0 + i)
    assert [line.text for line in book.lines("a")] == ["line 2", "line 3", "line 4"]
    book.add("a", "stderr", "\x1b]2;PWNED\x07" + "x" * 5000, 9.0)
    last = book.lines("a")[-1]
    assert last.text.startswith("\\x1b]2;PWNED\\x07") and last.text.endswith("…(cut)") and len(last.text) < 1100
    book.add("nobody", "stdout", "ignored", 9.0)  # not a node of ours: nothing is kept
    assert book.names() == ["a"]


def test_every_node_in_the_order_lines_came_and_how_each_ended():
    book = LogBook()
    book.open("a", "process", 1.0, pid=7)
    book.open("b", "in-process", 1.5)
    book.add("b", "health", "lease registered", 2.0)
    book.add("a", "stdout", "ready", 3.0)
    book.end("a", exit_sentence(-signal.SIGKILL), 4.0)
    assert [(line.node, line.text) for line in book.lines()] == [
        ("a", "started (process, pid 7)"), ("b", "started (in-process)"), ("b", "lease registered"),
        ("a", "ready"), ("a", "ended by SIGKILL (signal 9)")]
    assert book.states() == ["a (process, pid 7): ended by SIGKILL (signal 9)", "b (in-process): running"]
    assert book.summary() == "2 nodes, 1 running; a ended by SIGKILL (signal 9)"
    assert book.summary("b") == "b (in-process): running"
    assert exit_sentence(0) == "exited with status 0" and exit_sentence(3) == "exited with status 3"


def test_logs_of_nodes_that_ended_are_dropped_oldest_first_beyond_the_bound():
    book = LogBook(logs_kept=2)
    book.open("a", "process", 1.0)
    book.end("a", "exited with status 0", 2.0)
    book.open("b", "process", 3.0)
    book.open("c", "process", 4.0)
    assert book.names() == ["b", "c"]


# ---------------------------------------------------------------- a process's output
def program(body: str) -> str:
    """A stand-in for `speed node`: ``body``, then it runs until SIGTERM (status 0)."""
    return ("import os, signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n" + body +
            "\nwhile True:\n    time.sleep(0.1)\n")


CHATTY = program(r"""
os.write(1, b"ready chatty id=x pid=%d\nright after ready\n" % os.getpid())
for i in range(3000):  # 300 KB on stderr: far more than a pipe holds
    os.write(2, b"e" * 99 + b"\n")
for i in range(1000):
    os.write(1, b"out %d\n" % i)
os.write(1, b"done\n")
""")


def fake_speed(monkeypatch, code):
    """`speed` replaced by a program of the test's (it gets the `node ...` arguments and ignores them)."""
    monkeypatch.setattr(own_nodes, "speed_command", lambda: [sys.executable, "-c", code])


@contextmanager
def fake_node(live_env, monkeypatch, name, code):
    """A stand-in `speed node` launched as the console launches one: (its OwnNode, the logs)."""
    root, key, paths = live_env
    fake_speed(monkeypatch, code)
    logs = NodeLogs()
    own = launch_process(root, key, NodeSpec(name, in_process=False), 30, logs)
    try:
        yield own, logs
    finally:
        stop_own(own, logs)


def test_a_chatty_process_is_followed_on_both_pipes_into_a_bounded_ring(live_env, monkeypatch):
    """stderr went to an unbounded temporary file nobody read, stdout kept its first 200 lines:
    now both pipes are read, for as long as the process runs, into the node's bounded log."""
    with fake_node(live_env, monkeypatch, "chatty", CHATTY) as (own, logs):
        wait_until(lambda: logs.last("chatty", "stdout") == "done", timeout=60, what="the last line")
        texts = [line.text for line in logs.lines("chatty")]
        assert own.proc.poll() is None  # not blocked, not ended: still running
        assert len(texts) == 2000  # the ring: 4,004 lines written, the last 2,000 kept
        streams = [line.stream for line in logs.lines("chatty")]
        assert streams.count("stderr") == 999 and streams.count("stdout") == 1001 and "out 999" in texts
    assert logs.states() == [f"chatty (process, pid {own.proc.pid}): exited with status 0"]


READY_THEN_MORE = program(r"""os.write(1, b"ready quick id=x pid=1\nright after ready\n")""")


def test_the_lines_written_with_the_ready_line_are_kept(live_env, monkeypatch):
    """What a process wrote in the same write as its `ready` line was dropped: the ready line was
    read with one os.read and the rest of that read thrown away."""
    with fake_node(live_env, monkeypatch, "quick", READY_THEN_MORE) as (own, logs):
        wait_until(lambda: logs.last("quick", "stdout") == "right after ready", timeout=30, what="the second line")


def test_a_process_that_does_not_start_is_one_sentence_from_its_stderr(live_env, monkeypatch):
    root, key, paths = live_env
    fake_speed(monkeypatch, "import sys\nprint('speed: no such thing', file=sys.stderr)\nsys.exit(2)\n")
    logs = NodeLogs()
    try:
        launch_process(root, key, NodeSpec("broken", in_process=False), 30, logs)
    except own_nodes.ActionError as exc:
        assert str(exc) == "speed node broken did not start: speed: no such thing"
    else:
        raise AssertionError("a process that never printed ready was taken as started")
    wait_until(lambda: "exited with status 2" in logs.states()[0], timeout=30, what="its exit status")


# ---------------------------------------------------------------- real `speed node` processes
def test_a_real_node_s_output_and_exit_status_are_kept(live_env):
    root, key, paths = live_env
    app = make_app(root, key, paths=paths, start_sources=False)
    acts = app.actions
    try:
        echo = acts.launch(NodeSpec("listener", allow=("sender",), in_process=False, echo_messages=True))
        victim = acts.launch(NodeSpec("victim", in_process=False))
        logs = acts.own.logs
        with speed_runtime.Node(str(root), key.runtime_key, "sender", allow=["listener"]) as sender:
            for i in range(20):
                sender.send("listener", {"n": i})
        wait_until(lambda: sum('"n":' in line.text or '"n": ' in line.text for line in logs.lines("listener")) == 20,
                   timeout=60, what="the 20 messages echoed on the listener's stdout")
        os.kill(victim.proc.pid, signal.SIGKILL)
        wait_until(lambda: "ended by SIGKILL (signal 9)" in " ".join(logs.states()), timeout=30,
                   what="the killed node's status")
        acts.stop("listener")
        assert f"listener (process, pid {echo.proc.pid}): exited with status 0" in logs.states()
        assert any(line.text.startswith("ready listener") for line in logs.lines("listener"))  # kept after it ended
    finally:
        acts.stop_all()


def test_an_in_process_node_logs_its_lease_and_health_lines(live_env):
    root, key, paths = live_env
    app = make_app(root, key, paths=paths, start_sources=False)
    acts = app.actions
    try:
        acts.launch(NodeSpec("inside", in_process=True, trace=False))
        acts.stop("inside")
        texts = [line.text for line in acts.own.logs.lines("inside")]
        assert texts[0] == "started (in-process)" and "lease registered" in texts
        assert "lease deregistered" in texts and texts[-1] == "closed"
    finally:
        acts.stop_all()


# ---------------------------------------------------------------- the L screen
def pane_text(app) -> list[str]:
    pane = app.screen.query_one(LogPane)
    return ["".join(seg.text for seg in pane.render_line(y)) for y in range(pane.scrollable_content_region.height)]


@run_async
async def test_the_logs_screen_follows_picks_and_searches(live_env):
    root, key, paths = live_env
    app = make_app(root, key, paths=paths, start_sources=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("L")
        await wait_for(pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen.query(LogPane),
                       what="the logs screen")
        assert str(app.screen.query_one("#logs-others").render()) == OTHERS  # and how to see the others
        assert "started no node yet" in str(app.screen.query_one("#logs-states").render())
        # n without a search term is the app's "launch node"
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="n: the launch dialog")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, LogsScreen), what="back in the logs")
        await asyncio.to_thread(app.actions.launch, NodeSpec("alpha", in_process=False, echo_messages=True,
                                                             allow=("beta",)))
        await asyncio.to_thread(app.actions.launch, NodeSpec("beta", in_process=True, trace=False))
        await wait_for(pilot, lambda: any("ready alpha" in t for t in pane_text(app)), what="alpha's ready line")
        # every node, each marked (beta's line reaches the pane at its next refresh, not with alpha's)
        await wait_for(pilot, lambda: any("beta" in t and "lease registered" in t for t in pane_text(app)),
                       what="beta's lease line, marked")
        # pick one node: its lines only
        await pilot.press("s")
        await wait_for(pilot, lambda: app.screen.node == "alpha", what="alpha picked")
        assert not any("lease registered" in t for t in pane_text(app))
        # live: what alpha prints now arrives without a key
        beta = app.actions.own.node("beta")
        beta.send("alpha", {"word": "needle"})
        await wait_for(pilot, lambda: any("needle" in t for t in pane_text(app)), what="the echoed message")
        # search: words highlighted, n / N jump, and n no longer launches
        await pilot.press("slash", *"needle", "enter")
        await pilot.pause()
        pane = app.screen.query_one(LogPane)
        assert pane.words == ("needle",) and pane.current is not None
        assert "needle" in pane.texts[pane.current]
        row = pane.render_line(pane.current - int(pane.scroll_offset.y))
        assert any(seg.text.lower() == "needle" and seg.style and seg.style.reverse for seg in row)
        await pilot.press("n")
        await pilot.press("N")
        await pilot.pause()
        assert isinstance(app.screen, LogsScreen) and "needle" in pane.texts[pane.current]
        await pilot.press("escape")  # clears the search
        await pilot.pause()
        assert pane.words == ()
        await pilot.press("escape")  # leaves the logs
        await wait_for(pilot, lambda: not isinstance(app.screen, LogsScreen), what="the logs closed")


HOSTILE_OUTPUT = program(r"""
os.write(1, b"ready evil id=x pid=1\n")
for line in %r:
    os.write(1, line.encode("utf-8", "surrogatepass") + b"\n")
    os.write(2, line.encode("utf-8", "surrogatepass") + b"\n")
""")


@run_async
async def test_a_node_s_output_is_text_never_markup_or_a_control_sequence(live_env, monkeypatch, tmp_path):
    root, key, paths = live_env
    strings = [*hostile.values(tmp_path).values(), "[link=https://example.invalid]click me[/link]",
               "[bold red]not bold[/]"]
    fake_speed(monkeypatch, HOSTILE_OUTPUT % (strings,))
    app = make_app(root, key, paths=paths, start_sources=False)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.to_thread(app.actions.launch, NodeSpec("evil", in_process=False))
        await pilot.press("L")
        await wait_for(pilot, lambda: isinstance(app.screen, LogsScreen), what="the logs screen")
        await wait_for(pilot, lambda: sum("[bold red]not bold[/]" in t for t in pane_text(app)) == 2,
                       what="the hostile lines, as typed")
        pane = app.screen.query_one(LogPane)
        for y in range(pane.scrollable_content_region.height):
            for seg in pane.render_line(y):
                assert not any(c in seg.text for c in "\x1b\x07\x9b\x9d\x7f")
                assert seg.style is None or (not seg.style.link and not seg.style.meta)
        shown = "\n".join(pane.texts)
        for visible in hostile.SHOWN[:4]:
            assert visible in shown
        assert "[link=https://example.invalid]click me[/link]" in shown
        assert not (tmp_path / hostile.SHOT).exists()


def test_the_demo_s_nodes_have_logs_with_the_killed_node_s_status(tmp_path):
    """--demo: the console started the demo's six `speed node` processes and its driver, so the
    logs have each of them, and flaky's log says how it was killed (and goes on when it is back)."""
    from speedtui.environments.demo import PROCESS_NODES, DemoEnvironment
    from speedtui.paths import Paths
    from speedtui.services import runtime as rt

    demo = DemoEnvironment(seed=5, period=0.3, kill_every=1.0)
    demo.start()
    app = make_app(demo.root, rt.load_key(demo.key_path), paths=Paths(tmp_path / "c", tmp_path / "d"), demo=demo,
                   start_sources=False)
    try:
        logs = app.actions.own.logs
        assert set(logs.names()) == {n for n, *_ in PROCESS_NODES} | {"ops"}
        assert any(line.text.startswith("ready gateway") for line in logs.lines("gateway"))
        wait_until(lambda: any("flaky" in s and "ended by SIGKILL (signal 9)" in s for s in logs.states()),
                   timeout=60, what="flaky's log: killed")
    finally:
        app.services.shutdown()
    assert all("exited with status 0" in s for s in logs.states() if s.startswith("gateway")), logs.states()
