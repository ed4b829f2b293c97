"""What members of an environment write is data on the operator's screen, clipboard and disk
(principle (f), docs/CONSOLE.md "What members write is data"): the real app (Pilot) on a real ROOT
whose every member-writable field, file name, journal record, payload, service answer, call
history and audit line holds terminal control sequences and markup (tests/console/hostile.py),
visiting every view and opening every dialog, with a hostile service called for real.

The app renders to a driver that keeps what it writes, as Textual writes it to a terminal. Before
the console showed members' strings as data, it died at start on the first journal link named
`[a="]…` (MarkupError in a notification); without that link, copies, errors and titles quoted
escape sequences raw and `[@click=…]` became live links."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.cells import cell_len
from speed_runtime import Node
from speed_runtime.core.errors import SpcError
from textual.drivers.headless_driver import HeadlessDriver

from speedtui.environments.fixture import FIXED_NOW
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.services.processes import console_node_name
from speedtui.ui.app import make_app
from speedtui.ui.screens.calllink import CallLinkScreen
from speedtui.ui.screens.calls import CallScreen, SendScreen
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.envelope import EnvelopeScreen
from speedtui.ui.screens.forms import GrantScreen, LaunchScreen, PickScreen
from speedtui.ui.screens.help import HelpScreen
from speedtui.ui.screens.jump import JumpScreen
from speedtui.ui.screens.timetravel import TimeTravelScreen
from speedtui.ui.widgets.fast_table import FastTable

from .conftest import SIZE, run_async, wait_for
from .hostile import FILE_NAMES, FORMULA, SHOT, SHOWN, SURROGATE, build_hostile, terminal_problems, values

HOSTILE_MARKS = ("CLICK", '[a="]', "\\x1b")  # a string holds one of these once a member wrote it


def hostile(text: str) -> bool:
    return any(m in text for m in HOSTILE_MARKS)


def capture(app) -> list[str]:
    """Render ``app`` as to a terminal (Textual writes its frames only to a driver that is not
    headless) and keep what it writes: the bytes the operator's terminal would receive."""
    written: list[str] = []

    class TerminalCapture(HeadlessDriver):
        @property
        def is_headless(self) -> bool:
            return False

        def write(self, data: str) -> None:
            written.append(data)

    app.driver_class = TerminalCapture
    return written


def hostile_service(root: Path, key, shots: Path) -> Node:
    """A member's node whose service answers and errors are the hostile values (without the lone
    surrogate: the runtime cannot send a text holding one, and answers nothing)."""
    vals = [v.replace(SURROGATE, "") for v in values(shots).values()]
    node = Node(str(root), key.runtime_key, "hsvc", allow=[console_node_name()], trace=True)

    def fail(index):
        def service(arguments):
            raise SpcError("EXECUTION_FAILED", vals[index])
        return service

    node.register("fail", fail(0))
    node.register("fail2", fail(1))
    node.register("answer", lambda arguments: {v: [v] for v in vals})
    return node


async def screen_is(pilot, kind, what: str) -> None:
    try:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, kind), what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; screens {pilot.app.screen_stack}, focus {pilot.app.focused}") from None
    await pilot.pause()


async def close(pilot) -> None:
    """Escape until the dialog is gone (a click on it may have opened a list first, which Escape closes;
    a click on a palette entry chose it, which closed the palette)."""
    screen = pilot.app.screen
    if len(pilot.app.screen_stack) == 1:
        return
    for _ in range(3):
        await pilot.press("escape")
        try:
            await wait_for(pilot, lambda: pilot.app.screen is not screen, timeout=5, what="the dialog closed")
            return
        except AssertionError:
            continue
    raise AssertionError(f"{type(screen).__name__} does not close on Escape")


async def in_dialog(pilot, step, opener, kind, what: str, fill=None) -> None:
    """Open a dialog (keys to press, or a call), fill it, draw it (``step``), close it."""
    if callable(opener):
        opener()
    else:
        await pilot.press(*([opener] if isinstance(opener, str) else opener))
    await screen_is(pilot, kind, what)
    if fill is not None:
        fill(pilot.app.screen)
    await step(what)
    await close(pilot)


