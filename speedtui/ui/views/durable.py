"""Durable view (issue 19): what waits where — the messages in every node's outbox (target, its
state in the registry, age, expiry) and the durable copies waiting in inboxes — read with the
runtime's readers in a thread worker (a few seconds apart while the view is shown, r at once,
audited as `speed outbox`); v verifies the receipt chains a node issued (as `speed receipts NAME`)."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ...models.registry import fmt_duration
from ..messages import ListOutboxes, OutboxesListed, ReceiptsVerified, VerifyReceipts
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_ts
from .. import keymap

OUTBOX_COLS = [Column("node", "NODE", 12), Column("target", "TARGET", 12), Column("state", "STATE", 8),
               Column("message", "MESSAGE", 9), Column("stream", "STREAM", 8), Column("id", "ID", 6), Column("age", "WAITING", 8),
               Column("expires", "EXPIRES IN", 10), Column("size", "BYTES", 8, flex=True)]
PENDING_COLS = [Column("node", "RECEIVER", 12), Column("sender", "SENDER", 12), Column("age", "WAITING", 8),
                Column("size", "BYTES", 8), Column("file", "INBOX FILE", 40, flex=True)]
STATE_STYLE = {"online": "green", "leaving": "yellow", "stale": "red", "missing": "bold red"}
RELIST_SECONDS = 3.0  # while the view is shown, the outboxes are read again this often


def message_state(item: Any) -> Text:
    """Short for the table; the detail line says it whole (`OutboxItem.state`)."""
    return Text("receipted", style="green") if item.receipted else Text("waiting", style="yellow")


class DurableView(Vertical):
    BINDINGS = keymap.bindings("durable")

    def __init__(self, state: ConsoleState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.items: list[Any] = []
        self.pending: list[Any] = []
        self.listed_at: float | None = None  # the console clock when the last listing arrived
        self.error = ""
        self.receipts: Text | None = None
        self._asked = float("-inf")  # monotonic time of the last automatic listing

    def compose(self) -> ComposeResult:
        yield Static("outboxes: what waits for which target ([b]r[/b] reads again, [b]v[/b] verifies receipts)",
                     classes="section", id="durable-title")
        yield FastTable(OUTBOX_COLS, frozen=2, id="durable-outbox")
        yield Static("durable copies waiting in inboxes (delivered, not yet handled)", classes="section")
        yield FastTable(PENDING_COLS, frozen=1, id="durable-pending")
        yield Static(id="durable-history", classes="detail")
        yield Static(id="durable-receipts", classes="detail")
        yield Static(id="durable-status", classes="statusline")

    def on_mount(self) -> None:
        self.query_one("#durable-outbox", FastTable).empty_text = "no durable message waits in any outbox"
        self.query_one("#durable-pending", FastTable).empty_text = "no durable copy waits in any inbox"
        self.query_one("#durable-receipts", Static).update(
            Text("receipts not verified yet in this session (v)", style="dim"))

    # ---- data
    def refresh_view(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._asked >= RELIST_SECONDS:
            self._asked = now
            self.post_message(ListOutboxes(explicit=False))
        self.paint()

    def paint(self) -> None:
        rows_by_name = self.state.registry.by_name()
        now = self.state.now()

        def target_state(name: str) -> Text:
            row = rows_by_name.get(name)
            state = "missing" if row is None else row.status
            return Text(state, style=STATE_STYLE.get(state, ""))

        self.query_one("#durable-outbox", FastTable).set_rows([
            Row((i.node, i.target, i.stream, i.id), (
                Text(i.node, style="bold"), i.target, target_state(i.target), message_state(i), i.stream[:8], str(i.id),
                fmt_duration(max(0.0, now - i.created)),
                Text(fmt_duration(i.expires_at - now), style="red" if i.expires_at - now < 60 else ""),
                str(i.size)))
            for i in self.items])
        self.query_one("#durable-pending", FastTable).set_rows([
            Row((p.node, p.file), (Text(p.node, style="bold"), p.sender, fmt_duration(max(0.0, now - p.arrived)),
                                   str(p.size), p.file))
            for p in self.pending])
        durable = sorted(r.name for r in self.state.registry.rows if r.durable)
        t = Text(no_wrap=True, overflow="ellipsis")
        taken = sum(1 for i in self.items if i.receipted)
        t.append(f"{len(self.items)} in outboxes", style="bold")
        if taken:  # the target took them; the sender has not taken the receipts (it exited before they came)
            t.append(f": {len(self.items) - taken} waiting, {taken} receipted (receipt not taken)")
        t.append(f" · {len(self.pending)} in inboxes", style="bold")
        t.append(f" · durable nodes: {', '.join(durable) if durable else 'none in the registry'}")
        if self.error:
            t.append(f" · {self.error}", style="bold red")
        elif self.listed_at is None:
            t.append(" · reading the outboxes…", style="dim")
        else:
            t.append(f" · read at {fmt_ts(self.listed_at)}", style="dim")
        self.query_one("#durable-status", Static).update(t)

    def show_history(self, key: Any) -> None:
        """The selected message's durable records (its sender's and its target's journals)."""
        out = Text()  # wraps: at 80 columns what became of it takes two lines
        if key is not None:
            node, target, stream, number = key
            events = [r for r in self.state.traces.durable if r.stream == stream and r.number == number
                      and (r.node == node or (r.node == target and r.peer == node))]
            out.append(f"{node} → {target} #{number}: ", style="bold")
            item = next((i for i in self.items if (i.node, i.target, i.stream, i.id) == key), None)
            if item is not None and item.receipted:  # the sender takes the receipt the next time it runs
                out.append(f"{item.state} (it takes it the next time it runs) · ", style="green")
            out.append(" · ".join(f"{r.event}{f' ({r.status})' if r.status else ''} {fmt_ts(r.ts)} by {r.node}"
                                  for r in events[-3:]) or "no durable records journaled yet", style="" if events
                       else "dim")
        self.query_one("#durable-history", Static).update(out)

    def on_fast_table_highlighted(self, event: FastTable.Highlighted) -> None:
        if event.table.id == "durable-outbox":
            self.show_history(event.key)

    def on_outboxes_listed(self, m: OutboxesListed) -> None:
        self.items, self.pending, self.error = m.items, m.pending, m.error
        self.listed_at = self.state.now()
        self.paint()

    def on_receipts_verified(self, m: ReceiptsVerified) -> None:
        out = Text()
        out.append(f"receipts issued by {m.name}", style="bold")
        if m.error:
            out.append(f": {m.error}", style="bold red")
        elif not m.reports:
            out.append(": none found (no durable message to it was handled yet)", style="dim")
        for where, r in m.reports:
            out.append(f"\n  {r.sender} ← {r.receiver} (stream {r.stream[:8]}, {where}): {r.count} receipts, "
                       f"{r.handled} handled: ")
            if r.ok:
                out.append("verified", style="bold green")
            else:
                out.append(f"BROKEN at receipt {r.first_break}: {r.reason}", style="bold red")
        for sender in sorted({i.node for i in self.items if i.target == m.name and i.receipted}):
            n = sum(1 for i in self.items if i.target == m.name and i.node == sender and i.receipted)
            out.append(f"\n  {n} of these receipts not taken by {sender} yet: their messages stay in its outbox "
                       "until it runs again", style="yellow")
        self.receipts = out
        self.query_one("#durable-receipts", Static).update(out)

    # ---- actions
    def selected_target(self) -> str | None:
        key = self.query_one("#durable-outbox", FastTable).cursor_key
        if key is not None:
            return key[1]
        key = self.query_one("#durable-pending", FastTable).cursor_key
        return key[0] if key is not None else None

    def action_relist(self) -> None:
        self._asked = time.monotonic()
        self.post_message(ListOutboxes(explicit=True))

    def action_verify(self) -> None:
        self.post_message(VerifyReceipts(self.selected_target()))
