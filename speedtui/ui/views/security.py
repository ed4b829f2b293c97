"""Security view (issue 18): threat scores per receiver and sender — score, state (ok or
quarantined), rejections over the last five minutes as a sparkline, last reasons — from the
receivers' published counters and the journals; l lifts a quarantine at one of the console's
in-process nodes (no control command does it at other nodes yet: the view says so)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ...models.security import ThreatRow, sparkline, threat_rows
from ...models.traces import REJECTION_BUCKET, REJECTION_BUCKETS
from ..messages import LiftQuarantine
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_ts
from .. import keymap

COLUMNS = [Column("receiver", "RECEIVER", 12), Column("sender", "SENDER", 12), Column("score", "SCORE", 6),
           Column("state", "STATE", 12), Column("spark", f"REJECTIONS ({REJECTION_BUCKETS * REJECTION_BUCKET // 60} MIN)",
                                               REJECTION_BUCKETS),
           Column("total", "TOTAL", 6), Column("reasons", "LAST REASONS", 30, flex=True)]
HISTORY_LINES = 6


def state_text(t: ThreatRow) -> Text:
    if t.quarantined:
        return Text("QUARANTINED", style="bold red")
    if t.score is None:
        return Text("no score", style="dim")
    return Text("ok", style="green")


def threat_row(t: ThreatRow) -> Row:
    score = Text("-" if t.score is None else f"{t.score:.0f}", style="bold red" if t.quarantined else "")
    return Row(key=(t.receiver, t.sender), cells=(
        Text(t.receiver, style="bold"), t.sender, score, state_text(t),
        Text(sparkline(t.series), style="red" if any(t.series) else "dim"), str(t.rejections),
        ", ".join(reversed(t.reasons)) or "-"))


class SecurityView(Vertical):
    BINDINGS = keymap.bindings("security")

    def __init__(self, state: ConsoleState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.rows: list[ThreatRow] = []
        self._sig: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("threat scores per receiver and sender (quota)"
                     + ("" if self.state.readonly else "; [b]l[/b] lifts (this console's nodes, and those trusting its key)"),
                     classes="section", id="security-title")
        yield FastTable(COLUMNS, frozen=2, id="security-table")
        yield Static(id="security-detail", classes="detail")

    def on_mount(self) -> None:
        self.query_one(FastTable).empty_text = ("no threat scores or rejections yet (receivers with the quota "
                                                "extension publish scores; journals show rejections)")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return keymap.offered("security", action, self.state.readonly)

    def refresh_view(self, force: bool = False) -> None:
        store, now = self.state.traces, self.state.now()
        sig = (store.security_version, id(self.state.registry.rows), int(now // REJECTION_BUCKET))
        if sig == self._sig and not force:
            return
        self._sig = sig
        self.rows = threat_rows(self.state.registry.rows, store, now)
        table = self.query_one(FastTable)
        table.set_rows([threat_row(t) for t in self.rows])
        self.show_detail(table.cursor_key)

    def selected(self) -> ThreatRow | None:
        key = self.query_one(FastTable).cursor_key
        return next((t for t in self.rows if (t.receiver, t.sender) == key), None)

    def show_detail(self, key: Any) -> None:
        t = next((t for t in self.rows if (t.receiver, t.sender) == key), None)
        out = Text(no_wrap=True, overflow="ellipsis")
        if t is None:
            out.append("select a row: its threat events from the receiver's journal", style="dim")
        else:
            out.append(f"{t.sender} at {t.receiver}: ", style="bold")
            row = self.state.registry.by_name().get(t.receiver)
            scoring = row is not None and "quota" in row.features
            if t.score is not None:
                out.append(f"score {t.score:.0f}, {t.state}")
            elif scoring:  # (it keeps scores: these rejections are of kinds that never count)
                out.append(f"no threat score: none of these rejections counts against {t.sender} (an envelope "
                           "that did not authenticate as it, or a grant missing, is never scored)")
            else:
                out.append(f"{t.receiver} keeps no threat score (it does not enable quota)")
            out.append(f" · from its {'registry entry' if t.source == 'registry' else 'journal'}", style="dim")
            events = [r for r in self.state.traces.threats if r.node == t.receiver and r.peer == t.sender]
            for r in events[-HISTORY_LINES:]:
                out.append(f"\n  {fmt_ts(r.ts)}  {r.event:<12} score {r.score or 0:>3.0f}"  # reasons in one column
                           + (f"  {r.reason}" if r.reason else ""),
                           style="bold red" if r.event == "quarantined" else "")
            if not events:
                out.append("\n  no threat records journaled" + (
                    " (its rejections are: none of them was scored)" if t.rejections and scoring else
                    "" if t.rejections else " (does the receiver run with --trace?)"), style="dim")
            if t.quarantined and t.receiver in self.state.administered():
                out.append(f"\n  l lifts it with a control request ({t.receiver} trusts this console's operator key)",
                           style="yellow")
            elif t.quarantined and t.receiver not in self.state.own_nodes():
                out.append(f"\n  {t.receiver} is not this console's node and does not trust its operator key: "
                           "start it with --operator to lift from here", style="yellow")
        self.query_one("#security-detail", Static).update(out)

    def on_fast_table_highlighted(self, event: FastTable.Highlighted) -> None:
        self.show_detail(event.key)

    def action_lift(self) -> None:
        t = self.selected()
        if t is None:
            self.notify("select a receiver and sender first", severity="warning")
            return
        if not t.quarantined:
            self.notify(f"{t.sender} is not quarantined at {t.receiver}: nothing to lift", severity="warning")
            return
        self.post_message(LiftQuarantine(t.receiver, t.sender))
