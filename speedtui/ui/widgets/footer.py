"""The app's footer: Textual's Footer, compact on a narrow terminal, without the memory it kept on
every focus change."""

from __future__ import annotations

from textual import events
from textual.screen import Screen
from textual.widgets import Footer


def prune_closed_watchers(node: object) -> None:
    """Drop watcher entries whose widget has been removed.

    Textual (8.2) registers each FooterKey as a watcher of the footer's ``compact`` and prunes
    that list only when ``compact`` changes (here only when the terminal crosses COMPACT_BELOW);
    so each recompose of the footer (every focus or view change) kept all the discarded keys alive
    with their styles and caches: about 3,000 objects per view switch, measured (the console's
    memory creep under load).
    """
    watchers = getattr(node, "__watchers", None)
    if not watchers:
        return
    for name, entries in watchers.items():
        entries[:] = [(owner, callback) for owner, callback in entries
                      if not getattr(owner, "_closing", False) and not getattr(owner, "_closed", False)]


#: below this width the keys go one space apart: the Traces view's keys need 82 columns spaced
COMPACT_BELOW = 100


class SpeedFooter(Footer):
    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW

    def bindings_changed(self, screen: Screen) -> None:
        prune_closed_watchers(self)
        super().bindings_changed(screen)
