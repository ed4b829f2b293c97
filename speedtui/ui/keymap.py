"""The console's keys: one table that drives the app's and the views' key bindings (their
``BINDINGS``), the action bar, the command palette and the help screen, and that states the
read-only rule once: a key marked ``changes`` changes the environment, and a --readonly console
offers none of them (not in the footer, the help, the palette or the action bar, and a request
that arrives anyway is refused).

Each key belongs to a scope: ``app`` (the app's own keys) or the widget whose ``BINDINGS`` it is
in (a view by its id, ``access-matrix``). Its ``id`` is what the config file's ``"keys"`` remaps."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.keys import format_key

VIEWS = [("leases", "Leases"), ("fabrics", "Fabrics"), ("access", "Access"), ("traces", "Traces"),
         ("replay", "Replay"), ("analytics", "Analytics"), ("audit", "Audit"), ("security", "Security"),
         ("durable", "Durable")]
VIEW_LABELS = dict(VIEWS)


@dataclass(frozen=True)
class Key:
    scope: str  # "app", or the widget whose BINDINGS it is in
    keys: str  # Textual key names, comma-separated
    action: str  # the Textual action it runs in its scope
    description: str
    id: str | None = None  # the binding id (the config file's "keys" remaps it)
    show: bool = True  # in the footer
    changes: bool = False  # changes the environment: never offered by a --readonly console
    bar: str = ""  # its button on the action bar (app keys)
    palette: str = ""  # its entry in the command palette…
    palette_help: str = ""  # …and what the entry says it does
    palette_shows_view: bool = False  # the palette entry shows the key's view first
    priority: bool = False  # handled as it arrives, before the keys after it are handed to a widget

    @property
    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.description, show=self.show, id=self.id, priority=self.priority)

    @property
    def name(self) -> str:
        """The action's name, without its parameters (``show`` for ``show('leases')``)."""
        return self.action.partition("(")[0]

    @property
    def first_key(self) -> str:
        """How its first key is written on a button or in a palette entry (``?`` for question_mark,
        ``^p`` for ctrl+p, as the footer writes them)."""
        first = self.keys.split(",")[0]
        return "^" + format_key(first[5:]) if first.startswith("ctrl+") else format_key(first)


