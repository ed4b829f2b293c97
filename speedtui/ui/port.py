"""What the console's parts may ask of the UI: a narrow port instead of the app. The controller,
the navigator and the feed are handed a ``UiPort`` (``SpeedApp`` is one; the controller's tests
use a fake), never the app itself."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from textual.message import Message
from textual.screen import Screen


class UiPort(Protocol):
    @property
    def screen(self) -> Screen:
        """The screen on top (a dialog, when one is open)."""

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None) -> None:
        """A notification, always plain text (``SpeedApp.notify``)."""

    def push_screen(self, screen: Screen, callback: Callable[[Any], None] | None = None) -> Any:
        """Open a dialog; ``callback`` gets what it was dismissed with."""

    def run_worker(self, work: Callable[[], None], *, thread: bool, group: str, name: str) -> Any:
        """Run ``work`` in a thread worker (the UI never blocks)."""

    def post_message(self, message: Message) -> bool:
        """A typed message to the app (thread-safe: how workers report)."""

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any:
        """Run ``callback`` on the UI thread, from a worker."""

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any) -> bool:
        """Run ``callback`` once the screen has been refreshed."""

    def copy_to_clipboard(self, text: str) -> None:
        """OSC 52: the terminal's clipboard."""

    def active_view(self) -> str:
        """The id of the view shown."""

    def view_widget(self, vid: str) -> Any:
        """The view ``vid`` (it has ``refresh_view(force=...)``)."""

    def action_show(self, vid: str) -> None:
        """Show the view ``vid`` (and focus it)."""
