"""Snapshot tests of every view and dialog at 80x24, 120x36 and 160x48, from the deterministic
fixture (frozen clock, fixed files, no processes).  Update with
`pytest tests/console --snapshot-update`."""


import pytest

from tests.console.conftest import wait_for

from speedtui.environments.fixture import FIXED_NOW
from speedtui.models.access import AccessGraph
from speedtui.models.history import AuditEntry, CallRecord
from speedtui.services.history import AuditLog, CallHistory
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.calls import CallScreen, SendScreen
from speedtui.ui.screens.forms import GrantScreen, LaunchScreen, PickScreen

from speedtui.ui.screens.jump import JumpScreen

SIZES = [(80, 24), (120, 36), (160, 48)]
sized = pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])


def app_for(fixture_app, **kw):
    kw.setdefault("steady", True)
    return fixture_app(**kw)


@sized
def test_leases(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), terminal_size=size)


@sized
def test_leases_expiring_and_detail(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["e", "down"], terminal_size=size)


@sized
def test_leases_filter(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["slash", "f", "i", "n"], terminal_size=size)


@sized
def test_reap_confirm_dialog(size, snap_compare, fixture_app):
    # batch is the stale entry: sort by status puts stale first
    async def before(pilot):
        pilot.app.registry.sort_column = "status"
        pilot.app.view_widget("leases").refresh_view()
        await pilot.pause()
        await pilot.press("x")

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_fabrics(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["2"], terminal_size=size)


@sized
def test_fabric_filter_applies_to_leases(size, snap_compare, fixture_app):
    async def before(pilot):
        pilot.app.nav.set_fabric("finance")
        pilot.app.action_show("leases")
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_access_with_explainer(size, snap_compare, fixture_app):
    async def before(pilot):
        await pilot.press("3")
        pilot.app.view_widget("access").set_pair("reports", "gateway", "echo")
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_traces(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4"], terminal_size=size)


@sized
def test_traces_filtered_paused(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "slash", *"outcome:rej", "escape", "p"],
                        terminal_size=size)


@sized
def test_envelope_dialog(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "down", "down", "down", "enter"], terminal_size=size)


@sized
def test_follow_call_dialog(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "down", "down", "down", "down", "c"], terminal_size=size)


@sized
def test_replay_view(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["5", "down", "down"], terminal_size=size)


@sized
def test_audit(size, snap_compare, fixture_app, fixture_env):
    root, _, paths = fixture_env
    log = AuditLog(paths.audit_log(root))
    log.record(AuditEntry(FIXED_NOW - 60, "launch", "ops (in-process)",
                          "speed node --dir /fixture/speed --key /fixture/speed.key --name ops --trace"))
    log.record(AuditEntry(FIXED_NOW - 30, "call", "ops → billing.calculateTax",
                          "speed call billing calculateTax '{\"amount\":100}' --as ops --dir /fixture/speed "
                          "--key /fixture/speed.key --timeout 5", result="SUCCESS 4.2ms"))
    log.record(AuditEntry(FIXED_NOW - 10, "reap", "batch", "speed reap batch --dir /fixture/speed", ok=False,
                          result="not stale: left alone"))
    CallHistory(paths.call_history(root)).record(CallRecord(FIXED_NOW - 30, "ops", "billing", "calculateTax",
                                                      {"amount": 100}, 5.0, "SUCCESS", {"tax": 18.0},
                                                      latency_ms=4.2))
    assert snap_compare(app_for(fixture_app), press=["7"], terminal_size=size)


@sized
def test_help_screen(size, snap_compare, fixture_app, monkeypatch):
    # the help names the config file, which lives under pytest's temporary directory: its length
    # depends on the user running the tests (/tmp/pytest-of-USER/...) and moved the scroll bar
    from speedtui.ui import app as app_module
    real = app_module.HelpScreen
    monkeypatch.setattr(app_module, "HelpScreen", lambda rows, _path: real(rows, "/fixture/config/config.json"))
    assert snap_compare(app_for(fixture_app), press=["question_mark"], terminal_size=size)


