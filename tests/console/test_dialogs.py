"""The dialogs as the operator meets them: where the cursor starts, what Enter submits, that their
buttons are on screen at 80x24, toggles that read without colour, the envelope inspector, and
the grant the access explainer offers."""

import pytest
from textual.widgets import Input

from speedtui.ui.screens.forms import GrantScreen, LaunchScreen

from .conftest import SIZE, fixture_app_at, run_async, wait_for


# n puts the cursor in the name field; Enter in the grant dialog's peer field submits
@run_async
async def test_dialogs_focus_and_submit(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch dialog")
        await pilot.press(*"abc")
        assert app.screen.query_one("#ln-name").value == "abc"
        await pilot.press("escape")
        chosen = []
        app.push_screen(GrantScreen(["gateway"], app.state.graph(), "gateway", ""), chosen.append)
        await pilot.pause()
        app.screen.query_one("#gr-peer").focus()
        await pilot.press(*"ledger", "enter")
        await wait_for(pilot, lambda: chosen, what="the grant submitted on Enter")
        assert chosen == [("gateway", "ledger", True)]


# at 80x24 the call dialog's buttons are on screen
@run_async
async def test_call_dialog_buttons_on_screen_at_80x24(tmp_path):
    from speedtui.ui.screens.calls import CallScreen

    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(CallScreen(["gateway"], app.state.graph(), "/r", "/k", "gateway", "billing", "calculateTax"))
        await pilot.pause()
        for bid in ("#call-go", "#call-copy", "#call-close"):
            button = app.screen.query_one(bid)
            x, y = button.region.x + 1, button.region.y + 1
            assert 0 <= y < 24 and app.screen.get_widget_at(x, y)[0] is button


# on/off controls read without colour: the mark is drawn only when on
@run_async
async def test_toggles_read_without_colour(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch dialog")
        await pilot.pause()
        on = app.screen.query_one("#ln-svc-echo")
        off = app.screen.query_one("#ln-svc-fail")
        assert "X" in str(on.render()) and "X" not in str(off.render())


@run_async
async def test_the_envelope_inspector_opens_with_its_sealed_bytes(tmp_path):
    """Enter on a traced envelope opened nothing: the inspector named an undefined variable for
    the sealed bytes (NameError), and the snapshot of the dialog showed the traces behind it."""
    from speedtui.ui.screens.envelope import EnvelopeScreen

    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "down", "down", "down", "enter")  # gateway's MESSAGE seq 9, sealed bytes kept
        await wait_for(pilot, lambda: isinstance(app.screen, EnvelopeScreen), what="the inspector")
        await pilot.pause()
        import html

        shot = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "sealed bytes (154)" in shot and "authentic" in shot


# the explainer's fixes are read whole at 80x24: three missing things, each fix under its check
@run_async
async def test_explainer_fixes_are_whole_at_80_columns(tmp_path):
    from textual.geometry import Region

    from speedtui.models.access import explain

    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        view = app.view_widget("access")
        view.set_pair("audit", "gateway", "nosuch")
        await pilot.pause()
        await pilot.pause()
        result = view.query_one("#ex-result")
        fixes = explain(app.state.graph(), "audit", "gateway", "nosuch").missing
        assert len(fixes) == 3
        assert result.scroll_y == 0
        drawn = result.render_lines(Region(0, 0, result.size.width, result.size.height))  # what the pane shows
        shot = " ".join(" ".join(strip.text for strip in drawn).split())
        for fix in fixes:  # drawn, wrapped at most: every word in order
            assert " ".join(fix.split()) in shot, fix


# the explainer's g never offers a node a grant of itself
@run_async
async def test_explainer_grant_is_never_a_self_grant(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.actions.own.alive = app.state.own_nodes = lambda: ["gateway"]  # as if the console had started gateway
        await pilot.press("3")
        app.view_widget("access").set_pair("gateway", "batch", "echo")
        await pilot.pause()
        app.view_widget("access").action_grant()
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="grant dialog")
        await pilot.pause()
        node, peer, _ = app.screen.values()
        assert node != peer and (node, peer) == ("gateway", "batch")


@pytest.mark.parametrize("key", ["n", "F", "m", "colon", "at", "L"])  # (help closes on q: its own key)
@run_async
async def test_keys_typed_before_a_dialog_is_ready_never_act_behind_it(fixture_app, key):
    """Keys in one burst (a paste, tmux send-keys, typing ahead of a busy console): the dialog's key,
    then a view key and the quit key, arrive before the dialog has mounted. They never reach the
    screen behind it (the view stays, the console runs), and a dialog that is typed into (launch's
    name, jump's target) has them in its field: they were lost (sent to the table behind, whose
    bindings no longer applied once the dialog was up)."""
    from textual import events

    app = fixture_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        main = app.screen
        for ch in (key, "2", "q", "d"):
            app.post_message(events.Key(ch, ch if len(ch) == 1 else None))
        await wait_for(pilot, lambda: app.screen is not main, what="the dialog")
        await pilot.pause(0.3)
        assert app.is_running and app.screen is not main
        assert app.active_view() == "leases"
        typed = {"n": "#ln-name", "colon": "#jump-input"}.get(key)
        if typed is not None:
            assert app.screen.focused is app.screen.query_one(typed)
            assert app.screen.query_one(typed).value == "2qd"


@pytest.mark.parametrize("key", ["F", "m"])
@run_async
async def test_keys_typed_before_the_call_or_message_dialog_is_ready_go_into_its_field(fixture_app, key):
    """With a node of the console's to call or send from, the call and message dialogs focus their
    first empty field: keys typed in the burst that opened them land there, in order (they were
    lost: the field was focused after them)."""
    from textual import events

    app = fixture_app()
    async with app.run_test(size=SIZE) as pilot:
        app.actions.own.in_process = lambda: ["gateway"]  # as if the console had started gateway
        await pilot.pause()
        main = app.screen
        for ch in (key, "b", "i", "l"):
            app.post_message(events.Key(ch, ch))
        await wait_for(pilot, lambda: app.screen is not main, what="the dialog")
        typed = lambda: isinstance(app.screen.focused, Input) and app.screen.focused.value.endswith("bil")  # noqa: E731
        await wait_for(pilot, typed, what="the keys in the dialog's field")
        assert app.screen.focused.id in {"F": ("call-target", "call-service", "call-args"), "m": ("snd-to",)}[key]
        assert app.active_view() == "leases"


@run_async
async def test_a_key_typed_in_the_burst_after_tab_lands_in_the_field_tab_went_to(fixture_app):
    """`a`, Tab, `b`, `c` in one burst: `bc` went into the field Tab left (Textual handed every key
    of the burst to the focused field before that field had handled the Tab)."""
    from textual import events

    app = fixture_app()
    async with app.run_test(size=SIZE) as pilot:
        app.actions.own.in_process = lambda: ["gateway"]  # as if the console had started gateway
        await pilot.pause()
        main = app.screen
        app.post_message(events.Key("F", "F"))
        await wait_for(pilot, lambda: app.screen is not main and isinstance(app.screen.focused, Input),
                       what="the call dialog's field")
        first = app.screen.focused
        before = first.value
        for key, ch in (("a", "a"), ("tab", None), ("b", "b"), ("c", "c")):
            app.post_message(events.Key(key, ch))
        await wait_for(pilot, lambda: app.screen.focused is not first and app.screen.focused.value.endswith("bc"),
                       what="b and c in the next field")
        assert first.value == before + "a"


@run_async
async def test_keys_typed_right_after_slash_go_into_the_filter(fixture_app):
    """The same burst on a view: `/` focuses the filter, and what is typed with it lands there (the
    keys after `/` met the table's bindings: `i` opened its cells dialog)."""
    from textual import events

    app = fixture_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        main = app.screen
        for ch in ("slash", "b", "i", "l"):
            app.post_message(events.Key(ch, ch if len(ch) == 1 else None))
        box = app.query_one("#leases-filter")
        await wait_for(pilot, lambda: box.value == "bil", what="the filter typed into")
        await pilot.pause(0.2)
        assert app.focused is box and app.active_view() == "leases" and app.screen is main
