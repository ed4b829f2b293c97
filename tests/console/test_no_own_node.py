"""Issue 15: on a real environment (`speed node` processes started by the test) a console with
no node of its own opens F and m, says what is missing and offers to start a console node."""

import json
from pathlib import Path

import pytest

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
        assert app.actions.own.alive() == []
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


@run_async
async def test_start_console_node_then_call_a_speed_node_process(procs, root, key_path, tmp_path):
    from speedtui.services.processes import console_node_name
    from speedtui.ui.screens.calls import CallScreen

    me = console_node_name()
    procs.start("billing", allow=[me], services=["calculateTax"], trace=True)
    app = make_app(Path(root), rt.load_key(key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
        await pilot.press("F")
        await wait_for(pilot, lambda: app.screen.query("#start-console-node"), what="the offer")
        await pilot.click("#start-console-node")
        # the node registers, and the call dialog opens again with it as the caller
        await wait_for(pilot, lambda: (Path(root) / "speed_registry" / f"{me}.node").exists(), what="its entry")
        await wait_for(pilot, lambda: isinstance(app.screen, CallScreen) and app.screen.own == [me],
                       what="the call dialog again")
        await pilot.pause()
        assert app.screen.values()["caller"] == me
        app.screen.query_one("#call-target").value = "billing"
        app.screen.query_one("#call-service").value = "calculateTax"
        app.screen.query_one("#call-args").value = '{"amount": 100}'
        await pilot.pause()
        await pilot.click("#call-go")
        # billing allows the console node; the console node must allow billing for the answer
        await wait_for(pilot, lambda: str(app.screen.query_one("#call-result").render()).strip()
                       not in ("", "calling…"), what="an answer")
        result = str(app.screen.query_one("#call-result").render())
        assert "ACCESS_DENIED" in result and "press g" in result and "allow billing" in result
        # as the error says: g on the console's node, allow billing; then the call goes through
        await pilot.press("escape")
        app.controller.grants.open(me, "billing")
        await wait_for(pilot, lambda: app.screen.query("#gr-go"), what="the grant dialog")
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: "billing" in json.loads((Path(root) / "speed_registry" / f"{me}.node")
                                                              .read_text()).get("allow", []), what="the grant")
        app.controller.calls.open(me, "billing", "calculateTax", {"amount": 100})
        await wait_for(pilot, lambda: app.screen.query("#call-go"), what="the call dialog")
        await pilot.click("#call-go")
        await wait_for(pilot, lambda: "SUCCESS" in str(app.screen.query_one("#call-result").render()),
                       what="the answer")
        assert '"tax": 18.0' in str(app.screen.query_one("#call-result").render())
        assert app.is_running


@pytest.mark.parametrize("dialog", ["call", "send"])
@run_async
async def test_starting_the_console_node_keeps_what_the_dialog_held(procs, root, key_path, tmp_path, dialog):
    """Found on a real environment: the call dialog, opened on billing with a service and arguments,
    came back empty after "Start console-…" (the operator typed everything again); so did the send
    dialog. Both come back as they were, the console's node as the sender."""
    from speedtui.services.processes import console_node_name
    from speedtui.ui.screens.calls import CallScreen, SendScreen

    me = console_node_name()
    environment(procs)
    app = make_app(Path(root), rt.load_key(key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: {"gateway", "billing"} <= set(app.registry.by_name()), what="the nodes")
        if dialog == "call":
            app.controller.calls.open(None, "billing", "calculateTax", '{"amount": 1', 7.5)  # arguments half-typed
        else:
            app.controller.calls.send("gateway")
        await wait_for(pilot, lambda: app.screen.query("#start-console-node"), what="the offer")
        if dialog == "send":
            app.screen.query_one("#snd-data").value = '{"invoice": 7}'
        await pilot.click("#start-console-node")
        screen = CallScreen if dialog == "call" else SendScreen
        await wait_for(pilot, lambda: isinstance(app.screen, screen) and app.screen.own == [me],
                       what="the dialog again")
        await pilot.pause()
        if dialog == "call":
            assert app.screen.query_one("#call-args").value == '{"amount": 1'
            assert {k: app.screen.values()[k] for k in ("caller", "target", "service", "timeout")} == dict(
                caller=me, target="billing", service="calculateTax", timeout=7.5)
        else:
            assert app.screen.query_one("#snd-from").value == me
            assert app.screen.query_one("#snd-to").value == "gateway"
            assert app.screen.query_one("#snd-data").value == '{"invoice": 7}'


@run_async
async def test_a_member_holding_the_console_nodes_name_does_not_hold_up_the_call_dialog(procs, root, key_path,
                                                                                       tmp_path):
    """Red team: any member may register `console-<user>`; "Start console-…" then failed with "choose
    another name", which the call dialog offers no field for. The console's node takes the name
    with a suffix nobody could have guessed, says so, and the dialog comes back with it."""
    import re

    from speedtui.services.processes import console_node_name
    from speedtui.ui.screens.calls import CallScreen

    me = console_node_name()
    procs.start(me, allow=["billing"])                     # the squatter: a live `speed node` process
    procs.start("billing", allow=[me], services=["calculateTax"])
    app = make_app(Path(root), rt.load_key(key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    told = []
    app.notify = lambda message, **kw: told.append(str(message))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: {me, "billing"} <= set(app.registry.by_name()), what="the nodes")
        app.controller.calls.open(None, "billing", "calculateTax", '{"amount": 1}')
        await wait_for(pilot, lambda: app.screen.query("#start-console-node"), what="the offer")
        await pilot.click("#start-console-node")
        await wait_for(pilot, lambda: isinstance(app.screen, CallScreen) and len(app.screen.own) == 1,
                       what="the call dialog again")
        mine = app.screen.own[0]
        assert re.fullmatch(re.escape(me) + r"-[0-9a-f]{6}", mine), mine
        assert (Path(root) / "speed_registry" / f"{mine}.node").exists()
        assert f"{mine} is running ({me} is held by another live process of this environment)" in told
        await pilot.pause()
        assert app.screen.values()["caller"] == mine
        assert app.is_running
