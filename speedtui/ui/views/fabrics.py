"""Fabrics view: groups as a tree, each node under every group, health rolled up; choosing a
fabric filters the other views."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static, Tree

from ...models.fabrics import build_fabrics
from .common import STATUS_ICON, STATUS_STYLE

HEALTH_STYLE = {"healthy": "green", "degraded": "yellow", "down": "bold red", "empty": "dim"}


class FabricsView(Vertical):
    BINDINGS = [
        Binding("a", "all_fabrics", "All fabrics", id="fabrics.all"),
    ]

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Static("Enter on a fabric filters every view; [b]a[/b] shows all again.", classes="hint")
            yield Button("All fabrics", id="fabrics-all", compact=True)
        yield Tree("fabrics", id="fabrics-tree")

    def on_mount(self) -> None:
        self._sig: tuple | None = None
        self.query_one(Tree).show_root = False

    def refresh_view(self, force: bool = False) -> None:
        rows = self.app.registry.rows
        fabrics = build_fabrics(rows)
        sig = tuple((f.name, tuple((r.name, r.status) for r in f.nodes)) for f in fabrics) + (self.app.fabric,)
        if sig == self._sig:
            return
        self._sig = sig
        tree = self.query_one(Tree)
        expanded = {n.data for n in tree.root.children if n.is_expanded} if tree.root.children else None
        cursor = tree.cursor_line
        tree.clear()
        for f in fabrics:
            label = Text()
            mark = "▶ " if self.app.fabric == f.name else ""
            label.append(f"{mark}{f.label}", style="bold magenta" if mark else "bold")
            label.append(f"  {f.health}", style=HEALTH_STYLE[f.health])
            label.append(f"  ({f.summary()})", style="dim")
            branch = tree.root.add(label, data=f.name, expand=expanded is None or f.name in expanded)
            for r in f.nodes:
                t = Text()
                t.append(f"{STATUS_ICON[r.status]} ", style=STATUS_STYLE[r.status])
                t.append(r.name)
                extra = []
                if r.services:
                    extra.append("services: " + ",".join(r.services))
                extra.append(f"allows {len(r.allow)}")
                t.append("  " + "  ".join(extra), style="dim")
                branch.add_leaf(t, data=("node", r.name))
        if cursor >= 0:
            tree.cursor_line = min(cursor, max(0, tree.last_line))

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        data = event.node.data
        if isinstance(data, str):
            self.app.set_fabric(data)
        elif isinstance(data, tuple):
            self.app.show_node(data[1])

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_all_fabrics()

    def action_all_fabrics(self) -> None:
        self.app.set_fabric(None)
