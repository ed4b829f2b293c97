"""A line-API table for large, fast-changing row sets (thousands of rows at 10 Hz).

Only visible lines are rendered.  Row 0 is a fixed header; clicking a header cell posts
``HeaderClicked``.  The cursor follows a row key across updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .scrolling import set_virtual_size


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int


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

    def __init__(self, columns: Sequence[Column] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns: list[Column] = list(columns)
        self.rows: list[Row] = []
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.empty_text = "nothing to show"
        self._last_key: Any = None
        self._strips: dict[tuple, tuple[Row, Strip]] = {}  # rendered lines by (row id, cursor, width, x)

    # ------------------------------------------------------------------ data
    def set_columns(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self.refresh()

    def set_rows(self, rows: Sequence[Row], keep_key: bool = True) -> None:
        """``rows`` may be a lazy sequence with ``index_of(key)`` (rows built only when drawn)."""
        key = self.cursor_key if keep_key else None
        self.rows = rows if hasattr(rows, "index_of") else list(rows)
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
        return sum(c.width + 1 for c in self.columns)

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
        x += int(self.scroll_offset.x)
        pos = 0
        for c in self.columns:
            if pos <= x < pos + c.width + 1:
                return c.key
            pos += c.width + 1
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
    def _cells_text(self, cells: Sequence[str | Text], header: bool = False) -> Text:
        line = Text(no_wrap=True, overflow="crop")
        for i, c in enumerate(self.columns):
            val = cells[i] if i < len(cells) else ""
            t = val.copy() if isinstance(val, Text) else Text(str(val))
            if header and self.sort_column == c.key:
                t = Text(f"{c.label}{'▼' if self.sort_reverse else '▲'}")
            t.truncate(c.width, overflow="ellipsis", pad=True)
            line.append_text(t)
            line.append(" ")
        return line

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x = int(self.scroll_offset.x)
        base = self.rich_style
        if y == 0:
            style = self.get_component_rich_style("fast-table--header")
            text = self._cells_text([c.label for c in self.columns], header=True)
            return self._strip(text, base + style, scroll_x, width)
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
        strip = self._strip(self._cells_text(row.cells), style, scroll_x, width)
        # a few screens' worth: rows are replaced many times a second, and every cached Strip
        # carries its own caches, so a large cache was mostly garbage the collector had to walk
        if len(self._strips) > 4 * max(64, self.size.height):
            self._strips.clear()
        self._strips[ckey] = (row, strip)
        return strip

    def notify_style_update(self) -> None:
        self._strips.clear()  # theme changed: rendered lines are stale
        super().notify_style_update()

    def _strip(self, text: Text, style: Style, scroll_x: int, width: int) -> Strip:
        # cut the line where the view ends before it becomes segments: cropping inside a segment
        # goes through rich's split cache (16,384 entries, never emptied), and rows whose text
        # changes every second (countdowns, counters) kept adding to it for about 100 minutes
        text.truncate(scroll_x + width, overflow="crop")
        segments = list(text.render(self.app.console))
        strip = Strip(segments).apply_style(style)
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, style)
