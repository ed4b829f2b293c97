"""The key table (ui/keymap.py): one source for the bindings, the action bar, the palette and the
help screen, and the one statement of the read-only rule."""

from speedtui.ui import keymap
from speedtui.ui.app import SpeedApp
from speedtui.ui.views.leases import LeasesView
from speedtui.ui.views.traces import TracesView
from speedtui.ui.widgets.matrix import AccessMatrix


def test_binding_ids_are_unique_and_every_list_names_known_keys():
    ids = [k.id for k in keymap.KEYS if k.id]
    assert len(ids) == len(set(ids))
    for binding_id in keymap.ACTION_BAR + tuple(i for i in keymap.PALETTE_ORDER if i != "themes"):
        assert keymap.key(binding_id).id == binding_id
    assert all(k.palette for k in keymap.palette_keys() if k is not None)


def test_the_widgets_take_their_bindings_from_the_table():
    for scope, cls in (("app", SpeedApp), ("leases", LeasesView), ("traces", TracesView),
                       ("access-matrix", AccessMatrix)):
        assert [(b.key, b.action, b.id) for b in cls.BINDINGS] == \
               [(k.keys, k.action, k.id) for k in keymap.KEYS if k.scope == scope]


def test_a_read_only_console_offers_exactly_what_changes_nothing():
    for k in keymap.KEYS:
        assert keymap.offered(k.scope, k.name, readonly=False) is True
        assert keymap.offered(k.scope, k.name, readonly=True) is (not k.changes), k
    changing = {(k.scope, k.name) for k in keymap.KEYS if k.changes}
    assert {("app", "launch"), ("app", "stop_node"), ("app", "grant"), ("app", "call"), ("app", "send"),
            ("leases", "reap"), ("traces", "replay"), ("access", "grant"), ("audit", "rerun"),
            ("security", "lift")} <= changing
    assert keymap.action_bar() == [("launch", "n Launch"), ("stop_node", "d Stop"), ("grant", "g Grant"),
                                   ("call", "F Call"), ("send", "m Message"), ("help", "? Help"),
                                   ("command_palette", "^p Palette"), ("quit", "q Quit")]


def shown_keys(app) -> list[str]:
    """Every key the screen shows: the footer's keys (those drawn) and the action bar's."""
    footer = [k.key_display for k in app.screen.query("FooterKey") if k.region.width > 0]
    on_bar = [keymap.key(i) for i in keymap.ACTION_BAR]
    bar = [str(b.label).split(" ")[0] for b in app.screen.query(".actbtn")
           if any(str(b.label) == f"{k.first_key} {k.bar}" for k in on_bar)]
    return footer + bar


def test_no_key_is_shown_twice_in_any_view(fixture_app):
    """The footer and the action bar repeated n, d, g, F, m, ? one above the other; in Access the
    bar's "d Stop" stood above the matrix's "d Revoke pair". One key, one place on the screen."""
    import asyncio

    from .conftest import wait_for

    async def check():
        app = fixture_app(steady=True)
        async with app.run_test(size=(120, 36)) as pilot:
            for number, (view, _label) in enumerate(keymap.VIEWS, start=1):
                await pilot.press(str(number))
                await wait_for(pilot, lambda: app.active_view() == view, what=view)
                await pilot.pause()
                keys = shown_keys(app)
                assert len(keys) == len(set(keys)), (view, sorted(keys))
                assert {"n", "d", "g", "F", "m", "?", "q", "^p", ":"} <= set(keys), (view, keys)  # each once
            await pilot.press("3")
            await pilot.pause()
            assert app.view_widget("access").query_one("#access-matrix").has_focus
            keys = shown_keys(app)
            assert len(keys) == len(set(keys)) and "d" in keys, keys
            await pilot.press("at")  # time travel: a screen without the bar shows the app's keys itself
            await wait_for(pilot, lambda: not app.screen.query(".actbtn"), what="the time travel screen")
            await pilot.pause()
            keys = shown_keys(app)
            assert len(keys) == len(set(keys)) and "?" in keys, keys
        app = fixture_app(steady=True, readonly=True)  # no action bar: the footer shows them, once
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            keys = shown_keys(app)
            assert not app.query(".actbtn") and len(keys) == len(set(keys)), keys
            assert {"?", "q", "^p", ":"} <= set(keys) and not {"n", "d", "g", "F", "m"} & set(keys), keys

    asyncio.run(check())


def test_every_footer_key_is_whole_on_an_80_column_terminal(fixture_app):
    """At 80 columns the Traces footer ended in ": Jum": below 100 columns the footer is compact
    (one space between keys), so every view's keys fit, the read-only console's too."""
    import asyncio

    from .conftest import wait_for

    async def check(readonly: bool):
        app = fixture_app(steady=True, readonly=readonly)
        async with app.run_test(size=(80, 24)) as pilot:
            for number, (view, _label) in enumerate(keymap.VIEWS, start=1):
                await pilot.press(str(number))
                await wait_for(pilot, lambda: app.active_view() == view, what=view)
                await pilot.pause()
                drawn = [k for k in app.screen.query("FooterKey") if k.region.width > 0]
                assert drawn and ":" in [k.key_display for k in drawn], (view, readonly)
                cut = [k.key_display for k in drawn if k.region.right > app.size.width]
                assert not cut, (view, readonly, cut)

    asyncio.run(check(readonly=False))
    asyncio.run(check(readonly=True))
