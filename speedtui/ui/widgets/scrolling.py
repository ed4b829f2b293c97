"""Resize a scroll view's content without laying out the whole screen."""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView


def set_virtual_size(view: ScrollView, size: Size) -> None:
    """Give ``view`` a new virtual size, updating its scrollbars in place.

    The ``virtual_size`` reactive's setter asks for a layout of the whole screen, which took
    15-60 ms under load; a view of fixed size only needs its scrollbars told.  Textual still lays
    out by itself when a scrollbar must appear or vanish (``show_*_scrollbar`` are layout
    reactives).  Uses Textual's private ``_scroll_update`` (pinned to 8.2; covered by tests of
    the scrollbars of both users of this function)."""
    if size == view.virtual_size:
        return
    view.set_reactive(ScrollView.virtual_size, size)
    view._scroll_update(size)
    view.refresh()
