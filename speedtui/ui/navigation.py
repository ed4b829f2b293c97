"""Where the operator is: which view is shown and focused, the fabric filter, a node shown in
Leases, the jump dialog (`:`) and its targets, time travel (`@`) to the registry and traffic at a
past moment. The app's key bindings and the command palette call these; they reach the UI through
the port."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from textual.widgets import Input

from ..models.traces import TraceRecord
from ..services.journal_history import JournalHistory
from .port import UiPort
from .screens.jump import JumpScreen, JumpTarget, jump_targets
from .screens.timetravel import TimeTravelScreen
from .state import ConsoleState
from .widgets.fast_table import FastTable

TABS_NUMBERED_WIDTH = 96


class Navigator:
    def __init__(self, port: UiPort, state: ConsoleState, views: list[tuple[str, str]], root: Path,
                 now: Callable[[], float], steady: bool, header_changed: Callable[[], None]) -> None:
        self.port = port
        self.state = state
        self.views = views
        self.root = root
        self.now = now
        self.steady = steady
        self.header_changed = header_changed  # the header shows the fabric filter
        self.journal_history: JournalHistory | None = None  # time travel's reader, kept between trips
        self._numbered: bool | None = None  # how the tabs are labelled now

    def label_tabs(self, tabs: Any, width: int) -> None:
        """Nine numbered tabs need TABS_NUMBERED_WIDTH columns; narrower, they drop their numbers
        (the keys stay 1-9) rather than scroll the first or last ones out of sight."""
        numbered = width >= TABS_NUMBERED_WIDTH
        if tabs is None or self._numbered == numbered:
            return
        self._numbered = numbered
        for i, (vid, label) in enumerate(self.views):
            tabs.get_tab(vid).label = f"{i + 1} {label}" if numbered else label

    def focus_view(self, vid: str) -> None:
        w = self.port.view_widget(vid)
        target = {"fabrics": "#fabrics-tree", "access": "#access-matrix", "audit": "#calls-table"}.get(vid)
        found = w.query(target) if target else w.query(FastTable)
        if not found:
            found = w.query("Button")
        if found:
            found.first().focus()

    def set_fabric(self, fabric: str | None) -> None:
        port = self.port
        self.state.fabric = fabric
        self.state.registry.fabric = fabric
        port.view_widget("traces").apply_filter()
        port.view_widget(port.active_view()).refresh_view(force=True)
        self.header_changed()
        port.notify(f"fabric filter: {fabric or '(ungrouped)'}" if fabric is not None else "showing all fabrics")

    def show_node(self, name: str) -> None:
        self.port.action_show("leases")
        leases = self.port.view_widget("leases")
        leases.refresh_view(force=True)
        if not leases.query_one(FastTable).move_to_key(name):
            self.port.notify(f"{name} is not listed (a filter may hide it)", severity="warning")

    def jump_targets(self) -> dict[str, JumpTarget]:
        rows = self.state.registry.rows
        return jump_targets(self.views, [r.name for r in rows], sorted({s for r in rows for s in r.services}))

    def jump(self) -> None:
        port = self.port
        # after the dialog has gone and given focus back (which would switch back to its tab)
        port.push_screen(JumpScreen(self.jump_targets()),
                         lambda t: port.call_after_refresh(self.jump_to, t) if t else None)

    def time_travel(self, at: float | None = None) -> None:
        """The registry and traffic at a past moment: the selected trace's time in Traces, else a
        minute ago."""
        port = self.port
        if at is None:
            rec = port.view_widget("traces").selected() if port.active_view() == "traces" else None
            at = rec.ts if rec is not None else self.now() - 60.0
        if self.journal_history is None:
            self.journal_history = JournalHistory(self.root)
        port.push_screen(TimeTravelScreen(at, self.journal_history, self.state.history, self.own_records, self.now,
                                          self.steady))

    def own_records(self, start: float, end: float) -> list[TraceRecord]:
        """Records of the console's own nodes that no journal holds (observer events), in [start, end]."""
        traces = self.state.traces
        return [r for src in (traces.ring, traces.leases) for r in src
                if r.source == "observer" and start <= r.ts <= end and r.kind in ("envelope", "lease", "health")]

    def jump_to(self, target: JumpTarget) -> None:
        port = self.port
        if target.kind == "view":
            port.action_show(target.name)
        elif target.kind == "node":
            self.show_node(target.name)
        else:  # a service: the nodes offering it
            port.action_show("leases")
            port.view_widget("leases").query_one("#leases-filter", Input).value = target.name
