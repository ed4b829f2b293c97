"""The views of the registry: Leases (sort arrow, a node whose pid is gone, the detail pane's size)
and the Fabrics tree's keys."""

from speedtui.models.liveness import HostFacts
from speedtui.models.registry import build_row

from .conftest import SIZE, entry_record, fixture_app_at, node_id, run_async, wait_for


# a sorted header keeps its arrow however narrow the column
@run_async
async def test_sorted_header_keeps_its_arrow(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.registry.sort_column = "hb_age"
        app.view_widget("leases").refresh_view(force=True)
        await pilot.pause()
        header = app.view_widget("leases").query_one("#leases-table").render_line(0).text
        assert header.index("HB A") < header.index("▲") < header.index("PID")  # the arrow, in its column


# a node whose pid is gone: the reason is shown, its lease time left too, its uptime stops
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


# the lease detail pane is resizable
@run_async
async def test_lease_detail_grows_and_shrinks(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
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


# the fabrics tree: a fabric's name, health and counts (and a node's name and what it offers) read
# apart; a cursor at once, j/k move it, Enter filters without folding
@run_async
async def test_fabrics_tree_labels_and_keys(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        tree = app.view_widget("fabrics").query_one("#fabrics-tree")
        analytics = tree.root.children[0]
        assert analytics.label.plain == "analytics · down · 0/2 online, 1 leaving, 1 stale"
        assert [c.label.plain for c in analytics.children][1] == "◐ reports · services: echo · allows 1"
        assert tree.cursor_line == 0 and tree.cursor_node is not None
        await pilot.press("j")
        assert tree.cursor_line == 1
        await pilot.press("k", "enter")
        await wait_for(pilot, lambda: app.state.fabric == "analytics", what="fabric filter")
        await pilot.pause()
        branch = app.view_widget("fabrics").query_one("#fabrics-tree").root.children[0]
        assert branch.is_expanded and "▶" not in str(branch.label)
