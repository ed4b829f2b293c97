"""The dialogs of every table (FastTable): a row's cells whole (``i``), and which columns the table
shows and how wide (``W``). Cells are what members wrote: shown as Text, never as markup."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..widgets.cell_text import terminal_cells

WIDEN_STEP = 4  # cells a column widens (narrows) by per key press


class Columns(Protocol):
    """What the columns dialog changes of a table (a FastTable): the dialog knows this much of it,
    and the table, which opens the dialog, is not imported here."""

    columns: Sequence[Any]  # each with .key, .label and .width
    hidden: set[str]
    extra: dict[str, int]

    def set_shown(self, key: str, shown: bool) -> bool: ...

    def widen(self, key: str, cells: int) -> int: ...


class CellsScreen(ModalScreen[None]):
    """Every cell of one row, labelled by its column, wrapped rather than cut."""

    BINDINGS = [Binding("escape,q,i", "dismiss", "Close")]

    def __init__(self, cells: Sequence[tuple[str, "str | Text"]]) -> None:
        super().__init__()
        self.cells = cells

    def compose(self) -> ComposeResult:
        grid = Table(box=None, show_header=False, padding=(0, 1), expand=True)
        grid.add_column(style="bold cyan", no_wrap=True)
        grid.add_column(overflow="fold")  # a long value without spaces (an id, a path) folds, never cut
        for label, value in self.cells:
            # the glyphs as the table draws them (widgets/cell_text.terminal_cells): a border after a
            # joined emoji stays where the terminal draws it
            grid.add_row(Text(label), terminal_cells(value))
        with Vertical(classes="dialog wide", id="cells-dialog"):
            yield Static("The row's cells, whole (Esc closes)", classes="dialog-title")
            with VerticalScroll():
                yield Static(grid, id="cells-body")


class ColumnsScreen(ModalScreen[None]):
    """The table's columns: Enter or space shows / hides one, → / ← (or + / -) widen / narrow it;
    the table behind changes as you go."""

    BINDINGS = [Binding("escape,q,W", "dismiss", "Close"), Binding("space", "toggle", "Show/hide", show=False),
                Binding("right,plus", "widen(1)", "Wider", show=False),
                Binding("left,minus", "widen(-1)", "Narrower", show=False)]

    def __init__(self, table: Columns) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="columns-dialog"):
            yield Static("Columns: Enter shows or hides, → ← width",
                         classes="dialog-title")
            yield OptionList(*[Option(self._label(i), id=c.key) for i, c in enumerate(self.table.columns)],
                             id="columns-list")

    def _label(self, i: int) -> Text:
        c = self.table.columns[i]
        shown = c.key not in self.table.hidden
        t = Text("[✓] " if shown else "[ ] ", style="bold green" if shown else "dim")
        t.append(c.label, style="" if shown else "dim")
        extra = self.table.extra.get(c.key, 0)
        if extra:
            t.append(f"  {c.width + extra} cells ({extra:+d})", style="cyan")
        return t

    def _redraw(self, i: int) -> None:
        self.query_one(OptionList).replace_option_prompt_at_index(i, self._label(i))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_toggle()

    def action_toggle(self) -> None:
        i = self.query_one(OptionList).highlighted
        if i is None:
            return
        key = self.table.columns[i].key
        if not self.table.set_shown(key, key in self.table.hidden):
            self.notify("the table keeps at least one column", severity="warning")
        self._redraw(i)

    def action_widen(self, step: int) -> None:
        i = self.query_one(OptionList).highlighted
        if i is None:
            return
        self.table.widen(self.table.columns[i].key, step * WIDEN_STEP)
        self._redraw(i)
