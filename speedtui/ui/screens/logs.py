"""Logs of the nodes the console started (`L`): each launched `speed node` process's stdout and
stderr, the health and lease lines of its in-process nodes, followed live, one node or all (each
line marked with its node), searchable (`/`, the words highlighted, `n` / `N` jump while a search
is set; otherwise `n` falls through to the app's "launch node"). Nodes it did not start have no
log here: their journal is in Traces. Every line is a node's data: drawn as text, never markup."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from ...models.logs import LogLine
from ...models.search import matching_lines, next_match, search_words
from .. import keymap
from ..views.common import fmt_ts
from ..widgets.footer import SpeedFooter
from ..widgets.scrolling import set_virtual_size

OTHERS = ("This console keeps logs only of the nodes it started; for any other node, read its journal "
          "in Traces (4, filter node:NAME).")
STREAM_MARK = {"stdout": ("out", ""), "stderr": ("err", "yellow"), "health": ("health", "cyan"),
               "console": ("•", "dim")}


def line_text(line: LogLine, node_width: int) -> Text:
    """One log line as drawn: time, node (in the all-nodes view: ``node_width`` > 0), stream, and
    the node's text as plain text (``Text`` never reads markup; the model wrote control
    characters out)."""
    mark, style = STREAM_MARK.get(line.stream, (line.stream, ""))
    t = Text(fmt_ts(line.ts) + " ", style="dim", no_wrap=True, end="")
    if node_width:
        t.append(f"{line.node:<{node_width}} ", style="bold")
    t.append(f"{mark:<6} ", style=style or "dim")
    t.append(line.text, style="dim" if line.stream == "console" else "")
    return t


class LogPane(ScrollView, can_focus=True):
    """The lines, drawn only where they are on screen (a ring of thousands stays cheap)."""

    DEFAULT_CSS = "LogPane { height: 1fr; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines: list[LogLine] = []
        self._texts: list[str] | None = []  # what is searched: each line as drawn (made when searched)
        self.words: tuple[str, ...] = ()
        self.node_width = 0  # the all-nodes view marks each line with its node
        self.current: int | None = None  # the match n / N went to

    def set_lines(self, lines: list[LogLine], with_node: bool, follow: bool) -> None:
        self.lines = lines
        self.node_width = max((len(line.node) for line in lines), default=0) if with_node else 0
        self._texts = None
        prefix = len(line_text(lines[0], self.node_width).plain) - len(lines[0].text) if lines else 0
        width = prefix + max((len(line.text) for line in lines), default=0)
        set_virtual_size(self, Size(width, len(lines)))
        if follow:
            self.scroll_to(y=max(0, len(lines) - self.scrollable_content_region.height), animate=False)
        self.refresh()

    @property
    def texts(self) -> list[str]:
        """What a search looks in: each line's node, stream and text (not its time: 64,000 lines
        are searched in tens of milliseconds, not a second)."""
        if self._texts is None:
            self._texts = [f"{line.node} {STREAM_MARK.get(line.stream, (line.stream,))[0]} {line.text}"
                           for line in self.lines]
        return self._texts

    def go_to(self, index: int) -> None:
        self.current = index
        self.scroll_to(y=max(0, index - self.scrollable_content_region.height // 2), animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        idx = int(self.scroll_offset.y) + y
        width = self.scrollable_content_region.width
        if not 0 <= idx < len(self.lines):
            return Strip.blank(width, self.rich_style)
        text = line_text(self.lines[idx], self.node_width)
        if self.words:
            text.highlight_words(self.words, style="reverse", case_sensitive=False)
        if idx == self.current:
            text.stylize("bold underline")
        strip = Strip(list(text.render(self.app.console)))
        x = int(self.scroll_offset.x)
        return strip.crop_extend(x, x + width, self.rich_style)


class LogsScreen(Screen):
    BINDINGS = keymap.bindings("logs")

    def __init__(self, logs: Any, poll: float = 0.25, readonly: bool = False) -> None:
        super().__init__()
        self.logs = logs  # services.own_nodes.NodeLogs, or None (a console without actions)
        self.readonly = readonly  # it launches nothing: the empty log does not offer n
        self.poll = poll
        self.node: str | None = None  # None: every node's lines
        self.follow = True
        self._seen: tuple[int, str | None] = (-1, None)

    def compose(self) -> ComposeResult:
        yield Static("Logs of the nodes this console started", classes="section", id="logs-title")
        yield Static(Text(OTHERS, style="dim"), id="logs-others")
        yield Static(id="logs-states")
        yield Input(placeholder="/ search: words to highlight (Enter: first match, Esc: clear)", id="logs-search",
                    compact=True)
        yield LogPane(id="logs-pane")
        yield Static(id="logs-status")
        yield SpeedFooter()

    def on_mount(self) -> None:
        self.query_one(LogPane).focus()
        self.show(force=True)
        self.set_interval(self.poll, self.show, name="logs-follow")

    # ------------------------------------------------------------------ what is shown
    def names(self) -> list[str]:
        return self.logs.names() if self.logs is not None else []

    def show(self, force: bool = False) -> None:
        version = self.logs.version if self.logs is not None else 0
        if (version, self.node) == self._seen and not force:
            return
        self._seen = (version, self.node)
        names = self.names()
        if self.node is not None and self.node not in names:
            self.node = None
        pane = self.query_one(LogPane)
        lines = self.logs.lines(self.node) if self.logs is not None else []
        pane.set_lines(lines, with_node=self.node is None, follow=self.follow)
        self.query_one("#logs-states", Static).update(
            Text(self.logs.summary(self.node)) if names else
            Text("this console has started no node" + ("" if self.readonly else " yet (n launches one)"),
                 style="italic"))
        self._status()

    def _status(self) -> None:
        pane = self.query_one(LogPane)
        which = "all nodes" if self.node is None else self.node
        t = Text(f"{which} (s: next) · {len(pane.lines)} lines · ")
        t.append("FOLLOW" if self.follow else "follow off (f)", style="bold green" if self.follow else "yellow")
        if pane.words:  # counted once per change of lines or words, never while nobody searches
            matches = matching_lines(pane.texts, pane.words)
            t.append(f" · {len(matches)} matching" + (" (n / N)" if matches else ""))
        self.query_one("#logs-status", Static).update(t)

    # ------------------------------------------------------------------ keys
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_match", "previous_match"):  # else n is the app's "launch node"
            return bool(self.query_one(LogPane).words)
        return True

    def action_focus_search(self) -> None:
        self.set_focus(self.query_one("#logs-search", Input))  # at once (as the Leases filter)

    @on(Input.Changed, "#logs-search")
    def _search_changed(self, event: Input.Changed) -> None:
        pane = self.query_one(LogPane)
        pane.words = search_words(event.value)
        pane.current = None
        pane.refresh()
        self._status()
        self.refresh_bindings()

    @on(Input.Submitted, "#logs-search")
    def _search_submitted(self) -> None:
        self.query_one(LogPane).focus()
        self.action_next_match()

    def _jump(self, forward: bool) -> None:
        pane = self.query_one(LogPane)
        found = next_match(matching_lines(pane.texts, pane.words), pane.current, forward)
        if found is None:
            self.notify("no line matches the search", severity="warning", timeout=3)
            return
        self.follow = False  # a match stays where it is while new lines arrive
        pane.go_to(found)
        self._status()

    def action_next_match(self) -> None:
        self._jump(True)

    def action_previous_match(self) -> None:
        self._jump(False)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.show(force=True)

    def action_next_node(self) -> None:
        order: list[str | None] = [None, *self.names()]
        self.node = order[(order.index(self.node) + 1) % len(order)] if self.node in order else None
        self.show(force=True)

    def action_close(self) -> None:
        """Esc: clears the search first, then leaves the logs."""
        search = self.query_one("#logs-search", Input)
        if search.value or search.has_focus:
            search.value = ""
            self.query_one(LogPane).focus()
            return
        self.dismiss()
