"""Access graph view: matrix, arrows grouped by fabric, and the call explainer."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Static

from ..models.access import MUTUAL, AccessGraph, explain

SYM_STYLE = {"⇄": "bold green", "→": "yellow", "←": "yellow", "·": "dim red", " ": ""}


def matrix_renderable(g: AccessGraph, names: list[str]) -> Table | Text:
    if not names:
        return Text("no nodes", style="dim")
    t = Table(box=None, padding=(0, 1), show_edge=False, title="row may write to column",
              title_style="dim", title_justify="left")
    t.add_column("", style="bold", no_wrap=True)
    for n in names:
        t.add_column(n[:8], justify="center", no_wrap=True)
    m = g.matrix(names)
    for i, a in enumerate(names):
        cells = []
        for j, _ in enumerate(names):
            s = m[i][j]
            cells.append(Text(s, style=SYM_STYLE.get(s, "")))
        t.add_row(a, *cells)
    return t


def arrows_renderable(g: AccessGraph, fabric_filter: str | None) -> Text:
    out = Text()
    for fabric, names in g.by_fabric().items():
        if fabric_filter is not None and fabric != fabric_filter:
            continue
        out.append(f"{fabric or '(ungrouped)'}\n", style="bold magenta")
        edges = g.edges(names)
        linked = {e.src for e in edges} | {e.dst for e in edges}
        for e in edges:
            if e.kind == MUTUAL:
                out.append(f"  {e.src} ⇄ {e.dst}", style="green")
                out.append("   mutual: calls work both ways\n", style="dim")
            else:
                out.append(f"  {e.src} → {e.dst}", style="yellow")
                out.append(f"   one-way: {e.dst} cannot answer {e.src} (calls fail)\n", style="dim")
        for n in names:
            if n not in linked:
                out.append(f"  {n} ✗", style="red")
                out.append("   no grant with any node of this fabric\n", style="dim")
    cross = [e for e in g.edges() if not set(g.nodes[e.src].groups) & set(g.nodes[e.dst].groups)]
    if cross and fabric_filter is None:
        out.append("across fabrics\n", style="bold magenta")
        for e in cross:
            sym = "⇄" if e.kind == MUTUAL else "→"
            out.append(f"  {e.src} {sym} {e.dst}\n", style="green" if e.kind == MUTUAL else "yellow")
    dangling = g.dangling()
    if dangling:
        out.append("grants naming absent nodes\n", style="bold")
        for n, a in dangling:
            out.append(f"  {n} allows {a} (not registered)\n", style="dim")
    return out


class AccessView(Vertical):
    BINDINGS = [
        Binding("g", "grant", "Grant/revoke", id="access.grant"),
        Binding("e", "edit_explainer", "Explain a call", id="access.explain"),
        Binding("escape", "leave_inputs", "Leave inputs", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Horizontal(id="explainer", classes="toolbar"):
            yield Input(placeholder="caller", id="ex-caller", compact=True)
            yield Input(placeholder="target", id="ex-target", compact=True)
            yield Input(placeholder="service", id="ex-service", compact=True)
            yield Button("Explain", id="ex-go", compact=True, variant="primary")
            yield Button("Grant…", id="ex-grant", compact=True)
        yield Static(id="ex-result", classes="verdict")
        with Horizontal():
            with VerticalScroll(id="access-matrix"):
                yield Static(id="access-matrix-body")
            with VerticalScroll(id="access-arrows"):
                yield Static(id="access-arrows-body")

    def on_mount(self) -> None:
        self._sig = None

    def graph(self) -> AccessGraph:
        return AccessGraph(self.app.registry.rows)

    def refresh_view(self, force: bool = False) -> None:
        rows = self.app.registry.rows
        sig = (tuple((r.name, r.status, r.allow, r.services, r.groups) for r in rows), self.app.fabric)
        if sig == self._sig:
            return
        self._sig = sig
        g = AccessGraph(rows)
        names = [r.name for r in sorted(rows, key=lambda r: r.name) if self.app.registry.in_fabric(r)]
        legend = Text("⇄ mutual   → one-way (row writes column)   ← one-way (column writes row)   · none",
                      style="dim")
        self.query_one("#access-matrix-body", Static).update(Group(matrix_renderable(g, names), legend))
        self.query_one("#access-arrows-body", Static).update(arrows_renderable(g, self.app.fabric))
        all_names = g.names
        self.query_one("#ex-caller", Input).suggester = SuggestFromList(all_names, case_sensitive=True)
        self.query_one("#ex-target", Input).suggester = SuggestFromList(all_names, case_sensitive=True)
        target = self.query_one("#ex-target", Input).value.strip()
        svcs = list(g.nodes[target].services) if target in g.nodes else []
        self.query_one("#ex-service", Input).suggester = SuggestFromList(svcs, case_sensitive=True)
        if self.query_one("#ex-caller", Input).value and target:
            self.action_explain()

    def set_pair(self, caller: str, target: str, service: str = "") -> None:
        self.query_one("#ex-caller", Input).value = caller
        self.query_one("#ex-target", Input).value = target
        self.query_one("#ex-service", Input).value = service
        self.action_explain()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "ex-target":
            g = self.graph()
            svcs = list(g.nodes[event.value].services) if event.value in g.nodes else []
            self.query_one("#ex-service", Input).suggester = SuggestFromList(svcs, case_sensitive=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_explain()
        nxt = {"ex-caller": "#ex-target", "ex-target": "#ex-service"}.get(event.input.id or "")
        if nxt:
            self.query_one(nxt, Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ex-go":
            self.action_explain()
        elif event.button.id == "ex-grant":
            self.action_grant()

    def action_explain(self) -> None:
        caller = self.query_one("#ex-caller", Input).value.strip()
        target = self.query_one("#ex-target", Input).value.strip()
        service = self.query_one("#ex-service", Input).value.strip()
        out = self.query_one("#ex-result", Static)
        if not caller or not target:
            out.update(Text("pick a caller and a target (and a service) to explain a call", style="dim"))
            return
        v = explain(self.graph(), caller, target, service or None)
        t = Text()
        t.append(v.lines[0] + "\n", style="bold green" if v.ok else "bold red")
        for ln in v.lines[1:]:
            t.append(ln + "\n", style="green" if "✓" in ln else "red")
        if v.missing:
            t.append("to fix:\n", style="bold")
            for m in v.missing:
                t.append(f"  • {m}\n")
        out.update(t)

    def action_edit_explainer(self) -> None:
        self.query_one("#ex-caller", Input).focus()

    def action_leave_inputs(self) -> None:
        self.query_one("#access-matrix").focus()

    def action_grant(self) -> None:
        caller = self.query_one("#ex-caller", Input).value.strip()
        target = self.query_one("#ex-target", Input).value.strip()
        self.app.open_grant(node=target or None, peer=caller or None)
