"""Memory that must not grow with use: switching views and moving focus (the footer recomposes
each time) keeps a bounded number of widgets alive."""

import gc

from textual.widgets._footer import FooterKey

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
