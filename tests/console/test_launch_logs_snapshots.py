"""Snapshots of the launch dialog (every `speed node` option, a field's sentence beside it, the line
it makes) and of the logs screen (every node's lines marked with their node, a search highlighted,
a node's hostile output as text), at 80x24 and 120x36, from the deterministic fixture."""

import base64
from pathlib import Path

import pytest

from speedtui.environments.fixture import node_logs
from speedtui.services.own_nodes import NodeLogs
from speedtui.ui.screens.forms import LaunchScreen

from . import hostile

SIZES = [(80, 24), (120, 36)]
sized = pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
OPERATOR = base64.b64encode(bytes(range(32))).decode()  # operator public keys: fixed, so the line is too
OWN = base64.b64encode(bytes(range(32, 64))).decode()


@sized
def test_launch_dialog_as_speed_node(size, snap_compare, fixture_app):
    async def before(pilot):
        pilot.app.push_screen(LaunchScreen("/fixture/speed", "/fixture/speed.key", pilot.app.state.graph().names,
                                           ["analytics", "edge", "finance"], operator_public=OPERATOR,
                                           operator_fingerprint="16ccdefa0123abcd", own_key_public=OWN))
        await pilot.pause()
        scr = pilot.app.screen
        scr.query_one("#ln-name").value = "billing"
        scr.query_one("#ln-proc").value = True
        scr.query_one("#ln-groups").value = "finance"
        scr.query_one("#ln-feat-quota").value = True
        scr.query_one("#ln-quota").value = "rate=200 pending"
        await pilot.pause()

    assert snap_compare(fixture_app(steady=True), run_before=before, terminal_size=size)


def fixed_logs() -> NodeLogs:
    logs = node_logs(messages=3)
    logs.add("billing", "stderr", "speed: node billing: " + hostile.values(Path("/fixture/shots"))["hlink"])
    logs.add("billing", "stdout", "[link=https://example.invalid]click me[/link] " + hostile.BROKEN_MARKUP)
    logs.end("billing", "exited with status 0")
    return logs


@sized
def test_logs_screen_all_nodes_searched(size, snap_compare, fixture_app):
    app = fixture_app(steady=True)
    app.actions.own.logs = fixed_logs()

    assert snap_compare(app, press=["L", "slash", *"seq", "enter"], terminal_size=size)


@sized
def test_logs_screen_one_node(size, snap_compare, fixture_app):
    app = fixture_app(steady=True)
    app.actions.own.logs = fixed_logs()

    assert snap_compare(app, press=["L", "s", "s"], terminal_size=size)
