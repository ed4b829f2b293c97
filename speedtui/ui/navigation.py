"""Where the operator is: which view is shown and focused, the fabric filter, a node shown in
Leases, the jump dialog (`:`) and its targets, time travel (`@`) to the registry and traffic at a
past moment. The app's key bindings and the command palette call these."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Input

from ..models.traces import TraceRecord
from ..services.journal_history import JournalHistory
from .screens.jump import JumpScreen, JumpTarget, jump_targets
from .screens.timetravel import TimeTravelScreen
from .widgets.fast_table import FastTable

TABS_NUMBERED_WIDTH = 96

if TYPE_CHECKING:
    from .app import SpeedApp


class Navigator:
    def __init__(self, app: "SpeedApp", views: list[tuple[str, str]]) -> None:
        self.app = app
        self.views = views
        self._numbered: bool | None = None  # how the tabs are labelled now

    def label_tabs(self, width: int) -> None:
        """Nine numbered tabs need TABS_NUMBERED_WIDTH columns; narrower, they drop their numbers
        (the keys stay 1-9) rather than scroll the first or last ones out of sight."""
        numbered = width >= TABS_NUMBERED_WIDTH
        tabs = getattr(self.app, "_tabs", None)
        if tabs is None or self._numbered == numbered:
            return
        self._numbered = numbered
        for i, (vid, label) in enumerate(self.views):
            tabs.get_tab(vid).label = f"{i + 1} {label}" if numbered else label

    def focus_view(self, vid: str) -> None:
        app = self.app
        w = app.view_widget(vid)
        target = {"fabrics": "#fabrics-tree", "access": "#access-matrix", "audit": "#calls-table"}.get(vid)
        found = w.query(target) if target else w.query(FastTable)
        if not found:
            found = w.query("Button")
        if found:
            found.first().focus()

    def set_fabric(self, fabric: str | None) -> None:
        app = self.app
        app.state.fabric = fabric
        app.registry.fabric = fabric
        app.view_widget("traces").apply_filter()
        app.view_widget(app.active_view()).refresh_view(force=True)
        app.update_header()
        app.notify(f"fabric filter: {fabric or '(ungrouped)'}" if fabric is not None else "showing all fabrics")

    def show_node(self, name: str) -> None:
        app = self.app
        app.action_show("leases")
        leases = app.view_widget("leases")
        leases.refresh_view(force=True)
        if not leases.query_one(FastTable).move_to_key(name):
            app.notify(f"{name} is not listed (a filter may hide it)", severity="warning")

    def jump_targets(self) -> dict[str, JumpTarget]:
        app = self.app
        rows = app.registry.rows
        return jump_targets(self.views, [r.name for r in rows], sorted({s for r in rows for s in r.services}))

    def jump(self) -> None:
        app = self.app
        # after the dialog has gone and given focus back (which would switch back to its tab)
        app.push_screen(JumpScreen(self.jump_targets()),
                        lambda t: app.call_after_refresh(self.jump_to, t) if t else None)

    def time_travel(self, at: float | None = None) -> None:
        """The registry and traffic at a past moment: the selected trace's time in Traces, else a
        minute ago."""
        app = self.app
        if at is None:
            rec = app.view_widget("traces").selected() if app.active_view() == "traces" else None
            at = rec.ts if rec is not None else app.clock.time() - 60.0
        if app.journal_history is None:
            app.journal_history = JournalHistory(app.root)
        app.push_screen(TimeTravelScreen(at, app.journal_history, app.state.history, self.own_records,
                                         app.clock.time, app.steady))

    def own_records(self, start: float, end: float) -> list[TraceRecord]:
        """Records of the console's own nodes that no journal holds (observer events), in [start, end]."""
        app = self.app
        return [r for src in (app.traces.ring, app.traces.leases) for r in src
                if r.source == "observer" and start <= r.ts <= end and r.kind in ("envelope", "lease", "health")]

    def jump_to(self, target: JumpTarget) -> None:
        app = self.app
        if target.kind == "view":
            app.action_show(target.name)
        elif target.kind == "node":
            self.show_node(target.name)
        else:  # a service: the nodes offering it
            app.action_show("leases")
            app.view_widget("leases").query_one("#leases-filter", Input).value = target.name
