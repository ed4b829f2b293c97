"""Access graph view: an interactive matrix, lanes-and-arrows picture per fabric, and the call
explainer; export the matrix."""

from __future__ import annotations

import json
import textwrap

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Static

from speed_runtime.core.visible import visible

from ...models.access import AccessGraph, Verdict, explain, grants_needed
from ...services.exports import csv_lines
from ..messages import ExportRows, GrantRequested
from ..state import ConsoleState
from ..widgets.matrix import AccessMatrix
from .access_picture import access_picture
from .. import keymap


# A matrix has a cell per pair of nodes: drawn for at most MATRIX_MAX nodes (a 120-column terminal
# shows about 30 columns of it), exported as CSV for at most EXPORT_MATRIX_MAX (4 million cells,
# about 12 MB); the picture beside it and the JSON export grow with the grants, not the pairs.
MATRIX_MAX = 100
EXPORT_MATRIX_MAX = 2_000


def matrix_rows(g: AccessGraph, names: list[str]) -> list[list[str]]:
    """The matrix as a table: a header row, then one row per writer with "yes" where it may write."""
    out = [["may write to →", *names]]
    for a in names:
        out.append([a, *("" if a == b else ("yes" if g.may_write(a, b) else "no") for b in names)])
    return out


def too_many_for_a_matrix(count: int, fabric: str | None) -> str:
    # in short lines: the matrix takes the width of its longest line (half a terminal of 80 is 36)
    narrow = "Explain a pair above" if fabric is not None else "Pick a fabric (2 Fabrics, Enter on it) or explain a pair above"
    where = f" in fabric {visible(fabric) or '(ungrouped)'}" if fabric is not None else ""
    return textwrap.fill(f"{count:,} nodes{where}: the matrix is drawn for at most {MATRIX_MAX}. {narrow}; the "
                         "picture beside shows the grants, E exports them all.", 36)


def explanation(v: Verdict) -> Text | Group:
    """The verdict, then each check; under a failed one what fixes it, whole: a fix wraps with a
    hanging indent (a grid column), and when something fails the passing checks share one line, so
    the fixes fit the pane at 80x24."""
    passed = [ln.strip()[2:] for ln in v.lines[1:] if ln.strip().startswith("✓")]
    if v.ok:
        return Text("\n").join([Text(v.lines[0], style="bold green"), *(Text(ln, style="green") for ln in v.lines[1:])])
    parts: list = [Text(v.lines[0], style="bold red")]
    if passed:
        parts.append(Text("  ✓ " + " · ".join(passed), style="green"))
    fixes = iter(v.missing)
    for ln in v.lines[1:]:
        if ln.strip().startswith("✗"):
            parts.append(Text(ln, style="red"))
            fix = Table.grid()
            fix.add_column(no_wrap=True)
            fix.add_column()  # wraps under its own start
            fix.add_row(Text("      fix: ", style="bold"), Text(next(fixes, "")))
            parts.append(fix)
    return Group(*parts)


