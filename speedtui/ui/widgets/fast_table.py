"""A line-API table for large, fast-changing row sets (thousands of rows at 10 Hz).

Only visible lines are rendered.  Row 0 is a fixed header; clicking a header cell posts
``HeaderClicked``.  The cursor follows a row key across updates.  The first ``frozen`` columns
stay when the table scrolls right; a ``flex`` column takes the width the others leave.

Cells never touch: every cell is cut or padded to its column's width in terminal cells and one
blank column follows it.  A column's declared width is its floor; where the view has room left
(a flex column first gives up what its cells do not use), a column whose cells on screen are cut grows to fit
them, left to right (``column_widths``).  Cell text is drawn in a form whose width every terminal
agrees on (``terminal_cells``), so a wide glyph cannot push the rest of its row off its columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .. import keymap
from .cell_text import CLUSTER_MARKS, terminal_cells
from .scrolling import set_virtual_size


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    flex: bool = False  # takes the spare width of the view (one column per table is enough)


GAP = 1  # blank columns after every cell

def column_widths(floors: Sequence[int], natural: Sequence[int], flex: Sequence[bool], view: int,
                  lead: int = 0, least: Sequence[int] | None = None, gap: int = GAP) -> tuple[int, ...]:
    """Each column's width in a view ``view`` cells wide. ``floors``: the declared widths (a flex
    column's floor is no wider than its cells); ``natural``: the widest cell each column has on
    screen; ``least``: how far a flex column may shrink (its label) so that the next column fits
    whole. The columns that fit the view (a leading run; the rest scroll) share what is left:
    first each cut column up to its natural width, left to right, then the flex column(s) take
    the rest. A column past the view's edge is as wide as its cells (up to the view's width)."""
    widths = list(floors)
    least = least or floors
    pos, fit = lead, 0
    for i, w in enumerate(floors):
        over = pos + w - view
        if over > 0 and flex[i] and pos + least[i] <= view:  # a flex column fits in what is left
            widths[i] = w = view - pos
            over = 0
        if over > 0:  # the flex columns placed already may give way to it
            give = [j for j in range(fit) if flex[j] and widths[j] > least[j]]
            if sum(widths[j] - least[j] for j in give) < over:
                break
            for j in reversed(give):
                take = min(over, widths[j] - least[j])
                widths[j] -= take
                pos -= take
                over -= take
        pos += w + gap
        fit += 1
    spare = max(0, view - pos)
    for i in range(fit):
        if not flex[i] and natural[i] > widths[i] and spare:
            grow = min(natural[i] - widths[i], spare)
            widths[i] += grow
            spare -= grow
    flexible = [i for i in range(fit) if flex[i]]
    for n, i in enumerate(flexible):
        widths[i] += spare // len(flexible) + (1 if n < spare % len(flexible) else 0)
    for i in range(fit, len(widths)):
        widths[i] = max(widths[i], min(natural[i], max(1, view - lead)))
    return tuple(widths)


@dataclass(frozen=True)
class Row:
    key: Any
    cells: tuple[str | Text, ...]
    style: str = ""  # rich style for the whole row, e.g. "red"


class FastTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    FastTable { height: 1fr; }
    FastTable > .fast-table--header { text-style: bold; background: $panel; color: $foreground; }
    FastTable > .fast-table--cursor { background: $primary 40%; }
    FastTable:focus > .fast-table--cursor { background: $primary 70%; }
    """
    COMPONENT_CLASSES = {"fast-table--header", "fast-table--cursor"}
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(0)", "Top", show=False),
        Binding("end", "edge(1)", "Bottom", show=False),
        Binding("enter", "select", "Select", show=False),
        *keymap.bindings("table"),
    ]

    cursor = reactive(0, always_update=True, repaint=False)

    class Highlighted(Message):
        def __init__(self, table: "FastTable", key: Any) -> None:
            super().__init__()
            self.table = table
            self.key = key

    class Selected(Message):
        def __init__(self, table: "FastTable", key: Any) -> None:
            super().__init__()
            self.table = table
            self.key = key

    class HeaderClicked(Message):
        def __init__(self, table: "FastTable", column: str) -> None:
            super().__init__()
            self.table = table
            self.column = column

    def __init__(self, columns: Sequence[Column] = (), frozen: int = 0, mark_cursor: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns: list[Column] = list(columns)
        self.frozen = frozen  # leading columns that do not scroll horizontally
        self.mark_cursor = mark_cursor  # "▶" on the cursor row: the selection reads without colour
        self._widths: tuple[Any, tuple[int, ...]] = (-1, ())  # (what they were computed from, widths)
        self.hidden: set[str] = set()  # columns not shown (W)
        self.extra: dict[str, int] = {}  # cells a column was widened by (W; negative: narrowed)
        self.wide = False  # w: every column as wide as its cells
        self._rows_version = 0
        self.rows: list[Row] = []
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.empty_text = "nothing to show"
        self._last_key: Any = None
        self._strips: dict[tuple, tuple[Row, Strip]] = {}  # rendered lines by (row id, cursor, width, x)

    # ------------------------------------------------------------------ data
    def set_rows(self, rows: Sequence[Row], keep_key: bool = True) -> None:
        """``rows`` may be a lazy sequence with ``index_of(key)`` (rows built only when drawn)."""
        key = self.cursor_key if keep_key else None
        self.rows = rows if hasattr(rows, "index_of") else list(rows)
        self._rows_version += 1
        idx = 0
        if key is not None:
            found = self._index_of(key)
            idx = found if found is not None else 0
        set_virtual_size(self, Size(self._total_width(), len(self.rows) + 1))  # a growing ring: no relayout
        self.cursor = min(idx, max(0, len(self.rows) - 1))
        self.refresh()

    @property
    def cursor_key(self) -> Any:
        if 0 <= self.cursor < len(self.rows):
            rows = self.rows
            return rows.key_at(self.cursor) if hasattr(rows, "key_at") else rows[self.cursor].key
        return None

    def _index_of(self, key: Any) -> int | None:
        if hasattr(self.rows, "index_of"):
            return self.rows.index_of(key)
        for i, r in enumerate(self.rows):
            if r.key == key:
                return i
        return None

    def move_to_key(self, key: Any) -> bool:
        i = self._index_of(key)
        if i is None:
            return False
        self.cursor = i
        return True

    def _total_width(self) -> int:
        widths = self._widths[1] or [c.width for c in self.columns]
        return sum(w + GAP for w in widths if w) + self._lead()

    def _lead(self) -> int:
        return 2 if self.mark_cursor else 0

    def _rows_on_screen(self) -> Sequence[Row]:
        top = int(self.scroll_offset.y)
        return self.rows[top:top + max(1, self.scrollable_content_region.height - 1)]

    def widths(self) -> tuple[int, ...]:
        """Each column's width in the current view, from the rows on screen (``column_widths``);
        0 for a hidden column. Wide mode: every shown column as wide as its widest cell."""
        view = self.scrollable_content_region.width
        sig = (view, self._rows_version, int(self.scroll_offset.y), self.sort_column, self.wide,
               frozenset(self.hidden), tuple(sorted(self.extra.items())))
        if self._widths[0] == sig:
            return self._widths[1]
        # the header's label whole (and the sort arrow after it)
        labels = [cell_len(c.label) + (c.key == self.sort_column) for c in self.columns]
        natural = list(labels)
        for row in self._rows_on_screen():
            for i, val in enumerate(row.cells[:len(natural)]):
                w = cell_len(CLUSTER_MARKS.sub("", val.plain if isinstance(val, Text) else str(val)))
                if w > natural[i]:
                    natural[i] = w
        shown = [i for i, c in enumerate(self.columns) if c.key not in self.hidden]
        # a widened (narrowed) column's floor moves by what the user gave it
        declared = [max(1, c.width + self.extra.get(c.key, 0)) for c in self.columns]
        if self.wide:
            room = max(1, view - self._lead())
            part = [min(room, max(declared[i], natural[i])) for i in shown]
        else:
            # a flex column gives up what its cells on screen do not use (unless it was widened)
            floors = [min(declared[i], natural[i]) if c.flex and not self.extra.get(c.key) else declared[i]
                      for i, c in enumerate(self.columns)]
            part = list(column_widths([floors[i] for i in shown], [natural[i] for i in shown],
                                      [self.columns[i].flex for i in shown], view, self._lead(),
                                      least=[min(floors[i], max(3, labels[i])) for i in shown]))
        full = [0] * len(self.columns)
        for i, w in zip(shown, part):
            full[i] = w
        widths = tuple(full)
        if widths != self._widths[1]:
            self._strips.clear()  # lines drawn with the old widths
            self._widths = (sig, widths)
            self.call_later(self._fit_virtual_size)
        else:
            self._widths = (sig, widths)
        return widths

    # ------------------------------------------------------------------ columns (w, W) and cells (i)
    def set_shown(self, key: str, shown: bool) -> bool:
        """Show or hide a column; the last shown column stays. Whether it changed."""
        if shown == (key not in self.hidden):
            return False
        if not shown and len(self.hidden) + 1 >= len(self.columns):
            return False
        (self.hidden.discard if shown else self.hidden.add)(key)
        self.refresh()
        return True

    def widen(self, key: str, cells: int) -> int:
        """Make a column ``cells`` wider (narrower when negative, down to one cell): its floor, so
        it takes that room before any other column grows into the view. Its new floor."""
        column = next(c for c in self.columns if c.key == key)
        extra = max(1 - column.width, self.extra.get(key, 0) + cells)
        if extra:
            self.extra[key] = extra
        else:
            self.extra.pop(key, None)
        self.refresh()
        return column.width + extra

    def action_wide(self) -> None:
        """w: wide mode (every shown column as wide as its widest cell on screen; the table
        scrolls right) or back."""
        self.wide = not self.wide
        self.refresh()
        self.notify("wide mode: every column whole, → scrolls" if self.wide else "columns fitted to the view")

    def action_columns(self) -> None:
        """W: which columns are shown and how wide (a dialog)."""
        from ..screens.cells import ColumnsScreen  # the dialog knows the table, not the reverse at import

        self.app.push_screen(ColumnsScreen(self))

    def action_cells(self) -> None:
        """i: the selected row's cells whole, one per line, in a dialog."""
        from ..screens.cells import CellsScreen

        if not (0 <= self.cursor < len(self.rows)):
            self.notify("select a row to see its cells whole", severity="warning")
            return
        row = self.rows[self.cursor]
        self.app.push_screen(CellsScreen([(c.label, row.cells[i] if i < len(row.cells) else "")
                                          for i, c in enumerate(self.columns)]))

    def _fit_virtual_size(self) -> None:
        set_virtual_size(self, Size(self._total_width(), len(self.rows) + 1))

    # ------------------------------------------------------------------ cursor
    def watch_cursor(self, old: int, new: int) -> None:
        if not self.rows:
            return
        if new < 0 or new >= len(self.rows):
            self.cursor = max(0, min(new, len(self.rows) - 1))
            return
        top = int(self.scroll_offset.y)
        self._scroll_cursor_into_view()
        if int(self.scroll_offset.y) == top and old != new and 0 <= old < len(self.rows):
            # only the two lines that changed (line 0 is the header)
            self.refresh_lines(old + 1, 1)
            self.refresh_lines(new + 1, 1)
        else:
            self.refresh()
        key = self.cursor_key
        if key != self._last_key:
            self._last_key = key
            self.post_message(self.Highlighted(self, key))

    def _scroll_cursor_into_view(self) -> None:
        body = max(1, self.scrollable_content_region.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + body:
            self.scroll_to(y=self.cursor - body + 1, animate=False, immediate=True)

    def user_moved(self, target: int) -> None:
        """Called (synchronously) before a move the user asked for; subclasses react."""

    def action_cursor(self, delta: int) -> None:
        if self.rows:
            target = max(0, min(len(self.rows) - 1, self.cursor + delta))
            self.user_moved(target)
            self.cursor = target

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.scrollable_content_region.height - 2))

    def action_edge(self, end: int) -> None:
        if self.rows:
            target = len(self.rows) - 1 if end else 0
            self.user_moved(target)
            self.cursor = target

    def action_select(self) -> None:
        if self.rows:
            self.post_message(self.Selected(self, self.cursor_key))

    # ------------------------------------------------------------------ mouse
    def _column_at(self, x: int) -> str | None:
        widths = self.widths()
        pos = self._lead()
        frozen_end = pos + sum(w + GAP for w in widths[:self.frozen] if w)
        if x >= frozen_end:
            x += int(self.scroll_offset.x)
        for c, w in zip(self.columns, widths):
            if not w:  # hidden
                continue
            if pos <= x < pos + w + GAP:
                return c.key
            pos += w + GAP
        return None

    def on_click(self, event: events.Click) -> None:
        y = event.y
        if y == 0:
            col = self._column_at(event.x)
            if col:
                self.post_message(self.HeaderClicked(self, col))
            return
        idx = int(self.scroll_offset.y) + y - 1
        if 0 <= idx < len(self.rows):
            self.user_moved(idx)
            self.cursor = idx
            if event.chain >= 2:
                self.post_message(self.Selected(self, self.cursor_key))

    # ------------------------------------------------------------------ rendering
    def _cells_text(self, cells: Sequence[str | Text], header: bool = False, cursor: bool = False,
                    columns: slice = slice(None)) -> Text:
        line = Text(no_wrap=True, overflow="crop")
        widths = self.widths()
        for i in range(len(self.columns))[columns]:
            c, width = self.columns[i], widths[i]
            if not width:  # hidden
                continue
            t = terminal_cells(cells[i] if i < len(cells) else "")
            if header and self.sort_column == c.key:
                # the arrow always shows: the label gives way to it
                t = Text(c.label)
                t.truncate(max(1, width - 1), overflow="ellipsis")
                t.append("▼" if self.sort_reverse else "▲")
            t.truncate(width, overflow="ellipsis", pad=True)
            line.append_text(t)
            line.append(" " * GAP)
        return line

    def _line(self, cells: Sequence[str | Text], style: Style, scroll_x: int, width: int, header: bool = False,
              cursor: bool = False) -> Strip:
        mark = Text(("▶ " if cursor else "  ") if self.mark_cursor else "")
        if not self.frozen:
            return self._strip(mark + self._cells_text(cells, header), style, scroll_x, width)
        fixed = mark + self._cells_text(cells, header, columns=slice(0, self.frozen))
        left = self._strip(fixed, style, 0, min(width, fixed.cell_len))
        rest_width = width - left.cell_length
        if rest_width <= 0:
            return left
        rest = self._strip(self._cells_text(cells, header, columns=slice(self.frozen, None)), style, scroll_x,
                           rest_width)
        return Strip.join([left, rest])

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x = int(self.scroll_offset.x)
        self.widths()  # first: new widths empty the cache of drawn lines
        base = self.rich_style
        if y == 0:
            style = self.get_component_rich_style("fast-table--header")
            return self._line([c.label for c in self.columns], base + style, scroll_x, width, header=True)
        idx = int(self.scroll_offset.y) + y - 1
        if idx >= len(self.rows):
            if idx == 0 and not self.rows:
                return self._strip(Text(self.empty_text, style="italic dim"), base, 0, width)
            return Strip.blank(width, base)
        row = self.rows[idx]
        ckey = (id(row), idx == self.cursor, width, scroll_x, self.has_focus)
        hit = self._strips.get(ckey)
        if hit is not None and hit[0] is row:
            return hit[1]
        style = base
        if row.style:
            style = style + Style.parse(row.style)
        if idx == self.cursor:
            style = style + self.get_component_rich_style("fast-table--cursor")
        strip = self._line(row.cells, style, scroll_x, width, cursor=idx == self.cursor)
        # a few screens' worth: rows are replaced many times a second, and every cached Strip
        # carries its own caches, so a large cache was mostly garbage the collector had to walk
        if len(self._strips) > 4 * max(64, self.size.height):
            self._strips.clear()
        self._strips[ckey] = (row, strip)
        return strip

    def notify_style_update(self) -> None:
        self._strips.clear()  # theme changed: rendered lines are stale
        super().notify_style_update()

    def on_resize(self) -> None:
        self._widths = (-1, ())  # a flex column follows the view's width

    def _strip(self, text: Text, style: Style, scroll_x: int, width: int) -> Strip:
        # cut the line where the view ends before it becomes segments: cropping inside a segment
        # goes through rich's split cache (16,384 entries, never emptied), and rows whose text
        # changes every second (countdowns, counters) kept adding to it for about 100 minutes
        text.truncate(scroll_x + width, overflow="crop")
        segments = list(text.render(self.app.console))
        strip = Strip(segments).apply_style(style)
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, style)
