"""Memory that must not grow with use: switching views and moving focus (the footer recomposes
each time) keeps a bounded number of widgets alive; changing rows do not fill rich's caches."""

import gc

from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.widgets._footer import FooterKey

from speedtui.ui.widgets.fast_table import Column, FastTable, Row

from .conftest import SIZE, run_async


def footer_keys_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, FooterKey))


@run_async
async def test_switching_views_does_not_keep_discarded_footer_keys(fixture_app):
    app = fixture_app(steady=True, pace_gc=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for i in range(10):
            await pilot.press("4" if i % 2 else "1")
        await pilot.pause()
        after_ten = footer_keys_alive()
        for i in range(40):
            await pilot.press("4" if i % 2 else "1")
        await pilot.pause()
        after_fifty = footer_keys_alive()
        shown = len(app.screen.query(FooterKey))
        # before the fix every switch kept ~25 discarded keys alive (1,000 after 40 switches)
        assert after_fifty <= after_ten + shown, (after_ten, after_fifty, shown)
        assert after_fifty <= 3 * shown + 10


class WideTableApp(App):
    CSS = "FastTable { width: 60; height: 12; }"

    def compose(self) -> ComposeResult:
        yield FastTable([Column("name", "NAME", 20), Column("lease", "LEASE", 30), Column("more", "MORE", 40)])


@run_async
async def test_rows_that_change_every_second_do_not_fill_richs_split_cache():
    """Rows wider than the view used to be cut inside a segment, and rich keeps every such cut in
    a cache of 16,384 entries that is never emptied: a lease table whose countdowns change every
    second kept adding to it for about 100 minutes (the console's slow memory creep)."""
    app = WideTableApp()
    async with app.run_test(size=(80, 16)) as pilot:
        table = app.query_one(FastTable)
        before = Segment._split_cells.cache_info().misses
        for second in range(30):
            # a cell too long for its column ends in "…", which takes rich off its ASCII fast path
            table.set_rows([Row(f"n{i}", (f"node-{i:03d}", f"{30 - second}s left, beat {second}", "x" * 50))
                            for i in range(10)])
            await pilot.pause()
        assert "node-009" in app.export_screenshot()  # the rows were drawn
        assert Segment._split_cells.cache_info().misses - before == 0
