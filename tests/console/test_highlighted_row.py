"""The actions act where the cursor is: F, m (and g, d) default to the node highlighted in Leases
or Fabrics, as operators of k9s or lazydocker expect; the dialogs opened empty before. A message
that was not delivered comes back in the send dialog, its target and data kept (they were lost)."""

from speedtui.ui.screens.calls import CallScreen, SendScreen

from .conftest import SIZE, fixture_app_at, run_async, wait_for


async def cursor_to(pilot, table, name: str) -> None:
    for _ in range(len(table.rows)):
        if table.cursor_key == name:
            return
        await pilot.press("down")
        await pilot.pause()
    assert table.cursor_key == name


@run_async
async def test_call_and_message_default_to_the_highlighted_node(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.view_widget("leases").query_one("#leases-table")
        await wait_for(pilot, lambda: "ledger" in [r.key for r in table.rows], what="the entries")
        table.focus()
        await cursor_to(pilot, table, "ledger")
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, CallScreen), what="the call dialog")
        assert app.screen.query_one("#call-target").value == "ledger"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CallScreen), what="closed")
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, SendScreen), what="the send dialog")
        assert app.screen.query_one("#snd-to").value == "ledger"
        await pilot.press("escape")
        # in Fabrics, the node under the tree's cursor
        await pilot.press("2")
        view = app.view_widget("fabrics")
        tree = view.query_one("#fabrics-tree")
        tree.focus()
        await wait_for(pilot, lambda: tree.cursor_node is not None, what="the tree's cursor")
        for _ in range(20):
            if view.selected_node():
                break
            await pilot.press("down")
            await pilot.pause()
        node = view.selected_node()
        assert node
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, CallScreen), what="the call dialog from Fabrics")
        assert app.screen.query_one("#call-target").value == node


@run_async
async def test_a_message_not_delivered_comes_back_with_its_target_and_data(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")                              # Traces: no node highlighted
        failures = []
        original = app.controller.runner.done
        app.controller.runner.done = lambda m: (failures.append(m), original(m))
        app.controller.calls._send_chosen(("nobody", "billing", {"n": 1}, False, False, False))
        await wait_for(pilot, lambda: failures, what="the send's outcome")
        assert not failures[0].ok                           # "nobody" is no node of this console
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, SendScreen), what="the send dialog")
        assert app.screen.query_one("#snd-to").value == "billing"
        assert app.screen.query_one("#snd-data").value == '{"n": 1}'