def _push(screen_factory):
    async def before(pilot):
        pilot.app.push_screen(screen_factory(pilot.app))
        await pilot.pause()

    return before


@sized
def test_launch_dialog(size, snap_compare, fixture_app):
    before = _push(lambda app: LaunchScreen("/fixture/speed", "/fixture/speed.key", app.state.graph().names,
                                            ["analytics", "edge", "finance"]))
    assert snap_compare(app_for(fixture_app), run_before=before, press=[*"ops", "tab", *"finance"],
                        terminal_size=size)


@sized
def test_grant_dialog(size, snap_compare, fixture_app):
    before = _push(lambda app: GrantScreen(["gateway"], app.state.graph(), "gateway", "reports"))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_call_dialog(size, snap_compare, fixture_app):
    before = _push(lambda app: CallScreen(["gateway"], app.state.graph(), "/fixture/speed", "/fixture/speed.key",
                                          "gateway", "billing", "calculateTax", {"amount": 250}))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_call_dialog_validation(size, snap_compare, fixture_app):
    before = _push(lambda app: CallScreen(["gateway"], app.state.graph(), "/fixture/speed", "/fixture/speed.key",
                                          "gateway", "billing", "nope", None))
    assert snap_compare(app_for(fixture_app), run_before=before, press=["tab", "tab", "tab", "backspace"],
                        terminal_size=size)


@sized
def test_send_dialog(size, snap_compare, fixture_app):
    before = _push(lambda app: SendScreen(["gateway"], app.state.graph().names, True))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_stop_picker(size, snap_compare, fixture_app):
    before = _push(lambda app: PickScreen("Stop which of this console's nodes?",
                                          [("ops", "ops (in-process)"), ("worker", "worker (process)")]))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_light_theme(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app, theme="light"), terminal_size=size)


@sized
def test_high_contrast_theme(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app, theme="high-contrast"), press=["4"], terminal_size=size)


@sized
def test_call_dialog_without_a_node_of_its_own(size, snap_compare, fixture_app):
    before = _push(lambda app: CallScreen([], app.state.graph(), "/fixture/speed", "/fixture/speed.key"))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_send_dialog_without_a_node_of_its_own(size, snap_compare, fixture_app):
    before = _push(lambda app: SendScreen([], app.state.graph().names))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_jump_dialog(size, snap_compare, fixture_app):
    before = _push(lambda app: JumpScreen(app.nav.jump_targets()))
    assert snap_compare(app_for(fixture_app), run_before=before, press=[*"bil"], terminal_size=size)


@sized
def test_stop_confirmation(size, snap_compare, fixture_app):
    before = _push(lambda app: ConfirmScreen("Stop node", "Stop ops? It deregisters and its inbox stops being "
                                             "read; calls to it fail until it is started again.", yes="Stop"))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_access_matrix_cursor(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["3", "down", "down", "right", "right", "enter"],
                        terminal_size=size)


@sized
def test_readonly(size, snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app, readonly=True), terminal_size=size)


@sized
def test_wrong_key_banner(size, snap_compare, fixture_env, tmp_path):
    from speedtui.paths import Paths
    from speedtui.services import runtime as rt
    from speedtui.services.clock import FrozenClock
    from speedtui.ui.app import make_app

    import base64
    import os

    root, _, _ = fixture_env
    other = tmp_path / "other.key"  # a fixed key that is not the environment's
    fd = os.open(other, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"SPEED-KEY-V1\n" + base64.b64encode(bytes(range(100, 132))) + b"\n")
    os.close(fd)
    app = make_app(root, rt.load_key(other), clock=FrozenClock(FIXED_NOW), steady=True, dir_label="/fixture/speed",
                   paths=Paths(tmp_path / "c2", tmp_path / "d2"))
    assert snap_compare(app, press=["4"], terminal_size=size)