KEYS: tuple[Key, ...] = (
    # ---------------------------------------------------------------- the app (every view)
    *(Key("app", str(i + 1), f"show('{vid}')", label, id=f"app.{vid}", show=False, palette=f"View: {label}",
          palette_help=f"Show the {label} view") for i, (vid, label) in enumerate(VIEWS)),
    Key("app", "question_mark,f1", "help", "Help", id="app.help", bar="Help", palette="Help",
        palette_help="Views, keys and the config file"),
    Key("app", "colon", "jump", "Jump", id="app.jump", palette="Jump",
        palette_help="To a node, a service or a view, with completion"),
    Key("app", "at", "time_travel", "Time travel", id="app.past", show=False, palette="Time travel",
        palette_help="The registry and traffic at a past moment, from the journals"),
    Key("app", "n", "launch", "Launch node", id="app.launch", changes=True, bar="Launch", palette="Launch node",
        palette_help="Start a node in this console or as a `speed node` process"),
    Key("app", "d", "stop_node", "Stop node", id="app.stop", changes=True, bar="Stop", palette="Stop node",
        palette_help="Stop a node this console started or administers (operator key)"),
    Key("app", "g", "grant", "Grant", id="app.grant", changes=True, bar="Grant", palette="Grant or revoke",
        palette_help="Change allow entries of its nodes and of nodes trusting its operator key"),
    Key("app", "F", "call", "Call", id="app.call", changes=True, bar="Call", palette="Fire SPC call",
        palette_help="Call a service from one of this console's nodes"),
    Key("app", "m", "send", "Message", id="app.send", changes=True, bar="Message", palette="Send message",
        palette_help="Send a MESSAGE from one of this console's nodes"),
    Key("app", "L", "logs", "Logs", id="app.logs", show=False, palette="Logs of the console's nodes",
        palette_help="Output and health lines of the nodes this console started, followed live"),
    Key("app", "t", "next_theme", "Theme", id="app.theme", show=False),
    Key("app", "q", "quit", "Quit", id="app.quit", bar="Quit"),
    # Textual's own key, on the action bar (the footer's palette hint, docked over the view's keys
    # where they overflow, was split mid-word: "^ppale tte"); the footer shows it without the bar
    Key("app", "ctrl+p", "command_palette", "Palette", id="app.palette", show=False, bar="Palette"),
    # Tab and shift+Tab as Textual's screens bind them, but handled as they arrive: a key typed in the
    # same burst (a paste, tmux send-keys, typing ahead) was handed to the field Tab left, before the
    # field had handled the Tab
    Key("app", "tab", "focus_next", "Next field", show=False, priority=True),
    Key("app", "shift+tab", "focus_previous", "Previous field", show=False, priority=True),
    # ---------------------------------------------------------------- every table (FastTable)
    Key("table", "i", "cells", "Cells whole", id="table.cells", show=False, palette="Row's cells whole",
        palette_help="The selected row's every cell, uncut, in a dialog"),
    Key("table", "w", "wide", "Wide mode", id="table.wide", show=False, palette="Wide mode",
        palette_help="Every column as wide as its cells (the table scrolls right), or fitted again"),
    Key("table", "W", "columns", "Columns", id="table.columns", show=False, palette="Columns",
        palette_help="Which columns the table shows, and how wide"),
    # ---------------------------------------------------------------- Leases
    Key("leases", "slash", "focus_filter", "Filter", id="leases.filter"),
    Key("leases", "s", "cycle_sort", "Sort", id="leases.sort"),
    Key("leases", "S", "reverse_sort", "Reverse", id="leases.reverse", show=False),
    Key("leases", "e", "expiring", "Expiring soon", id="leases.expiring"),
    Key("leases", "x", "reap", "Reap stale", id="leases.reap", changes=True, palette="Reap stale entry",
        palette_help="Remove the selected stale registry entry"),
    Key("leases", "y", "copy_entry", "Copy entry", id="leases.copy"),
    Key("leases", "E", "export_history", "Export history", id="leases.export", show=False),
    Key("leases", "plus", "detail_size(1)", "Detail bigger", id="leases.detail_bigger", show=False),
    Key("leases", "minus", "detail_size(-1)", "Detail smaller", id="leases.detail_smaller", show=False),
    Key("leases", "escape", "clear_filter", "Clear filter", show=False),
    # n / N only while the filter has a word to find (else n is the app's launch)
    Key("leases", "n", "next_match(1)", "Next match", id="leases.next_match"),
    Key("leases", "N", "next_match(-1)", "Previous match", id="leases.previous_match", show=False),
    # ---------------------------------------------------------------- Fabrics
    Key("fabrics", "a", "all_fabrics", "All fabrics", id="fabrics.all", palette="All fabrics",
        palette_help="Clear the fabric filter"),
    # ---------------------------------------------------------------- Access (the view, and its matrix)
    Key("access", "g", "grant", "Grant/revoke", id="access.grant", changes=True),
    Key("access", "e", "edit_explainer", "Explain a call", id="access.explain"),
    Key("access", "E", "export", "Export matrix", id="access.export", show=False, palette="Export access matrix",
        palette_help="CSV and JSON"),
    Key("access", "escape", "leave_inputs", "Leave inputs", show=False),
    Key("access-matrix", "up,k", "move(-1, 0)", "Up", show=False),
    Key("access-matrix", "down,j", "move(1, 0)", "Down", show=False),
    Key("access-matrix", "left,h", "move(0, -1)", "Left", show=False),
    Key("access-matrix", "right,l", "move(0, 1)", "Right", show=False),
    Key("access-matrix", "enter", "explain", "Explain pair", id="access.cell_explain"),
    Key("access-matrix", "g", "grant", "Grant pair", id="access.cell_grant", changes=True),
    Key("access-matrix", "d", "revoke", "Revoke pair", id="access.cell_revoke", changes=True),
    # ---------------------------------------------------------------- Traces
    Key("traces", "slash", "focus_filter", "Filter", id="traces.filter"),
    Key("traces", "p", "pause", "Pause", id="traces.pause", palette="Pause/resume traces",
        palette_help="Freeze the traces view"),
    Key("traces", "f", "follow", "Follow", id="traces.follow"),
    Key("traces", "o", "order", "Order", id="traces.order"),
    Key("traces", "T", "relative_time", "Relative time", id="traces.time", show=False),
    Key("traces", "enter", "open", "Envelope / expand message", id="traces.open", show=False),
    Key("traces", "c", "follow_call", "Follow call", id="traces.call"),
    Key("traces", "R", "replay", "Replay", id="traces.replay", changes=True, palette="Replay selected envelope",
        palette_help="Re-deliver the selected traced envelope"),
    Key("traces", "C", "as_call", "As call", id="traces.ascall"),
    Key("traces", "y", "copy_call", "Copy as speed call", id="traces.copy", show=False),
    Key("traces", "E", "export", "Export", id="traces.export", show=False, palette="Export traces",
        palette_help="The filtered traces as JSON lines"),
    Key("traces", "escape", "clear_filter", "Clear filter", show=False),
    Key("traces", "n", "next_match(1)", "Next match", id="traces.next_match"),
    Key("traces", "N", "next_match(-1)", "Previous match", id="traces.previous_match", show=False),
    # the envelope inspector (a dialog over Traces): the traces filter's words in it
    Key("envelope", "n", "next_match(1)", "Next match", id="envelope.next_match"),
    Key("envelope", "N", "next_match(-1)", "Previous match", id="envelope.previous_match", show=False),
    # ---------------------------------------------------------------- Logs (of the console's own nodes)
    Key("logs", "slash", "focus_search", "Search", id="logs.search"),
    Key("logs", "n", "next_match", "Next match", id="logs.next"),
    Key("logs", "N", "previous_match", "Previous match", id="logs.previous"),
    Key("logs", "s", "next_node", "Next node", id="logs.node"),
    Key("logs", "f", "toggle_follow", "Follow", id="logs.follow"),
    Key("logs", "escape", "close", "Close", id="logs.close"),
    # ---------------------------------------------------------------- Analytics, Audit, Security, Durable
    Key("analytics", "a", "run", "Run analysis", id="analytics.run", palette="Run analytics",
        palette_help="Analyse the journals with the Spark pipeline", palette_shows_view=True),
    Key("audit", "r", "rerun", "Re-run call", id="audit.rerun", changes=True),
    Key("audit", "e", "edit", "Edit call", id="audit.edit", changes=True),
    Key("audit", "y", "copy", "Copy command", id="audit.copy"),
    Key("security", "l", "lift", "Lift quarantine", id="security.lift", changes=True),
    Key("durable", "r", "relist", "Refresh outboxes", id="durable.refresh", palette="Read durable outboxes",
        palette_help="What waits in every outbox (`speed outbox`)", palette_shows_view=True),
    Key("durable", "v", "verify", "Verify receipts", id="durable.verify", palette="Verify durable receipts",
        palette_help="A node's receipt chains (`speed receipts`)", palette_shows_view=True),
)

