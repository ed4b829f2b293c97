"""Fabrics view: groups as a tree, each node under every group, health rolled up; choosing a
fabric filters the other views."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static, Tree

from ...models.fabrics import build_fabrics
from ..messages import ChooseFabric, ShowNode
from ..state import ConsoleState
from .common import STATUS_ICON, STATUS_STYLE
from .. import keymap

HEALTH_STYLE = {"healthy": "green", "degraded": "yellow", "down": "bold red", "empty": "dim"}
FILTER_MARK = "[filter] "  # a word, not a glyph: the tree's own ▶/▼ mark expansion


class FabricTree(Tree):
    """Enter chooses (it does not also fold the branch: space does that); j/k move as in every table."""

    BINDINGS = [Binding("j", "cursor_down", "Down", show=False), Binding("k", "cursor_up", "Up", show=False)]

    def __init__(self, label: str, **kwargs) -> None:
        super().__init__(label, **kwargs)
        self.auto_expand = False


class FabricsView(Vertical):
    BINDINGS = keymap.bindings("fabrics")

    def __init__(self, state: ConsoleState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._sig: tuple | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Static("Enter on a fabric filters every view (space folds it); [b]a[/b] shows all.", classes="hint")
            yield Button("All fabrics", id="fabrics-all", compact=True)
        yield FabricTree("fabrics", id="fabrics-tree")

    def on_mount(self) -> None:
        self.query_one(Tree).show_root = False

    def refresh_view(self, force: bool = False) -> None:
        rows = self.state.registry.rows
        fabrics = build_fabrics(rows)
        sig = tuple((f.name, tuple((r.name, r.status) for r in f.nodes)) for f in fabrics) + (self.state.fabric,)
        if sig == self._sig:
            return
        first = self._sig is None
        self._sig = sig
        tree = self.query_one(Tree)
        expanded = {n.data for n in tree.root.children if n.is_expanded} if tree.root.children else None
        cursor = tree.cursor_line
        tree.clear()
        for f in fabrics:
            label = Text()
            chosen = self.state.fabric == f.name
            label.append(f"{FILTER_MARK if chosen else ''}{f.label}", style="bold magenta" if chosen else "bold")
            label.append(" · ", style="dim")  # a visible separator: names and counts never read as one word
            label.append(f.health, style=HEALTH_STYLE[f.health])
            label.append(f" · {f.summary()}", style="dim")
            branch = tree.root.add(label, data=f.name, expand=expanded is None or f.name in expanded)
            for r in f.nodes:
                t = Text()
                t.append(f"{STATUS_ICON[r.status]} ", style=STATUS_STYLE[r.status])
                t.append(r.name)
                extra = []
                if r.services:
                    extra.append("services: " + ", ".join(r.services))
                extra.append(f"allows {len(r.allow)}")
                t.append(" · " + " · ".join(extra), style="dim")
                branch.add_leaf(t, data=("node", r.name))
        if first or cursor < 0:
            cursor = 0  # a cursor from the start, not only after the first arrow key
        tree.cursor_line = min(cursor, max(0, tree.last_line))

    def selected_node(self) -> str | None:
        """The node under the tree's cursor (None on a fabric): d, g, F and m act on it."""
        node = self.query_one(Tree).cursor_node
        data = node.data if node is not None else None
        return data[1] if isinstance(data, tuple) and data[:1] == ("node",) else None

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        data = event.node.data
        if isinstance(data, str):
            self.post_message(ChooseFabric(data))
        elif isinstance(data, tuple):
            self.post_message(ShowNode(data[1]))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_all_fabrics()

    def action_all_fabrics(self) -> None:
        self.post_message(ChooseFabric(None))
