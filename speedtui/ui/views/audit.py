"""Audit view: the operator's own actions (kept across runs) and the SPC call history."""

from __future__ import annotations

import json

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, Static

from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_datetime

AUDIT_COLS = [Column("ts", "WHEN", 19), Column("action", "ACTION", 10), Column("ok", "OK", 3),
              Column("detail", "WHAT", 34), Column("command", "EQUIVALENT COMMAND", 80)]
CALL_COLS = [Column("ts", "WHEN", 19), Column("call", "CALL", 34), Column("args", "ARGUMENTS", 24),
             Column("status", "RESULT", 30), Column("lat", "LATENCY", 9)]


class AuditView(Vertical):
    BINDINGS = [Binding("r", "rerun", "Re-run call", id="audit.rerun"),
                Binding("e", "edit", "Edit call", id="audit.edit"),
                Binding("y", "copy", "Copy command", id="audit.copy")]

    def compose(self) -> ComposeResult:
        yield Static("actions (audit log, kept across runs)", classes="section")
        yield FastTable(AUDIT_COLS, id="audit-table")
        with Vertical(id="calls-box"):
            yield Static("SPC call history: [b]r[/b] re-run, [b]e[/b] edit and run, [b]y[/b] copy as `speed call`",
                         classes="section")
            yield FastTable(CALL_COLS, id="calls-table")
            yield Button("Re-run selected call", id="calls-rerun", compact=True)

    def on_mount(self) -> None:
        self.query_one("#audit-table", FastTable).empty_text = "no actions recorded yet"
        self.query_one("#calls-table", FastTable).empty_text = "no calls yet (press F to fire a call)"
        self._n = (-1, -1)

    def refresh_view(self, force: bool = False) -> None:
        audit = self.app.audit_entries()
        calls = self.app.call_entries()
        if (len(audit), len(calls)) == self._n and not force:
            return
        self._n = (len(audit), len(calls))
        self.query_one("#audit-table", FastTable).set_rows([
            Row(i, (fmt_datetime(e.ts), e.action, Text("✓", style="green") if e.ok else Text("✗", style="red"),
                    e.detail + (f" → {e.result}" if e.result else ""), e.command))
            for i, e in reversed(list(enumerate(audit)))])
        rows = []
        for i, c in reversed(list(enumerate(calls))):
            if c.status == "SUCCESS":
                res = Text("SUCCESS " + json.dumps(c.result, separators=(",", ":"))[:40], style="green")
            else:
                res = Text(f"{c.error_code or c.status} {c.error_message}", style="red")
            rows.append(Row(i, (fmt_datetime(c.ts), f"{c.caller} → {c.target}.{c.service}",
                                json.dumps(c.arguments, separators=(",", ":")), res,
                                "-" if c.latency_ms is None else f"{c.latency_ms:.1f}ms")))
        self.query_one("#calls-table", FastTable).set_rows(rows)

    def _selected_call(self):
        t = self.query_one("#calls-table", FastTable)
        calls = self.app.call_entries()
        if t.cursor_key is None or t.cursor_key >= len(calls):
            return None
        return calls[t.cursor_key]

    def action_rerun(self) -> None:
        """Re-run the selected call as it was (one key); the result arrives as a notification."""
        c = self._selected_call()
        if c is None:
            self.app.notify("no call selected", severity="warning")
            return
        self.app.rerun_call(c)

    def action_edit(self) -> None:
        c = self._selected_call()
        if c is None:
            self.app.notify("no call selected", severity="warning")
            return
        self.app.open_call(caller=c.caller, target=c.target, service=c.service, arguments=c.arguments,
                           timeout=c.timeout)

    def action_copy(self) -> None:
        c = self._selected_call()
        if c is not None:
            self.app.copy_call_command(c.caller, c.target, c.service, c.arguments, c.timeout)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_rerun()

    def on_fast_table_selected(self, event: FastTable.Selected) -> None:
        if event.table.id == "calls-table":
            self.action_edit()
