"""Issue 15: on a real environment (`speed node` processes started by the test) a console with
no node of its own opens F and m, says what is missing and offers to start a console node."""

from pathlib import Path

from speedtui.services import runtime as rt
from speedtui.ui.app import make_app
from speedtui.paths import Paths

from .conftest import SIZE, run_async, wait_for


def environment(procs):
    procs.start("gateway", allow=["billing"], services=["echo"], trace=True)
    procs.start("billing", allow=["gateway"], services=["calculateTax", "echo"], trace=True)


@run_async
async def test_call_and_message_dialogs_without_a_node_of_its_own(procs, root, key_path, tmp_path):
    environment(procs)
    app = make_app(Path(root), rt.load_key(key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: {"gateway", "billing"} <= set(app.registry.by_name()), what="the nodes")
        assert app.actions.own_alive() == []
        for key, dialog_id in (("F", "#call-dialog"), ("m", "#send-dialog")):
            await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.query(dialog_id), what=f"the dialog of {key}")
            for _ in range(10):  # the crash came within a second of the dialog appearing
                await pilot.pause(0.1)
            assert app.is_running and app.screen.query(dialog_id)
            text = str(app.screen.query_one(".no-own-node").render())
            assert "no node of its own" in text and "console-" in text
            assert app.screen.query("#start-console-node")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.screen.query(dialog_id), what="the dialog closed")
        assert app.is_running
