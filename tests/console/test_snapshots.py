"""Snapshot tests of every view and dialog, from the deterministic fixture (frozen clock, fixed
files, no processes).  Update with `pytest tests/console --snapshot-update`."""


from speedtui.fixture import FIXED_NOW
from speedtui.models.access import AccessGraph
from speedtui.models.history import AuditEntry, AuditLog, CallHistory, CallRecord
from speedtui.screens.confirm import ConfirmScreen
from speedtui.screens.forms import CallScreen, GrantScreen, LaunchScreen, PickScreen, SendScreen

from .conftest import SIZE


def app_for(fixture_app, **kw):
    kw.setdefault("steady", True)
    return fixture_app(**kw)


def test_leases(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), terminal_size=SIZE)


def test_leases_expiring_and_detail(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["e", "down"], terminal_size=SIZE)


def test_leases_filter(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["slash", "f", "i", "n"], terminal_size=SIZE)


def test_reap_confirm_dialog(snap_compare, fixture_app):
    # batch is the stale entry: sort by status puts stale first
    async def before(pilot):
        pilot.app.registry.sort_column = "status"
        pilot.app.view_widget("leases").refresh_view()
        await pilot.pause()
        await pilot.press("x")

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_fabrics(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["2"], terminal_size=SIZE)


def test_fabric_filter_applies_to_leases(snap_compare, fixture_app):
    async def before(pilot):
        pilot.app.set_fabric("finance")
        pilot.app.action_show("leases")
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_access_with_explainer(snap_compare, fixture_app):
    async def before(pilot):
        await pilot.press("3")
        pilot.app.view_widget("access").set_pair("reports", "gateway", "echo")
        await pilot.pause()

    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_traces(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4"], terminal_size=SIZE)


def test_traces_filtered_paused(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "slash", *"outcome:rej", "escape", "p"],
                        terminal_size=SIZE)


def test_envelope_dialog(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "down", "down", "down", "enter"], terminal_size=SIZE)


def test_follow_call_dialog(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["4", "down", "down", "down", "down", "c"], terminal_size=SIZE)


def test_replay_view(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["5", "down", "down"], terminal_size=SIZE)


def test_audit(snap_compare, fixture_app, fixture_env):
    _, _, paths = fixture_env
    log = AuditLog(paths.audit_log)
    log.record(AuditEntry(FIXED_NOW - 60, "launch", "ops (in-process)",
                          "speed node --dir /fixture/speed --key /fixture/speed.key --name ops --trace"))
    log.record(AuditEntry(FIXED_NOW - 30, "call", "ops → billing.calculateTax",
                          "speed call billing calculateTax '{\"amount\":100}' --as ops --dir /fixture/speed "
                          "--key /fixture/speed.key --timeout 5", result="SUCCESS 4.2ms"))
    log.record(AuditEntry(FIXED_NOW - 10, "reap", "batch", "speed reap batch --dir /fixture/speed", ok=False,
                          result="not stale: left alone"))
    CallHistory(paths.call_history).record(CallRecord(FIXED_NOW - 30, "ops", "billing", "calculateTax",
                                                      {"amount": 100}, 5.0, "SUCCESS", {"tax": 18.0},
                                                      latency_ms=4.2))
    assert snap_compare(app_for(fixture_app), press=["7"], terminal_size=SIZE)


def test_help_screen(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app), press=["question_mark"], terminal_size=SIZE)


def _push(screen_factory):
    async def before(pilot):
        pilot.app.push_screen(screen_factory(pilot.app))
        await pilot.pause()

    return before


def test_launch_dialog(snap_compare, fixture_app):
    before = _push(lambda app: LaunchScreen("/fixture/speed", "/fixture/speed.key", app.graph().names,
                                            ["analytics", "edge", "finance"]))
    assert snap_compare(app_for(fixture_app), run_before=before, press=[*"ops", "tab", *"finance"],
                        terminal_size=SIZE)


def test_grant_dialog(snap_compare, fixture_app):
    before = _push(lambda app: GrantScreen(["gateway"], app.graph(), "gateway", "reports"))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_call_dialog(snap_compare, fixture_app):
    before = _push(lambda app: CallScreen(["gateway"], app.graph(), "/fixture/speed", "/fixture/speed.key",
                                          "gateway", "billing", "calculateTax", {"amount": 250}))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_call_dialog_validation(snap_compare, fixture_app):
    before = _push(lambda app: CallScreen(["gateway"], app.graph(), "/fixture/speed", "/fixture/speed.key",
                                          "gateway", "billing", "nope", None))
    assert snap_compare(app_for(fixture_app), run_before=before, press=["tab", "tab", "tab", "backspace"],
                        terminal_size=SIZE)


def test_send_dialog(snap_compare, fixture_app):
    before = _push(lambda app: SendScreen(["gateway"], app.graph().names, True))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_stop_picker(snap_compare, fixture_app):
    before = _push(lambda app: PickScreen("Stop which of this console's nodes?",
                                          [("ops", "ops (in-process)"), ("worker", "worker (process)")]))
    assert snap_compare(app_for(fixture_app), run_before=before, terminal_size=SIZE)


def test_light_theme(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app, theme="light"), terminal_size=SIZE)


def test_high_contrast_theme(snap_compare, fixture_app):
    assert snap_compare(app_for(fixture_app, theme="high-contrast"), press=["4"], terminal_size=SIZE)
