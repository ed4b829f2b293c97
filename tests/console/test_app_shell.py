"""App shell: keymap from the config file, theme remembered, header never shows the key."""

import json

from speedtui.services.config import Config
from speedtui.environments.fixture import FIXED_KEY

from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.ui.app import make_app

from .conftest import SIZE, fixture_app_at, run_async, wait_for


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
        await pilot.pause()
        pid = [c.key for c in table.columns].index("pid")
        x = sum(w + 1 for w in table.widths()[:pid] if w) + 1  # the PID column header (columns follow their cells)
        await pilot.click("#leases-table", offset=(x, 0))
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
async def test_a_removed_root_is_said_in_the_empty_table_and_its_entries_come_back_with_it(fixture_app, fixture_env):
    """ROOT removed under the console read as an empty environment ("no registry entries")."""
    import os

    root = fixture_env[0]
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        table = app.view_widget("leases").query_one("#leases-table")
        await wait_for(pilot, lambda: len(table.rows) > 0, what="the entries")
        entries = len(table.rows)

        def drawn() -> str:
            return " ".join("".join(seg.text for seg in table.render_line(y)) for y in range(4))

        os.rename(root, f"{root}.away")
        await wait_for(pilot, lambda: not table.rows and "removed" in drawn(), what="the empty text")
        assert "no registry entries: the registry was removed; waiting for it to be created again (" in drawn()
        os.rename(f"{root}.away", root)
        await wait_for(pilot, lambda: len(table.rows) == entries, what="the entries back")
        assert "removed" not in drawn()


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


# the fingerprint stays at 80 columns
@run_async
async def test_header_keeps_the_fingerprint_at_80_columns(tmp_path):
    root, key_path = build(tmp_path / "root")
    key = rt.load_key(key_path)
    app = make_app(root, key, paths=Paths(tmp_path / "c", tmp_path / "d"), clock=FrozenClock(FIXED_NOW),
                   dir_label="/dev/shm/speed-demo-k2x9w1q/env", steady=True, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert key.fingerprint in app.export_screenshot()


# --readonly offers no action in the footer, and no Reap button
@run_async
async def test_readonly_offers_no_action(tmp_path):
    root, paths, app = fixture_app_at(tmp_path, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        # shown at all, greyed out or not (they were listed disabled, which is still listed)
        shown = {b.key for (_n, b, _enabled, _t) in app.screen.active_bindings.values() if b.show}
        assert not shown & {"n", "d", "g", "F", "m", "x"}
        await pilot.press("3")                                  # the access matrix's own g and d
        await pilot.pause()
        shown = {b.key for (_n, b, _enabled, _t) in app.screen.active_bindings.values() if b.show}
        assert not shown & {"n", "d", "g", "F", "m"}
        assert not app.query("#leases-reap")


@run_async
async def test_every_tab_is_whole_at_80_columns(fixture_app):
    """Nine views: at 80 columns the numbered tabs scrolled the last ones off ("8 Secu"); narrow,
    they drop their numbers (the keys 1-9 stay), wide they keep them."""
    from textual.widgets import Tab

    app = fixture_app(steady=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        tabs = list(app.query(Tab))
        assert len(tabs) == 9 and all(t.region.right <= 80 and t.region.width > 0 for t in tabs)
        assert [str(t.label) for t in tabs][:2] == ["Leases", "Fabrics"]
        await pilot.resize_terminal(120, 36)
        await pilot.pause()
        assert str(app.query(Tab).first().label) == "1 Leases"


@run_async
async def test_a_steady_app_keeps_its_notifications_whatever_the_time_taken(fixture_app):
    """A snapshot showed the "fabric filter: finance" notification or not depending on whether the
    machine drew it within the notification's seconds (it failed CI at load 10): a steady app (the
    one snapshots and screenshots draw) keeps them."""
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        app.notify("kept", timeout=0.05)
        await pilot.pause(0.3)  # the time that passes is the input here, not a synchronisation
        assert [n.message for n in app._notifications] == ["kept"]


@run_async
async def test_two_view_keys_at_once_end_on_the_last_and_the_console_goes_idle(fixture_app):
    """Two view keys in one write (a paste, or keys typed while the console was busy): the
    activation of the first tab came after the second key had switched again, focused the first
    view, which made its tab active again, and the two switched back and forth for ever."""
    from speedtui.ui.keymap import VIEWS
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        activations = []
        original = app.on_tabbed_content_tab_activated

        def counted(event):
            activations.append(event.pane.id)
            original(event)
        app.on_tabbed_content_tab_activated = counted
        for keys in (("2", "1"), ("3", "1"), ("8", "9"), ("1", "2", "3")):
            last = VIEWS[int(keys[-1]) - 1][0]
            for key in keys:  # handled one after the other before any tab's activation arrives, as
                app.action_show(VIEWS[int(key) - 1][0])  # when both came in one write
            await wait_for(pilot, lambda: app.active_view() == last, what=f"the view of {keys[-1]}")
            for _ in range(5):
                await pilot.pause()
            settled = len(activations)
            for _ in range(10):
                await pilot.pause(0.02)
            assert len(activations) == settled, f"tabs still switching after {keys}: {activations[-6:]}"
            assert app.active_view() == last