class AccessView(Vertical):
    BINDINGS = keymap.bindings("access")

    def __init__(self, state: ConsoleState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._sig: tuple | None = None
        self._pic_sig: tuple | None = None
        self._names: list[str] = []

    def compose(self) -> ComposeResult:
        with Horizontal(id="explainer", classes="toolbar"):
            yield Input(placeholder="caller", id="ex-caller", compact=True)
            yield Input(placeholder="target", id="ex-target", compact=True)
            yield Input(placeholder="service", id="ex-service", compact=True)
            yield Button("Explain", id="ex-go", compact=True, variant="primary")
            if not self.state.readonly:
                yield Button("Grant (g)", id="ex-grant", compact=True)
        yield Static(id="ex-result", classes="verdict")
        with Horizontal():
            with VerticalScroll(id="access-matrix-pane"):
                yield AccessMatrix(readonly=self.state.readonly, id="access-matrix")
            with VerticalScroll(id="access-arrows"):
                yield Static(id="access-arrows-body")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return keymap.offered("access", action, self.state.readonly)

    def on_resize(self) -> None:
        # The picture is laid out for the pane's width, which is only known once the view is shown.
        self._draw_picture(self.state.graph())

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
        self.query_one("#access-arrows-body", Static).update(access_picture(g, width, self.state.fabric))

    def refresh_view(self, force: bool = False) -> None:
        rows = self.state.registry.rows
        sig = (tuple((r.name, r.status, r.allow, r.services, r.groups, r.operators) for r in rows), self.state.fabric)
        if sig == self._sig:
            return
        self._sig = sig
        g = AccessGraph(rows)
        self._names = [name for name, r in sorted(g.nodes.items()) if self.state.registry.in_fabric(r)]
        matrix = self.query_one(AccessMatrix)
        if len(self._names) <= MATRIX_MAX:
            matrix.set_matrix(self._names, g.matrix(self._names),
                              frozenset(g.administered(self.state.operator_fingerprint)))
        else:
            matrix.set_matrix([], [], note=too_many_for_a_matrix(len(self._names), self.state.fabric))
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
            g = self.state.graph()
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

    def on_access_matrix_pair_chosen(self, event: AccessMatrix.PairChosen) -> None:
        event.stop()
        if event.grant:
            if self.state.readonly:
                self.notify("read-only console: grants are disabled (--readonly)", severity="warning")
                return
            self.post_message(GrantRequested(node=event.reader, peer=event.writer, revoke=event.revoke))
        else:
            self.set_pair(event.writer, event.reader)

    def action_explain(self) -> None:
        caller = self.query_one("#ex-caller", Input).value.strip()
        target = self.query_one("#ex-target", Input).value.strip()
        service = self.query_one("#ex-service", Input).value.strip()
        out = self.query_one("#ex-result", Static)
        if not caller or not target:
            out.update(Text("pick a caller and a target (and a service) to explain a call, or Enter on a "
                            "cell of the matrix", style="dim"))
            return
        out.update(explanation(explain(self.state.graph(), caller, target, service or None)))

    def action_edit_explainer(self) -> None:
        self.query_one("#ex-caller", Input).focus()

    def action_leave_inputs(self) -> None:
        self.query_one(AccessMatrix).focus()

    def action_grant(self) -> None:
        """The grant the explained call still needs, preferring one on a node this console runs
        or administers (its operator key)."""
        caller = self.query_one("#ex-caller", Input).value.strip()
        target = self.query_one("#ex-target", Input).value.strip()
        if not caller or not target:
            self.post_message(GrantRequested())
            return
        service = self.query_one("#ex-service", Input).value.strip()
        needed = grants_needed(self.state.graph(), caller, target, service or None)
        own = set(self.state.own_nodes()) | set(self.state.administered())
        node, peer = next((p for p in needed if p[0] in own), needed[0] if needed else (target, caller))
        self.post_message(GrantRequested(node=node, peer=peer))

    def action_export(self) -> None:
        g = self.state.graph()
        if len(self._names) <= EXPORT_MATRIX_MAX:
            # names may come from file names (unreadable entries): csv_lines keeps every cell a text
            self.post_message(ExportRows("access-matrix", "csv", csv_lines(matrix_rows(g, self._names)),
                                         f"access matrix of {len(self._names)} nodes"))
        else:
            self.notify(f"{len(self._names):,} nodes: the matrix is exported as CSV for at most "
                        f"{EXPORT_MATRIX_MAX:,}; pick a fabric for one. The JSON export holds every grant.",
                        severity="warning", markup=False)
        writes = g.writes_to(self._names)
        doc = {n: {"allows": list(g.nodes[n].allow), "may_write_to": writes[n]} for n in self._names}
        self.post_message(ExportRows("access-matrix", "json", [json.dumps(doc, indent=2, sort_keys=True)],
                                     f"access matrix of {len(self._names)} nodes"))
