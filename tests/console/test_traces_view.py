"""The Traces view: what an empty filter result says, and newest first in time order across journals."""

from .conftest import SIZE, fixture_app_at, run_async


# a filter that matches nothing says so, with the buffered count
@run_async
async def test_empty_filter_result_says_the_filter_hides_records(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "slash", *"nothing-matches-this")
        await pilot.pause()
        table = app.view_widget("traces").query_one("#traces-table")
        assert len(table.rows) == 0 and "matches the filter" in table.empty_text and "62 buffered" in table.empty_text


# newest first is time order across journals
@run_async
async def test_newest_first_is_time_order(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        rows = app.view_widget("traces").query_one("#traces-table").rows
        times = [rows.record(i).ts for i in range(len(rows))]
        assert times == sorted(times, reverse=True)
