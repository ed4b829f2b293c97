"""Work that must not lay out the whole screen: under load a full reflow cost 15-60 ms of the
event loop, and these paths ran several times a second (cursor moves in the leases view, the
header, the trace status line, a growing trace ring)."""

import dataclasses

from rich.text import Text
from textual.app import App, ComposeResult
from textual.screen import Screen

from speedtui.ui.widgets.rendered_pane import RenderedPane

from .conftest import SIZE, run_async, wait_for


class LayoutCounter:
    """Counts the screen's full reflows (a layout some widget asked for) by wrapping the real one."""

    def __init__(self, monkeypatch) -> None:
        self.full = 0
        self.why: list = []
        orig = Screen._refresh_layout

        def counted(screen, size=None, scroll=False):
            if screen._layout_widgets:
                self.full += 1
                self.why.append(sorted(f"{type(w).__name__}#{w.id}" for w in screen._layout_widgets))
            return orig(screen, size, scroll)

        monkeypatch.setattr(Screen, "_refresh_layout", counted)


async def settled(pilot, counter: LayoutCounter, quiet_pauses: int = 3, timeout: float = 60.0) -> None:
    """Until the start-up's layouts are done: no full layout over a few consecutive pauses (on a
    busy machine one pause after start was not enough, and a late start-up layout was counted
    against the test's own actions)."""
    import time

    deadline, last, quiet = time.monotonic() + timeout, -1, 0
    while quiet < quiet_pauses and time.monotonic() < deadline:
        await pilot.pause(0.05)
        quiet = quiet + 1 if counter.full == last else 0
        last = counter.full


def pane_text(pane: RenderedPane) -> list[str]:
    return [strip.text.rstrip() for strip in pane.lines]


class PaneApp(App):
    CSS = "RenderedPane { height: 10; width: 40; }"

    def compose(self) -> ComposeResult:
        yield RenderedPane(id="pane")


@run_async
async def test_rendered_pane_shows_content_and_scrollbar_without_relayout(monkeypatch):
    counter = LayoutCounter(monkeypatch)
    app = PaneApp()
    async with app.run_test(size=(60, 20)) as pilot:
        pane = app.query_one(RenderedPane)
        pane.update(Text("\n".join(f"line {i}" for i in range(4))))
        await pilot.pause()
        assert pane_text(pane) == [f"line {i}" for i in range(4)]
        assert not pane.show_vertical_scrollbar  # 4 lines fit in 10

        pane.update(Text("\n".join(f"row {i}" for i in range(30))))
        await pilot.pause()
        assert pane.virtual_size.height == 30
        assert pane.show_vertical_scrollbar  # appearing, it takes one layout (Textual's own)
        assert pane.vertical_scrollbar.window_virtual_size == 30

        before = counter.full
        pane.update(Text("\n".join(f"other {i}" for i in range(50))))
        await pilot.pause()
        assert counter.full == before, "new content of another length laid out the screen"
        assert pane.vertical_scrollbar.window_virtual_size == 50
        pane.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert int(pane.scroll_offset.y) == 50 - pane.scrollable_content_region.height
        assert pane_text(pane)[-1] == "other 49"
        assert app.screen.get_widget_at(1, 9)[0] is pane


@run_async
async def test_leases_cursor_moves_and_live_updates_do_not_lay_out_the_screen(fixture_app, monkeypatch):
    counter = LayoutCounter(monkeypatch)
    app = fixture_app(steady=True, pace_gc=False)
    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot, counter)
        view = app.view_widget("leases")
        body = view.query_one("#leases-detail-body", RenderedPane)
        table = view.query_one("#leases-table")
        before = counter.full
        seen = set()
        for _ in range(4):
            await pilot.press("down")
            await pilot.pause()
            name = table.cursor_key
            text = "\n".join(pane_text(body))
            row = app.registry.by_name()[name]
            # the detail follows the cursor (an unreadable entry has no JSON, only its problem)
            assert (f'"name": "{name}"' in text) if row.raw is not None else ("entry:" in text and row.error)
            seen.add(name)
        app.drain()  # header and table repaint with the same data
        app.tick()
        app.refresh_active()
        await pilot.pause()
        assert len(seen) == 4
        assert counter.full == before, counter.why[before:]


@run_async
async def test_trace_ring_growing_does_not_lay_out_the_screen(fixture_app, monkeypatch):
    counter = LayoutCounter(monkeypatch)
    app = fixture_app(steady=True, pace_gc=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await settled(pilot, counter)
        view = app.view_widget("traces")
        table = view.query_one("#traces-table")
        store = app.traces
        shown = len(table.rows)
        extra = list(store.ring)[:3]
        assert table.show_vertical_scrollbar  # more rows than lines: the scrollbar is there
        before = counter.full
        store.add([dataclasses.replace(r, seq=r.seq + 10_000) for r in extra])
        view.refresh_view(force=True)
        await wait_for(pilot, lambda: len(table.rows) == shown + 3, timeout=10, what="the new rows")
        await pilot.pause()
        assert counter.full == before, counter.why[before:]
        assert table.vertical_scrollbar.window_virtual_size == shown + 4  # rows + header line