async def visit_everything(pilot, app, root: Path, step) -> None:
    """Every view, every dialog, every copy, export and notification, each shown with the hostile
    rows and records under the cursor; ``step(where)`` once each is drawn."""
    own = console_node_name()
    # ---------------------------------------------------------------- Leases: rows, details, copy, export, reap
    await pilot.press("1")
    await wait_for(pilot, lambda: {"hlink", "herror", "hsvc"} <= set(app.registry.by_name()), what="hostile entries")
    leases = app.view_widget("leases")
    table = leases.query_one(FastTable)
    for row in app.registry.rows:
        if hostile(row.name) or hostile(row.host) or row.name in ("hlink", "herror"):
            table.move_to_key(row.name)
            leases.show_detail(row.name)
            await pilot.pause()
            await step(f"leases, {row.name}")
    for name in ("hlink", "herror"):
        table.move_to_key(name)
        await pilot.press("y", "E")
        await step(f"copy and export of {name}'s entry")
    unreadable = next(r.name for r in app.registry.rows if r.raw is None and "CLICK" in r.name)
    table.move_to_key(unreadable)
    await in_dialog(pilot, step, "x", ConfirmScreen, "the reap confirmation")
    # ---------------------------------------------------------------- Fabrics: a hostile fabric chosen
    await pilot.press("2")
    tree = app.view_widget("fabrics").query_one("#fabrics-tree")
    await wait_for(pilot, lambda: any(hostile(str(n.data)) for n in tree.root.children), what="hostile fabrics")
    for node in [n for n in tree.root.children if hostile(str(n.data))]:
        tree.move_cursor(node)
        await pilot.press("enter")
        await step(f"fabric {node.data}")
    await pilot.press("2", "a")
    # ---------------------------------------------------------------- Access: matrix, picture, explainer, export
    await pilot.press("3")
    access = app.view_widget("access")
    for caller, target in (("hlink", "herror"), ("herror", "hlink")):
        access.set_pair(caller, target, app.registry.by_name()[target].services[0])
        await step(f"explain {caller} → {target}")
    await pilot.press("E")
    await step("access export")
    # ---------------------------------------------------------------- Traces: rows, envelope, call link, as call
    await pilot.press("4")
    traces = app.view_widget("traces")
    traces.follow = False
    await wait_for(pilot, lambda: sum(hostile(r.node + r.peer) for r in app.traces.view) >= 10,
                   what="hostile records")
    ttable = traces.query_one(FastTable)
    for rec in [r for r in app.traces.view if hostile(r.node + r.peer + r.reason)]:
        assert ttable.move_to_key((rec.ts, rec.id))
        await step(f"traces, {rec.kind} {rec.type}")
        if rec.kind == "envelope":
            await pilot.press("enter")
            await screen_is(pilot, EnvelopeScreen, "the envelope dialog")
            await pilot.press("y")
            await step(f"envelope dialog, {rec.type}")
            await close(pilot)
        elif rec.kind == "message":
            await pilot.press("enter")  # expands it (or says it went as one envelope)
            await step("a message's envelopes")
        if rec.request_id:
            await in_dialog(pilot, step, "c", CallLinkScreen, "follow call")
            await in_dialog(pilot, step, ["y", "C"], CallScreen, "a record as a call")
    await pilot.press("T")
    await step("relative times")
    await pilot.press("T", "E")
    await step("traces export")
    # ---------------------------------------------------------------- time travel to a hostile record
    rec = next(r for r in app.traces.view if r.kind == "envelope" and hostile(r.node))
    ttable.move_to_key((rec.ts, rec.id))
    await pilot.press("at")
    await screen_is(pilot, TimeTravelScreen, "time travel")
    past = app.screen.query_one("#past-nodes", FastTable)
    await wait_for(pilot, lambda: any(hostile(str(k)) for k in [past.rows[i].key for i in range(len(past.rows))]),
                   what="hostile nodes in the past")
    for i in range(len(past.rows)):
        past.cursor = i
        await pilot.pause()
    await step("time travel")
    await close(pilot)
    # ---------------------------------------------------------------- Replay, Analytics
    await pilot.press("5")
    await step("replay")
    await pilot.press("6")
    await step("analytics")
    # ---------------------------------------------------------------- Audit: actions and calls; copy, edit
    await pilot.press("7")
    calls = app.view_widget("audit").query_one("#calls-table", FastTable)
    for i in range(len(calls.rows)):
        calls.cursor = i
        await pilot.press("y")
        await step(f"audit, call {i}")
    calls.cursor = 0
    await in_dialog(pilot, step, "e", CallScreen, "a stored call in the call dialog")
    # ---------------------------------------------------------------- Security: hostile senders; lift
    await pilot.press("8")
    sec = app.view_widget("security").query_one(FastTable)
    await wait_for(pilot, lambda: any(hostile(str(sec.rows[i].key)) for i in range(len(sec.rows))),
                   what="hostile threat rows")
    for i in range(len(sec.rows)):
        sec.cursor = i
        await pilot.pause()
        if hostile(str(sec.rows[i].key)):
            await pilot.press("l")
            await step(f"security, {sec.rows[i].key}")
    # ---------------------------------------------------------------- Durable: a hostile outbox; receipts
    await pilot.press("9", "r")
    durable = app.view_widget("durable")
    await wait_for(pilot, lambda: any(i.node == "hlink" for i in durable.items), what="the outboxes")
    assert not any(hostile(i.node) or hostile(i.target) for i in durable.items)  # they name no node: not listed
    box = durable.query_one("#durable-outbox", FastTable)
    box.move_to_key(next(r.key for r in box.rows if "hlink" in str(r.key)))
    await pilot.press("v")
    await step("durable, an outbox and its receipts")
    # ---------------------------------------------------------------- jump, palette, help, launch
    await in_dialog(pilot, step, ["colon", *"[a"], JumpScreen, "the jump dialog")
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: app.screen.query("CommandInput"), what="the command palette")
    await pilot.press(*"Service")
    await pilot.pause(0.5)  # the palette searches in a worker
    await step("command palette")
    await close(pilot)
    await in_dialog(pilot, step, "question_mark", HelpScreen, "help")
    # the action, not `n`: a palette entry chosen above filtered Leases to a service, and while
    # a filter has a word `n` goes to the next match (test_search_views: it launches without one)
    await in_dialog(pilot, step, app.action_launch, LaunchScreen, "the launch dialog",
                    fill=lambda screen: setattr(screen.query_one("#ln-groups"), "value", "[a"))
    # ---------------------------------------------------------------- the console's own node and a hostile service
    app.controller.nodes.start_console_node("")
    await wait_for(pilot, lambda: own in app.actions.own.in_process(), timeout=90, what="the console's node")
    await wait_for(pilot, lambda: own in app.registry.by_name(), what="the console's node in the registry")
    await in_dialog(pilot, step, lambda: app.controller.grants.open(own, unreadable), GrantScreen, "the grant dialog")
    await in_dialog(pilot, step, "m", SendScreen, "the send dialog",
                    fill=lambda screen: setattr(screen.query_one("#snd-to"), "value", "herror"))
    await in_dialog(pilot, step, "d", PickScreen, "the stop dialog")
    app.actions.set_allow(own, "hsvc", True)  # its answers may come back
    history = app.calls
    for service in ("fail", "fail2", "answer"):
        n = len(history.entries())
        app.controller.calls.open(own, "hsvc", service, {})
        await screen_is(pilot, CallScreen, "the call dialog")
        await pilot.click("#call-go")
        await wait_for(pilot, lambda: len(history.entries()) > n, timeout=60, what=f"the call of {service}")
        await wait_for(pilot, lambda: "latency" in str(app.screen.query_one("#call-result").render()),
                       what="the answer in the dialog")
        await step(f"the answer of hsvc.{service} in the call dialog")
        await close(pilot)
        app.controller.calls.call(own, "hsvc", service, {}, 5.0)  # its outcome as a notification
        await wait_for(pilot, lambda: len(history.entries()) > n + 1, timeout=60, what=f"the re-call of {service}")
        await pilot.pause()
        await step(f"the answer of hsvc.{service} as a notification")
        answered = history.entries()[-1]  # the hostile service's own answer, not a refusal on the way
        assert (answered.status, answered.error_code) == (("SUCCESS", "") if service == "answer"
                                                          else ("ERROR", "EXECUTION_FAILED")), answered
    await pilot.press("7")
    await step("audit with the live calls")


