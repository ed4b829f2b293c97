"""What an operator who lives in the console expects (issue 16): jump, copy, export, the
interactive matrix, trace comparisons and filter history, relative times, lease history split."""

import json

from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.models.query import parse_query
from speedtui.models.traces import TraceStore, parse_record
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.services.history import AuditLog
from speedtui.ui.app import make_app
from speedtui.ui.screens.forms import GrantScreen

from .conftest import SIZE, run_async, wait_for


def fixture_app(tmp_path, **kw):
    root, key_path = build(tmp_path / "root")
    paths = Paths(tmp_path / "config", tmp_path / "data")
    return root, paths, make_app(root, rt.load_key(key_path), paths=paths, clock=FrozenClock(FIXED_NOW),
                                 dir_label="/fixture/speed", steady=True, **kw)


@run_async
async def test_jump_to_a_node_a_service_and_a_view(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7", "colon", *"led", "enter")
        await wait_for(pilot, lambda: app.active_view() == "leases", what="leases")
        assert app.view_widget("leases").query_one("#leases-table").cursor_key == "ledger"
        await pilot.press("colon", *"calculateTax", "enter")
        await wait_for(pilot, lambda: [r.key for r in app.view_widget("leases").query_one("#leases-table").rows]
                       == ["billing"], what="the nodes offering calculateTax")
        await pilot.press("escape", "colon", *"trac", "enter")
        await wait_for(pilot, lambda: app.active_view() == "traces", what="traces")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Node: ledger" in titles and "Service: calculateTax" in titles
        helps = [c.help for c in app.get_system_commands(app.screen) if c.title == "Fire SPC call"]
        assert helps and helps[0].startswith("key F")


@run_async
async def test_export_filtered_traces_is_written_shown_and_audited(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "slash", *"outcome:rej", "enter", "E")
        await wait_for(pilot, lambda: list((paths.env_dir(root) / "exports").glob("traces-*.jsonl")), what="export")
        path = next((paths.env_dir(root) / "exports").glob("traces-*.jsonl"))
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert len(lines) == 7 and {r["outcome"] for r in lines} == {"rejected"}  # billing's two, eve's five at gateway
        assert (path.stat().st_mode & 0o777) == 0o600
        audit = AuditLog(paths.audit_log(root)).entries()[-1]
        assert audit.action == "export" and str(path) in audit.command
        await pilot.press("3", "E")
        await wait_for(pilot, lambda: list((paths.env_dir(root) / "exports").glob("access-matrix-*.json")),
                       what="matrix export")
        csv_text = next((paths.env_dir(root) / "exports").glob("access-matrix-*.csv")).read_text()
        assert csv_text.splitlines()[0].startswith("may write to →,audit,batch,billing")


@run_async
async def test_copy_entry_and_call_line(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "y")  # billing
        await wait_for(pilot, lambda: app.clipboard, what="the copy")
        assert json.loads(app.clipboard)["name"] == "billing"
        await pilot.press("4")
        rows = app.view_widget("traces").query_one("#traces-table").rows
        i = next(i for i in range(len(rows)) if rows.record(i).type == "SPC_REQUEST" and rows.record(i).dir == "out")
        app.view_widget("traces").query_one("#traces-table").cursor = i
        await pilot.press("y")
        await wait_for(pilot, lambda: app.clipboard.startswith("speed call billing calculateTax"), what="the line")
        assert '{"amount":800}' in app.clipboard and "--as gateway" in app.clipboard


@run_async
async def test_matrix_cells_explain_and_grant(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.actions.own.alive = app.state.own_nodes = lambda: ["billing"]  # as if it had started billing
        await pilot.press("3")
        matrix = app.view_widget("access").query_one("#access-matrix")
        assert matrix.has_focus and matrix.pair() == ("audit", "batch")
        # (the fixture's unreadable registry file "broken" is no row of the matrix)
        await pilot.press("down", "down", "down", "right", "enter")  # gateway → billing
        assert matrix.pair() == ("gateway", "billing")
        await pilot.pause()
        assert "gateway can call" in str(app.view_widget("access").query_one("#ex-result").render())
        await pilot.press("up", "up", "g")  # batch → billing: billing allowing batch
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="grant dialog")
        await pilot.pause()
        node, peer, grant = app.screen.values()
        assert (node, peer, grant) == ("billing", "batch", True)


def test_trace_comparisons():
    s = TraceStore()
    recs = [parse_record({"ts": 1.0 + i, "node": "a", "dir": "in", "peer": "b", "type": "SPC_RESPONSE", "seq": i,
                          "size": 1000 * i, "outcome": "rejected" if i == 3 else "accepted",
                          "reason": "bad_tag" if i == 3 else "", "latencyMs": 20.0 * i}) for i in range(1, 8)]
    s.add(recs)
    def seqs(q):
        s.set_filter(parse_query(q))
        return [r.seq for r in s.view]
    assert seqs("latency>50ms") == [3, 4, 5, 6, 7]
    assert seqs("latency>0.1s") == [6, 7]
    assert seqs("seq>=6") == [6, 7]
    assert seqs("size>4k") == [5, 6, 7]
    assert seqs("reason:bad_tag") == [3]
    assert seqs("size<1.5k seq>0") == [1]


@run_async
async def test_filter_history_and_relative_time(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "slash", *"outcome:rej", "enter", "slash", "ctrl+u", *"type:req", "enter")
        await pilot.press("slash", "ctrl+u", "up")
        box = app.view_widget("traces").query_one("#traces-filter")
        assert box.value == "type:req"
        await pilot.press("up")
        assert box.value == "outcome:rej"
        await pilot.press("escape", "T")
        await pilot.pause()
        row = app.view_widget("traces").query_one("#traces-table").rows[0]
        assert str(row.cells[0]).startswith("-")  # relative to now (the frozen clock)


@run_async
async def test_lease_history_separates_own_events_from_observations(tmp_path):
    root, paths, app = fixture_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "down", "down", "down")  # ledger
        await pilot.pause()
        text = "\n".join(s.text for s in app.view_widget("leases").query_one("#leases-detail-body").lines)
        own, seen = text.split("what its peers observed:")
        assert "none journaled" in own  # ledger keeps no journal: everything known comes from peers
        assert "observed_expiry  seen by gateway" in seen and "renewed_late     seen by billing" in seen
        await pilot.press("up")  # gateway: its own registration, and billing seeing it join
        await pilot.pause()
        text = "\n".join(s.text for s in app.view_widget("leases").query_one("#leases-detail-body").lines)
        own, seen = text.split("what its peers observed:")
        assert "registered" in own and "seen by" not in own
        assert "observed_join    seen by billing" in seen and "registered" not in seen
