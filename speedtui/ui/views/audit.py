"""Audit view: the operator's own actions on this environment (kept across runs), the control
requests its nodes applied or refused (their journals: who asked, what, at which node) and the SPC
calls fired in it."""

from __future__ import annotations

import json

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Button, Static

from ...models.commands import speed_call_command
from ...models.history import CallRecord
from ...models.traces import TraceRecord
from ..messages import CallRequested, CopyText, RunCall
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_datetime
from .. import keymap

AUDIT_COLS = [Column("ts", "WHEN", 19), Column("action", "ACTION", 10), Column("ok", "OK", 3),
              Column("detail", "WHAT", 34), Column("command", "EQUIVALENT COMMAND", 80, flex=True)]
CONTROL_COLS = [Column("ts", "WHEN", 19), Column("node", "AT NODE", 16), Column("who", "ASKED BY", 30),
                Column("what", "REQUEST", 40, flex=True)]
CALL_COLS = [Column("ts", "WHEN", 19), Column("call", "CALL", 34), Column("args", "ARGUMENTS", 24),
             Column("status", "RESULT", 30, flex=True), Column("lat", "LATENCY", 9)]


def call_result_text(c: CallRecord) -> Text:
    if c.status == "SUCCESS":
        return Text("SUCCESS " + json.dumps(c.result, separators=(",", ":"))[:40], style="green")
    return Text(f"{c.error_code or 'failed'}: {c.error_message}", style="red")


def control_text(r: TraceRecord) -> Text:
    what = " ".join(x for x in (r.event, r.detail if r.outcome == "applied" else "") if x) or "(unreadable)"
    if r.outcome == "applied":
        return Text(f"{what}: applied", style="green")
    return Text(f"{what}: {r.result}" + (f" ({r.detail})" if r.detail else ""), style="red")


class AuditView(Vertical):
    BINDINGS = keymap.bindings("audit")

    def __init__(self, state: ConsoleState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._n = (-1, -1, -1)

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble("actions on ", (self.state.root_label, "bold"),
                                   " (this environment's audit log, kept across runs)"),
                     classes="section", id="audit-title")
        yield FastTable(AUDIT_COLS, id="audit-table")
        with Vertical(id="control-box"):  # shown once a node journals a control request
            yield Static("control requests at the nodes (their journals): who asked, what was applied",
                         classes="section")
            yield FastTable(CONTROL_COLS, id="control-table")
        with Vertical(id="calls-box"):
            yield Static("SPC calls in this environment: [b]r[/b] re-run ▶, [b]e[/b] edit and run, "
                         "[b]y[/b] copy as `speed call`", classes="section")
            yield FastTable(CALL_COLS, id="calls-table", mark_cursor=True)
            if not self.state.readonly:
                yield Button("Re-run selected call", id="calls-rerun", compact=True)

    def on_mount(self) -> None:
        self.query_one("#control-box").display = False
        self.query_one("#audit-table", FastTable).empty_text = "no actions recorded in this environment yet"
        self.query_one("#calls-table", FastTable).empty_text = "no calls in this environment yet (F fires one)"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return keymap.offered("audit", action, self.state.readonly)

    def refresh_view(self, force: bool = False) -> None:
        audit = self.state.audit_entries()
        calls = self.state.call_entries()
        controls = self.state.traces.control_version
        if (len(audit), len(calls), controls) == self._n and not force:
            return
        self._n = (len(audit), len(calls), controls)
        self._show_controls()
        self.query_one("#audit-table", FastTable).set_rows([
            Row(i, (fmt_datetime(e.ts), e.action, Text("✓", style="green") if e.ok else Text("✗", style="red"),
                    e.detail + (f" → {e.result}" if e.result else ""), e.command))
            for i, e in reversed(list(enumerate(audit)))])
        rows = [Row(i, (fmt_datetime(c.ts), f"{c.caller} → {c.target}.{c.service}",
                        json.dumps(c.arguments, separators=(",", ":")), call_result_text(c),
                        "-" if c.latency_ms is None else f"{c.latency_ms:.1f}ms"))
                for i, c in reversed(list(enumerate(calls)))]
        table = self.query_one("#calls-table", FastTable)
        # on the newest call, the cursor stays on the newest as new calls arrive above it
        newest = table.cursor == 0
        table.set_rows(rows, keep_key=not newest)
        if newest:
            table.cursor = 0

    def _show_controls(self) -> None:
        records = self.state.traces.controls
        if not records:
            return
        self.query_one("#control-box").display = True
        self.query_one("#control-table", FastTable).set_rows([
            Row(r.id, (fmt_datetime(r.ts), r.node,
                       f"{r.peer} (operator {r.subject[:8]})" if r.subject else r.peer, control_text(r)))
            for r in reversed(records)])

    def _selected_call(self) -> CallRecord | None:
        t = self.query_one("#calls-table", FastTable)
        calls = self.state.call_entries()
        if t.cursor_key is None or t.cursor_key >= len(calls):
            return None
        return calls[t.cursor_key]

    def _need_call(self) -> CallRecord | None:
        c = self._selected_call()
        if c is None:
            self.notify("no call selected", severity="warning")
        return c

    def action_rerun(self) -> None:
        """Re-run the selected call as it was (one key); the result arrives as a notification."""
        c = self._need_call()
        if c is not None:
            self.post_message(RunCall(c.caller, c.target, c.service, c.arguments, c.timeout))

    def action_edit(self) -> None:
        c = self._need_call()
        if c is not None:
            self.post_message(CallRequested(c.caller, c.target, c.service, c.arguments, c.timeout))

    def action_copy(self) -> None:
        c = self._need_call()
        if c is not None:
            self.post_message(CopyText(self.app_command(c), "the `speed call` line"))

    def app_command(self, c: CallRecord) -> str:
        return speed_call_command(c.target, c.service, c.arguments, c.caller, self.state.root,
                                  self.state.key_path, c.timeout)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_rerun()

    def on_fast_table_selected(self, event: FastTable.Selected) -> None:
        if event.table.id == "calls-table":
            self.action_edit()
