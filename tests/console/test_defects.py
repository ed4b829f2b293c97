"""Issue 16's defects, each reproduced with the Pilot (or the model it comes from).  Every test
here failed before its fix."""

import json
import os
import subprocess
import sys

from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.models.history import CallRecord
from speedtui.models.liveness import HostFacts
from speedtui.models.registry import build_row
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.services.history import AuditLog, CallHistory
from speedtui.ui.app import make_app
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.forms import GrantScreen, LaunchScreen

from .conftest import SIZE, entry_record, node_id, run_async, wait_for


def fixture_app(tmp_path, name="root", paths=None, **kw):
    root, key_path = build(tmp_path / name)
    paths = paths or Paths(tmp_path / "config", tmp_path / "data")
    kw.setdefault("clock", FrozenClock(FIXED_NOW))
    return root, paths, make_app(root, rt.load_key(key_path), paths=paths, dir_label="/fixture/speed",
                                 steady=True, **kw)


# 2: the audit log and the call history belong to one environment
@run_async
async def test_history_is_kept_per_environment(tmp_path):
    paths = Paths(tmp_path / "config", tmp_path / "data")
    root_a, _ = build(tmp_path / "a")
    CallHistory(paths.call_history(root_a)).record(CallRecord(FIXED_NOW, "ops", "billing", "echo", {}, 5.0, "SUCCESS"))
    root_b, paths, app = fixture_app(tmp_path, "b", paths=paths)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await pilot.pause()
        calls = app.view_widget("audit").query_one("#calls-table")
        assert len(calls.rows) == 0  # a's call is not offered for `r` in b
        assert "/fixture/speed" in str(app.view_widget("audit").query_one("#audit-title").render())
    assert paths.call_history(root_a) != paths.call_history(root_b)


# 3: the explainer's g never offers a node a grant of itself
@run_async
async def test_explainer_grant_is_never_a_self_grant(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.actions.own.alive = app.state.own_nodes = lambda: ["gateway"]  # as if the console had started gateway
        await pilot.press("3")
        app.view_widget("access").set_pair("gateway", "batch", "echo")
        await pilot.pause()
        app.view_widget("access").action_grant()
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="grant dialog")
        await pilot.pause()
        node, peer, _ = app.screen.values()
        assert node != peer and (node, peer) == ("gateway", "batch")