# the command palette lists the app's keys first (views, jump, time travel), then the themes, help,
# what changes nothing, what changes the environment, and the exports and readers last
PALETTE_ORDER = ("app.leases", "app.fabrics", "app.access", "app.traces", "app.replay", "app.analytics", "app.audit",
                 "app.security", "app.durable", "app.jump", "app.past", "app.logs", "themes", "app.help", "traces.pause",
                 "fabrics.all", "app.launch", "app.stop", "app.grant", "app.call", "app.send", "leases.reap",
                 "traces.replay", "analytics.run", "traces.export", "access.export", "durable.refresh",
                 "durable.verify", "table.cells", "table.wide", "table.columns")

ACTION_BAR = ("app.launch", "app.stop", "app.grant", "app.call", "app.send", "app.help", "app.palette", "app.quit")

_BY_NAME = {(k.scope, k.name): k for k in KEYS}
_BY_ID = {k.id: k for k in KEYS if k.id}


def bindings(scope: str) -> list[Binding]:
    """The ``BINDINGS`` of ``scope``."""
    return [k.binding for k in KEYS if k.scope == scope]


def key(binding_id: str) -> Key:
    return _BY_ID[binding_id]


def changes(scope: str, name: str) -> bool:
    """Whether the action (or console command) ``name`` of ``scope`` changes the environment."""
    k = _BY_NAME.get((scope, name))
    return k is not None and k.changes


def offered(scope: str, action: str, readonly: bool) -> bool:
    """Textual's ``check_action`` answer: False (not offered at all: not in the footer, the help or
    the palette) for what changes the environment in a read-only console, else True. (None would
    mean "disabled but shown": the footer still listed n, d, g, x greyed out.)"""
    return not (readonly and changes(scope, action))


def action_bar() -> list[tuple[str, str]]:
    """(command, label) of the action bar's buttons."""
    return [(_BY_ID[i].name, bar_label(_BY_ID[i], taken=False)) for i in ACTION_BAR]


def bar_keys() -> list[Key]:
    return [_BY_ID[i] for i in ACTION_BAR]


def bar_label(k: Key, taken: bool) -> str:
    """A button's label: its key and name; its name only where the focused view binds that key to
    something else (the Access matrix's d revokes the pair: the bar's "Stop" is then not d)."""
    return k.bar if taken else f"{k.first_key} {k.bar}"


def bar_bindings() -> list[Binding]:
    """The one-key-bar rule: the screen that shows the action bar binds the keys the bar carries
    (launch, stop, grant, call, message, help, palette, quit) again, to the app's actions, unshown,
    so its footer does not repeat them and shows the view's keys (a screen without the bar, such as
    time travel, still shows them in its footer)."""
    return [Binding(k.keys, f"app.{k.action}", k.description, show=False, id=k.id) for k in bar_keys()]


def palette_keys() -> list[Key | None]:
    """The keys the command palette offers, in its order (None: where the themes go)."""
    return [None if i == "themes" else _BY_ID[i] for i in PALETTE_ORDER]
