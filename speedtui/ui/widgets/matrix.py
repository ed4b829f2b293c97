"""The access matrix as a grid you move over: a cell is "row may write to column"; Enter asks
for that pair to be explained, g for the grant that opens it, d for the revoke that closes it;
a ✱ marks the nodes that trust the console's operator key.  Columns are numbered like the
rows, so the grid fits any width."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from .. import keymap

SYM_STYLE = {"⇄": "bold green", "→": "yellow", "←": "yellow", "·": "dim red", " ": ""}
LEGEND = "⇄ mutual  → row writes col\n← col writes row  · none"


class AccessMatrix(Static, can_focus=True):
    BINDINGS = keymap.bindings("access-matrix")
    row = reactive(0, init=False)
    col = reactive(1, init=False)

    class PairChosen(Message):
        def __init__(self, writer: str, reader: str, grant: bool, revoke: bool = False) -> None:
            super().__init__()
            self.writer, self.reader, self.grant, self.revoke = writer, reader, grant, revoke

    def __init__(self, readonly: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.readonly = readonly
        self.names: list[str] = []
        self.cells: list[list[str]] = []
        self.administered: frozenset[str] = frozenset()  # rows the console's operator key may change
        self.note = ""  # why no grid is drawn, when there are nodes but too many for one

    def set_matrix(self, names: list[str], cells: list[list[str]], administered: frozenset[str] = frozenset(),
                   note: str = "") -> None:
        keep = self.pair()
        self.names, self.cells, self.administered, self.note = names, cells, administered, note
        if keep and keep[0] in names and keep[1] in names:
            self.set_reactive(AccessMatrix.row, names.index(keep[0]))
            self.set_reactive(AccessMatrix.col, names.index(keep[1]))
        self._clamp()
        self._paint(layout=True)    # the grid's size follows the number of names

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        return keymap.offered("access-matrix", action, self.readonly)

    def pair(self) -> tuple[str, str] | None:
        if 0 <= self.row < len(self.names) and 0 <= self.col < len(self.names):
            return self.names[self.row], self.names[self.col]
        return None

    def _clamp(self) -> None:
        n = len(self.names)
        self.set_reactive(AccessMatrix.row, max(0, min(self.row, n - 1)))
        self.set_reactive(AccessMatrix.col, max(0, min(self.col, n - 1)))

    def watch_row(self) -> None:
        self._paint()

    def watch_col(self) -> None:
        self._paint()

    def on_focus(self) -> None:
        self._paint()

    def on_blur(self) -> None:
        self._paint()

    def _paint(self, layout: bool = False) -> None:
        self.refresh(layout=layout)

    def render(self) -> Text:
        # drawn when painted, not cached by update(): a cached grid lagged behind a focus change
        # that came just before a paint (the cursor's highlight differed between two snapshots)
        return self.render_grid()

    def render_grid(self) -> Text:
        if not self.names:
            return Text(self.note or "no nodes", style="dim")
        n = len(self.names)
        mark_w = 2 if self.administered else 0
        label_w = min(16, max(len(x) for x in self.names)) + len(str(n)) + 1 + mark_w
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("row may write to column\n", style="dim")
        t.append(" " * (label_w + 1))
        for j in range(n):
            t.append(f"{j + 1:^3}", style="bold reverse" if j == self.col and self.has_focus else "bold")
        t.append("\n")
        for i, name in enumerate(self.names):
            # numbers right-aligned: from row 10 on, names stayed one column right of the rows above
            label = f"{i + 1:>{len(str(n))}} " + ("✱ " if name in self.administered else "  " if mark_w else "") + name
            label = label if len(label) <= label_w else label[:label_w - 1] + "…"
            t.append(f"{label:<{label_w}} ", style="bold reverse" if i == self.row and self.has_focus else "bold")
            for j in range(n):
                sym = self.cells[i][j]
                here = i == self.row and j == self.col
                # the cursor cell is bracketed, so it reads without colour too
                t.append(f"[{sym}]" if here else f" {sym} ", style=SYM_STYLE.get(sym, "") + (" reverse" if here else ""))
            t.append("\n")
        pair = self.pair()
        if pair:
            w, r = pair
            t.append(f"{w} → {r}", style="bold")
            t.append((": ⏎ explain" if self.readonly else ": ⏎ explain, g grant") if w != r else ": itself", style="dim")
            t.append("\n")
        t.append(LEGEND, style="dim")
        if self.administered and not self.readonly:
            t.append("\n✱ trusts your operator key: g/d", style="dim")
        return t

    def action_move(self, drow: int, dcol: int) -> None:
        if self.names:
            self.row = max(0, min(len(self.names) - 1, self.row + drow))
            self.col = max(0, min(len(self.names) - 1, self.col + dcol))

    def _chosen(self, grant: bool) -> None:
        pair = self.pair()
        if pair and pair[0] != pair[1]:
            self.post_message(self.PairChosen(pair[0], pair[1], grant))

    def action_explain(self) -> None:
        self._chosen(False)

    def action_grant(self) -> None:
        self._chosen(True)

    def action_revoke(self) -> None:
        pair = self.pair()
        if pair and pair[0] != pair[1]:
            self.post_message(self.PairChosen(pair[0], pair[1], True, revoke=True))