def console_for(tmp_path: Path):
    root, key_path, paths, shots = build_hostile(tmp_path)
    key = rt.load_key(key_path)
    return root, key, paths, shots, make_app(root, key, paths=paths, dir_label="/hostile/env")


@run_async
async def test_no_member_byte_reaches_the_terminal_clipboard_or_exports(tmp_path):
    root, key, paths, shots, app = console_for(tmp_path)
    written = capture(app)
    problems: dict[str, list[str]] = {}

    async def step(where: str) -> None:
        await pilot.pause()
        found = terminal_problems("".join(written))
        if found and not problems:
            problems[where] = found  # the first place something got through

    with hostile_service(root, key, shots):
        async with app.run_test(size=SIZE, headless=False, notifications=True) as pilot:
            await visit_everything(pilot, app, root, step)
            clipboard = app.clipboard
    out = "".join(written)
    assert problems == {}
    assert terminal_problems(out) == []
    out.encode("utf-8")  # nothing a terminal cannot be sent (a lone surrogate)
    for shown in SHOWN:  # the hostile strings were drawn, as data
        assert shown in out
    assert "\\x1b" in clipboard and not any(ord(c) < 0x20 and c != "\n" for c in clipboard)
    exports = list((paths.env_dir(root) / "exports").iterdir())
    assert {p.suffix for p in exports} == {".jsonl", ".csv", ".json"}
    for path in exports:
        text = path.read_text(encoding="utf-8")
        assert not any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in text), path.name
        if path.suffix == ".csv":
            cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
            # the formula names an unreadable registry file, which is no node of the matrix (it was
            # exported as one); no cell can start a formula either way (csv_cell, tested below)
            assert FORMULA not in cells and not any(c.startswith(("=", "+", "-", "@")) for c in cells)
        elif path.suffix == ".jsonl":
            for line in text.splitlines():
                json.loads(line)


