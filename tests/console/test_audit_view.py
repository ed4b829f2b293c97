"""The Audit view: the audit log and the call history of one environment, and `r` on the newest call."""

from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.models.history import CallRecord
from speedtui.paths import Paths
from speedtui.services.history import CallHistory

from .conftest import SIZE, fixture_app_at, run_async


# the audit log and the call history belong to one environment
@run_async
async def test_history_is_kept_per_environment(tmp_path):
    paths = Paths(tmp_path / "config", tmp_path / "data")
    root_a, _ = build(tmp_path / "a")
    CallHistory(paths.call_history(root_a)).record(CallRecord(FIXED_NOW, "ops", "billing", "echo", {}, 5.0, "SUCCESS"))
    root_b, paths, app = fixture_app_at(tmp_path, "b", paths=paths)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await pilot.pause()
        calls = app.view_widget("audit").query_one("#calls-table")
        assert len(calls.rows) == 0  # a's call is not offered for `r` in b
        assert "/fixture/speed" in str(app.view_widget("audit").query_one("#audit-title").render())
    assert paths.call_history(root_a) != paths.call_history(root_b)


# r re-runs the newest call when calls arrive while the cursor is on the newest
@run_async
async def test_call_history_cursor_follows_the_newest(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
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