# 4: r re-runs the newest call when calls arrive while the cursor is on the newest
@run_async
async def test_call_history_cursor_follows_the_newest(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    hist = CallHistory(paths.call_history(root))
    hist.record(CallRecord(FIXED_NOW - 2, "ops", "billing", "echo", {"n": 1}, 5.0, "SUCCESS"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await pilot.pause()
        view = app.view_widget("audit")
        hist.record(CallRecord(FIXED_NOW - 1, "ops", "billing", "echo", {"n": 2}, 5.0, "SUCCESS"))
        view.refresh_view(force=True)
        await pilot.pause()
        assert view._selected_call().arguments == {"n": 2}


# 5: n puts the cursor in the name field; Enter in the grant dialog's peer field submits
@run_async
async def test_dialogs_focus_and_submit(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch dialog")
        await pilot.press(*"abc")
        assert app.screen.query_one("#ln-name").value == "abc"
        await pilot.press("escape")
        chosen = []
        app.push_screen(GrantScreen(["gateway"], app.state.graph(), "gateway", ""), chosen.append)
        await pilot.pause()
        app.screen.query_one("#gr-peer").focus()
        await pilot.press(*"ledger", "enter")
        await wait_for(pilot, lambda: chosen, what="the grant submitted on Enter")
        assert chosen == [("gateway", "ledger", True)]


# 6: the fingerprint stays at 80 columns
@run_async
async def test_header_keeps_the_fingerprint_at_80_columns(tmp_path):
    root, key_path = build(tmp_path / "root")
    key = rt.load_key(key_path)
    app = make_app(root, key, paths=Paths(tmp_path / "c", tmp_path / "d"), clock=FrozenClock(FIXED_NOW),
                   dir_label="/dev/shm/speed-demo-k2x9w1q/env", steady=True, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert key.fingerprint in app.export_screenshot()


# 7: a filter that matches nothing says so, with the buffered count
@run_async
async def test_empty_filter_result_says_the_filter_hides_records(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "slash", *"nothing-matches-this")
        await pilot.pause()
        table = app.view_widget("traces").query_one("#traces-table")
        assert len(table.rows) == 0 and "matches the filter" in table.empty_text and "62 buffered" in table.empty_text


# 8: newest first is time order across journals
@run_async
async def test_newest_first_is_time_order(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        rows = app.view_widget("traces").query_one("#traces-table").rows
        times = [rows.record(i).ts for i in range(len(rows))]
        assert times == sorted(times, reverse=True)


# 9: a sorted header keeps its arrow however narrow the column
@run_async
async def test_sorted_header_keeps_its_arrow(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.registry.sort_column = "hb_age"
        app.view_widget("leases").refresh_view(force=True)
        await pilot.pause()
        header = app.view_widget("leases").query_one("#leases-table").render_line(0).text
        assert header.index("HB A") < header.index("▲") < header.index("PID")  # the arrow, in its column


# 10: the fabrics tree has a cursor at once, j/k move it, Enter filters without folding
@run_async
async def test_fabrics_tree_keys(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        tree = app.view_widget("fabrics").query_one("#fabrics-tree")
        assert tree.cursor_line == 0 and tree.cursor_node is not None
        await pilot.press("j")
        assert tree.cursor_line == 1
        await pilot.press("k", "enter")
        await wait_for(pilot, lambda: app.state.fabric == "analytics", what="fabric filter")
        await pilot.pause()
        branch = app.view_widget("fabrics").query_one("#fabrics-tree").root.children[0]
        assert branch.is_expanded and "▶" not in str(branch.label)


# 11: a node whose pid is gone: the reason is shown, its lease time left too, its uptime stops
def test_dead_pid_reason_and_uptime():
    e = entry_record("a", {"name": "a", "id": node_id("a"), "pid": 7, "host": "h", "status": "online",
                           "startupTimestamp": 1000.0, "lastHeartbeat": 1990.0, "leaseSeconds": 30})
    row = build_row(e, 2000.0, facts=HostFacts("h", None, None, lambda pid: False))
    later = build_row(e, 2010.0, facts=HostFacts("h", None, None, lambda pid: False))
    assert row.status == "stale" and "pid 7" in row.reason and "gone" in row.reason
    assert row.remaining > 0 and row.uptime == later.uptime == 990.0


@run_async
async def test_dead_node_row_and_detail(tmp_path):
    from speedtui.ui.views.leases import lease_cell

    e = entry_record("a", {"name": "a", "id": node_id("a"), "pid": 7, "host": "h", "status": "online",
                           "startupTimestamp": 1000.0, "lastHeartbeat": 1990.0, "leaseSeconds": 30})
    row = build_row(e, 2000.0, facts=HostFacts("h", None, None, lambda pid: False))
    assert lease_cell(row).plain != "expired"


# 12: --readonly offers no action in the footer, and no Reap button
@run_async
async def test_readonly_offers_no_action(tmp_path):
    root, paths, app = fixture_app(tmp_path, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = {b.key for (_n, b, enabled, _t) in app.screen.active_bindings.values() if enabled and b.show}
        assert not shown & {"n", "d", "g", "F", "m", "x"}
        assert not app.query("#leases-reap")


# 13: $SPEED_DIR and $SPEED_KEY are honoured as by `speed`
def test_speed_dir_and_key_from_the_environment(tmp_path):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "c"), XDG_DATA_HOME=str(tmp_path / "d"),
               SPEED_DIR=str(tmp_path / "from-env"), SPEED_KEY=str(tmp_path / "env.key"))
    p = subprocess.run([sys.executable, "-m", "speedtui"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and str(tmp_path / "from-env") in p.stderr and "/dev/shm/speed " not in p.stderr


# 15: d asks before stopping, and the demo's traffic driver is not offered
def test_demo_driver_is_not_stoppable(tmp_path):
    from speedtui.services.actions import ActionService, OwnNode
    from speedtui.services.bridge import Bridge
    from speedtui.models.commands import NodeSpec

    key_path = tmp_path / "k.key"
    rt.generate_key_file(key_path)
    acts = ActionService(tmp_path, rt.load_key(key_path), Bridge(), AuditLog(tmp_path / "a"), CallHistory(tmp_path / "c"))
    acts.own.add(OwnNode(spec=NodeSpec("ops"), stoppable=False))
    acts.own.add(OwnNode(spec=NodeSpec("mine")))
    assert acts.own.stoppable() == ["mine"]


# error texts: the code once, no class names, the console's words
def test_call_errors_in_the_consoles_words():
    from speed_runtime import AccessDeniedError, NodeUnavailableError

    from speedtui.models.errors import describe_failure

    text = describe_failure(AccessDeniedError("node billing does not allow ops; grant it on billing (allow ops)"),
                            frozenset({"billing"}))
    assert text.count("ACCESS_DENIED") == 1 and "press g" in text and "allow(" not in text
    text = describe_failure(NodeUnavailableError("billing"))
    assert "Error" not in text and "billing" in text


# 5: at 80x24 the call dialog's buttons are on screen
@run_async
async def test_call_dialog_buttons_on_screen_at_80x24(tmp_path):
    from speedtui.ui.screens.calls import CallScreen

    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(CallScreen(["gateway"], app.state.graph(), "/r", "/k", "gateway", "billing", "calculateTax"))
        await pilot.pause()
        for bid in ("#call-go", "#call-copy", "#call-close"):
            button = app.screen.query_one(bid)
            x, y = button.region.x + 1, button.region.y + 1
            assert 0 <= y < 24 and app.screen.get_widget_at(x, y)[0] is button


# on/off controls read without colour: the mark is drawn only when on
@run_async
async def test_toggles_read_without_colour(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch dialog")
        await pilot.pause()
        on = app.screen.query_one("#ln-svc-echo")
        off = app.screen.query_one("#ln-svc-fail")
        assert "X" in str(on.render()) and "X" not in str(off.render())


# the lease detail pane is resizable
@run_async
async def test_lease_detail_grows_and_shrinks(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        detail = app.view_widget("leases").query_one("#leases-detail")
        before = detail.size.height
        await pilot.press("plus", "plus")
        await pilot.pause()
        bigger = detail.size.height
        await pilot.press("minus", "minus", "minus", "minus")
        await pilot.pause()
        assert bigger > before and detail.size.height == before  # the table is back to all its rows


@run_async
async def test_the_envelope_inspector_opens_with_its_sealed_bytes(tmp_path):
    """Enter on a traced envelope opened nothing: the inspector named an undefined variable for
    the sealed bytes (NameError), and the snapshot of the dialog showed the traces behind it."""
    from speedtui.ui.screens.envelope import EnvelopeScreen

    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "down", "down", "down", "enter")  # gateway's MESSAGE seq 9, sealed bytes kept
        await wait_for(pilot, lambda: isinstance(app.screen, EnvelopeScreen), what="the inspector")
        await pilot.pause()
        import html

        shot = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "sealed bytes (154)" in shot and "authentic" in shot


@run_async
async def test_every_tab_is_whole_at_80_columns(fixture_app):
    """Nine views: at 80 columns the numbered tabs scrolled the last ones off ("8 Secu"); narrow,
    they drop their numbers (the keys 1-9 stay), wide they keep them."""
    from textual.widgets import Tab

    app = fixture_app(steady=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        tabs = list(app.query(Tab))
        assert len(tabs) == 9 and all(t.region.right <= 80 and t.region.width > 0 for t in tabs)
        assert [str(t.label) for t in tabs][:2] == ["Leases", "Fabrics"]
        await pilot.resize_terminal(120, 36)
        await pilot.pause()
        assert str(app.query(Tab).first().label) == "1 Leases"