@run_async
async def test_member_markup_is_text_never_an_error_a_link_or_an_action(tmp_path):
    root, key, paths, shots, app = console_for(tmp_path)
    capture(app)
    seen: list[str] = []

    async def step(where: str) -> None:
        """Every CLICK on screen: no link under it, and clicking it (as one dismisses a popup) does nothing."""
        await pilot.pause()
        for _ in range(3):
            spots = clicks(app)
            if not spots:
                return
            x, y = spots[0]
            meta = app.screen.get_style_at(x, y).meta
            assert "@click" not in meta, f"a link at {where}: {meta}"
            seen.append(where)
            await pilot.click(offset=(x, y))
            await pilot.pause()

    with hostile_service(root, key, shots):
        async with app.run_test(size=SIZE, headless=False, notifications=True) as pilot:
            await visit_everything(pilot, app, root, step)
            assert app.is_running
    assert list(shots.iterdir()) == [], f"{SHOT} was written: a member's link ran an action"
    assert len(set(seen)) >= 20  # the hostile text was on screen (and clicked) all along the way
    assert app.return_code in (0, None)


def clicks(app) -> list[tuple[int, int]]:
    """Where "CLICK" is drawn on the screen (cells, not characters)."""
    spots = []
    for y, strip in enumerate(app.screen._compositor.render_strips()):
        line = "".join(segment.text for segment in strip)
        start = line.find("CLICK")
        while start >= 0:
            spots.append((cell_len(line[:start]) + 2, y))
            start = line.find("CLICK", start + 1)
    return spots


SIZES = [(80, 24), (120, 36)]


def snapshot_app(tmp_path: Path):
    """The hostile environment at the fixture's frozen time, its links pointing at a fixed folder,
    without the journal link (its notification names the test's folder)."""
    root, key_path, paths, _ = build_hostile(tmp_path, FIXED_NOW, shots=Path("/victim"))
    (root / "speed_traces" / f"{FILE_NAMES[0]}.jsonl").unlink()
    return make_app(root, rt.load_key(key_path), paths=paths, clock=FrozenClock(FIXED_NOW), dir_label="/hostile/env",
                    steady=True)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_hostile_entries_are_drawn_escaped(size, snap_compare, tmp_path):
    """How an entry written by a hostile member looks: its fields and file names escaped, in the
    table and in the detail (hlink under the cursor)."""
    async def before(pilot):
        pilot.app.view_widget("leases").query_one(FastTable).move_to_key("hlink")
        await pilot.pause()

    assert snap_compare(snapshot_app(tmp_path), run_before=before, terminal_size=size)


def test_a_hostile_envelope_is_drawn_escaped(snap_compare, tmp_path):
    """The envelope dialog of a request whose every field and payload a hostile member wrote."""
    async def before(pilot):
        app = pilot.app
        await pilot.press("4")
        traces = app.view_widget("traces")
        traces.follow = False
        rec = next(r for r in app.traces.view if r.type == "SPC_REQUEST" and "CLICK" in r.node)
        traces.query_one(FastTable).move_to_key((rec.ts, rec.id))
        await pilot.press("enter")
        await screen_is(pilot, EnvelopeScreen, "the envelope dialog")

    assert snap_compare(snapshot_app(tmp_path), run_before=before, terminal_size=(120, 36))


def test_a_csv_cell_never_starts_a_formula():
    from speedtui.services.exports import csv_cell, csv_lines

    for value in (FORMULA, "+1", "-1", "@SUM(A1)"):
        assert csv_cell(value) == "'" + value
    assert not csv_cell("\t=1").startswith(("\t", "="))       # a control character is made visible
    assert csv_cell("billing") == "billing" and csv_cell(3) == "3"
    assert csv_lines([[FORMULA, "a"]]) == ["'" + FORMULA + ",a"]