@sized
def test_time_travel(size, snap_compare, fixture_app):
    """Half a minute back: batch's expiry, the traffic around it, grants from the console's scan."""
    from speedtui.ui.screens.timetravel import TimeTravelScreen

    from .conftest import wait_for

    async def before(pilot):
        pilot.app.action_time_travel(FIXED_NOW - 30.0)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, TimeTravelScreen)
                       and pilot.app.screen.moment is not None, what="the moment")
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_health_report_on_the_row_and_in_the_history(size, snap_compare, fixture_app):
    # gateway reported a registry lock held for long, a moment ago (⚠ on its row)
    assert snap_compare(app_for(fixture_app), press=["down", "down", "down", "down"], terminal_size=size)


@sized
def test_registry_lock_holder_banner(size, snap_compare, fixture_app):
    from speedtui.services.registry import LockState

    async def before(pilot):
        pilot.app.bridge.push_lock(LockState(4242, 12.0))
        pilot.app.drain()
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_security(size, snap_compare, fixture_app):
    """Threat scores per receiver and sender: eve quarantined at gateway (quota), billing's rejections."""
    async def before(pilot):
        await pilot.press("8")

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_durable(size, snap_compare, fixture_app):
    """What waits in the outboxes of billing and ledger (read by a worker), target states and expiries."""
    from .conftest import wait_for

    async def before(pilot):
        await pilot.press("9")
        view = pilot.app.view_widget("durable")
        await wait_for(pilot, lambda: view.listed_at is not None, what="the outboxes")

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


@sized
def test_traces_chunked_message_expanded(size, snap_compare, fixture_app):
    """The chunked message from billing to gateway, its sent row expanded to its three chunks."""
    from speedtui.environments.fixture import CHUNKED_ID

    async def before(pilot):
        await pilot.press("4")
        view = pilot.app.view_widget("traces")
        table = view.query_one("#traces-table")
        rows = [table.rows.record(i) for i in range(len(table.rows))]
        table.cursor = next(i for i, r in enumerate(rows) if r.message_id == CHUNKED_ID and r.event == "sent")
        await pilot.press("enter", "down", "down", "down")  # onto its chunks, below it (older)
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=size)


OPERATOR_SIZES = [(80, 24), (120, 36), (160, 48)]


def operator_fixture_app(fixture_env, **kw):
    """The fixture with a fixed operator key that billing and ledger trust (their entries list
    its fingerprint, as `speed node --operator` writes them)."""
    import json

    from speed_runtime.core.control import OperatorKey
    from speedtui.services.clock import FrozenClock
    from speedtui.services.operator import OperatorChoice
    from speedtui.ui.app import make_app

    root, key, paths = fixture_env
    op = OperatorKey(bytes(range(32)))
    for name in ("billing", "ledger"):
        path = root / "speed_registry" / f"{name}.node"
        entry = json.loads(path.read_text())
        entry.update(features=["control"], operators=[op.fingerprint])
        path.write_text(json.dumps(entry, indent=1))
    choice = OperatorChoice(key=op, path=root.parent / "operator.key")
    return make_app(root, key, paths=paths, clock=FrozenClock(FIXED_NOW), dir_label="/fixture/speed", steady=True,
                    operator=choice, **kw)


@pytest.mark.parametrize("size", OPERATOR_SIZES, ids=[f"{w}x{h}" for w, h in OPERATOR_SIZES])
def test_operator_fingerprint_in_the_header(size, snap_compare, fixture_env):
    assert snap_compare(operator_fixture_app(fixture_env), terminal_size=size)


@pytest.mark.parametrize("size", OPERATOR_SIZES, ids=[f"{w}x{h}" for w, h in OPERATOR_SIZES])
def test_access_marks_the_nodes_the_operator_administers(size, snap_compare, fixture_env):
    assert snap_compare(operator_fixture_app(fixture_env), press=["3"], terminal_size=size)
