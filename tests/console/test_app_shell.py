"""App shell: keymap from the config file, theme remembered, header never shows the key."""

import json

from speedtui.services.config import Config
from speedtui.environments.fixture import FIXED_KEY

from .conftest import SIZE, run_async, wait_for


@run_async
async def test_keymap_from_config(fixture_app, fixture_env):
    _, _, paths = fixture_env
    paths.config_dir.mkdir(parents=True)
    paths.config_file.write_text(json.dumps({"keys": {"app.traces": "f5", "traces.pause": "space"}}))
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        await wait_for(pilot, lambda: app.active_view() == "traces", what="traces via f5")
        await pilot.press("space")
        await wait_for(pilot, lambda: app.view_widget("traces").paused, what="paused via space")


@run_async
async def test_theme_is_remembered(fixture_app, fixture_env):
    _, _, paths = fixture_env
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        app.theme = "speed-light"
        await pilot.pause()
    assert Config.load(paths.config_file).theme == "speed-light"
    app2 = fixture_app(steady=True)
    async with app2.run_test(size=SIZE) as pilot:
        assert app2.theme == "speed-light"


@run_async
async def test_palette_offers_views_themes_and_actions(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("View: Traces", "Theme: speed-high-contrast", "Launch node", "Fire SPC call", "Reap stale entry",
                  "Replay selected envelope", "Grant or revoke", "Send message", "Run analytics"):
            assert t in titles


@run_async
async def test_header_shows_directory_and_fingerprint_never_key(fixture_app, fixture_env):
    import base64

    _, key, _ = fixture_env
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        svg = app.export_screenshot()
        assert key.fingerprint in svg
        assert "/fixture/speed" in svg  # the directory, beside it
        assert base64.b64encode(FIXED_KEY).decode() not in svg
        assert FIXED_KEY.hex() not in svg
        assert "secret" not in repr(key)


@run_async
async def test_sort_by_header_click_and_filter_typing(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        table = app.view_widget("leases").query_one("#leases-table")
        await pilot.click("#leases-table", offset=(40, 0))  # the PID column header
        await wait_for(pilot, lambda: app.registry.sort_column == "pid", what="sort by pid")
        await pilot.press("slash", "l", "e", "d")
        await wait_for(pilot, lambda: [r.key for r in table.rows] == ["ledger"], what="filtered")


@run_async
async def test_a_filter_that_matches_nothing_says_so(fixture_app):
    """It said "no registry entries" while the registry held six (Traces says "0 of N")."""
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        table = app.view_widget("leases").query_one("#leases-table")
        await wait_for(pilot, lambda: len(table.rows) > 0, what="the entries")
        entries = len(table.rows)
        await pilot.press("slash", "z", "q", "x")

        def drawn() -> str:
            return " | ".join("".join(seg.text for seg in table.render_line(y)) for y in range(3))

        await wait_for(pilot, lambda: not table.rows and "matches" in drawn(), what="the empty text")
        assert f'none of {entries} registry entries matches the filter "zqx": Esc clears the filter' in drawn()


@run_async
async def test_action_bar_buttons_open_dialogs(fixture_app):
    from speedtui.ui.screens.forms import LaunchScreen

    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#act-launch")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch dialog from the button")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="closed")
        await pilot.click("#act-help")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen", what="help from the button")


@run_async
async def test_readonly_has_no_action_bar(fixture_app):
    app = fixture_app(steady=True, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.query("#actionbar")
