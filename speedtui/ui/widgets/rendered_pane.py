"""A scrollable pane of pre-rendered rich content that changes without relayout of the screen.

A ``Static`` inside a scroll container asks for a layout of the whole screen on every update
(its height follows the content), and the size change then asks for a second one: under load
each full reflow took 15-60 ms on the event loop, twice per cursor move in the leases view.
This pane renders its content to lines itself; new content changes only its virtual size and
scrollbars (``scrolling.set_virtual_size``).
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.segment import Segment
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .scrolling import set_virtual_size


class RenderedPane(ScrollView):
    DEFAULT_CSS = """
    RenderedPane { height: 1fr; overflow-x: hidden; }
    """

    def __init__(self, renderable: RenderableType = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._renderable: RenderableType = renderable
        self._lines: list[Strip] = []
        self._width = -1

    def update(self, renderable: RenderableType) -> None:
        self._renderable = renderable
        self._width = -1
        # rendered after the screen's next refresh: whatever the key that led here changed on
        # screen (a table cursor) is painted first, the detail in the frame after
        self.call_after_refresh(self._render_lines)

    @property
    def lines(self) -> list[Strip]:
        """The rendered lines (for tests and copy)."""
        self._render_lines()
        return self._lines

    def _render_lines(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._width:
            return
        self._width = width
        console = self.app.console
        options = console.options.update_width(width)
        rendered = console.render_lines(self._renderable, options, style=self.rich_style, pad=False)
        self._lines = [Strip(Segment.adjust_line_length(line, width, style=self.rich_style)) for line in rendered]
        set_virtual_size(self, Size(width, len(self._lines)))
        self.refresh()

    def on_resize(self) -> None:
        self._render_lines()

    def render_line(self, y: int) -> Strip:
        self._render_lines()
        idx = int(self.scroll_offset.y) + y
        width = self.scrollable_content_region.width
        if 0 <= idx < len(self._lines):
            return self._lines[idx].crop_extend(0, width, self.rich_style)
        return Strip.blank(width, self.rich_style)

    def notify_style_update(self) -> None:
        self._width = -1  # the theme changed: render again with its colours
        super().notify_style_update()
