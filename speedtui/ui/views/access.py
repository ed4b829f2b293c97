"""Access graph view: matrix, lanes-and-arrows picture per fabric, and the call explainer."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Static

from ...models.access import AccessGraph, explain
from .access_picture import access_picture

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
        self._pic_sig = None

    def on_resize(self) -> None:
        # The picture is laid out for the pane's width, which is only known once the view is shown.
        self._draw_picture(AccessGraph(self.app.registry.rows))

    def _picture_width(self) -> int:
        pane = self.query_one("#access-arrows", VerticalScroll)
        width = pane.content_region.width or (self.app.size.width // 2 - 3)
        # Always leave room for the scrollbar: if its appearing narrowed the picture, the
        # narrower picture could be short enough to hide it again, and so on.
        return max(width - pane.styles.scrollbar_size_vertical, 1)

    def _draw_picture(self, g: AccessGraph) -> None:
        width = self._picture_width()
        sig = (self._sig, width)
        if sig == self._pic_sig:
            return
        self._pic_sig = sig
        self.query_one("#access-arrows-body", Static).update(access_picture(g, width, self.app.fabric))

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
        self._draw_picture(g)
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
