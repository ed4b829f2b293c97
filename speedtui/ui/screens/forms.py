"""Action dialogs: launch a node, grant or revoke, pick a node (calls and messages: calls.py)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, RadioSet, Select, Static

from ...models.access import AccessGraph, grant_preview
from ...models.commands import NodeSpec, node_command
from ...services.actions import DEMO_SERVICE_NAMES
from ..widgets.toggles import OnOffCheckbox as Checkbox
from ..widgets.toggles import OnOffRadioButton as RadioButton


def split_list(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in text.replace(" ", ",").split(",") if p.strip()))


class PreviewDialog(ModalScreen):
    """A dialog whose preview follows every change of its fields."""

    def _preview(self) -> None:  # pragma: no cover - each dialog has its own
        raise NotImplementedError

    def refresh_preview(self) -> None:
        try:
            self._preview()
        except NoMatches:  # the dialog is closing
            pass


class LaunchScreen(PreviewDialog):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, root: str, key_path: str, names: list[str], fabrics: list[str]) -> None:
        super().__init__()
        self.root = root
        self.key_path = key_path
        self.names = names
        self.fabrics = fabrics

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="launch-dialog"):
            yield Static("Launch a node", classes="dialog-title")
            with VerticalScroll():
                yield Label("name")
                yield Input(placeholder="e.g. billing", id="ln-name")
                yield Label("fabrics (groups), comma separated")
                yield Input(id="ln-groups", suggester=SuggestFromList(self.fabrics))
                yield Label("allow (nodes that may write to it), comma separated")
                yield Input(id="ln-allow", suggester=SuggestFromList(self.names))
                yield Label("demo services")
                with Horizontal(classes="checks"):
                    for s in DEMO_SERVICE_NAMES:
                        yield Checkbox(s, value=s == "echo", id=f"ln-svc-{s}", compact=True)
                with Horizontal(classes="checks"):
                    yield Checkbox("tracing", value=True, id="ln-trace", compact=True)
                    with RadioSet(id="ln-where", compact=True):
                        yield RadioButton("in this console", value=True, id="ln-inproc")
                        yield RadioButton("separate `speed node` process", id="ln-proc")
                yield Static(id="ln-preview", classes="preview")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Launch", id="ln-go", variant="primary")
                yield Button("Cancel", id="ln-cancel")

    def on_mount(self) -> None:
        self._preview()
        self.query_one("#ln-name", Input).focus()  # typing goes to the name at once

    def spec(self) -> NodeSpec:
        return NodeSpec(
            name=self.query_one("#ln-name", Input).value.strip(),
            groups=split_list(self.query_one("#ln-groups", Input).value),
            allow=split_list(self.query_one("#ln-allow", Input).value),
            services=tuple(s for s in DEMO_SERVICE_NAMES if self.query_one(f"#ln-svc-{s}", Checkbox).value),
            trace=self.query_one("#ln-trace", Checkbox).value,
            in_process=self.query_one("#ln-inproc", RadioButton).value,
        )

    def _preview(self) -> None:
        s = self.spec()
        t = Text("equivalent: ", style="dim")
        t.append(node_command(self.root, self.key_path, NodeSpec(**{**s.__dict__, "name": s.name or "NAME"})).shell())
        if s.name in self.names:
            t.append(f"\n{s.name} is already registered: launching fails unless its lease is stale", style="yellow")
        self.query_one("#ln-preview", Static).update(t)

    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(RadioSet.Changed)
    def _changed(self) -> None:
        self.refresh_preview()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ln-cancel":
            self.dismiss(None)
            return
        s = self.spec()
        if not s.name:
            self.notify("a node needs a name", severity="error")
            return
        self.dismiss(s)

    def on_input_submitted(self) -> None:
        self.on_button_pressed(Button.Pressed(self.query_one("#ln-go", Button)))


class GrantScreen(PreviewDialog):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, own: list[str], graph: AccessGraph, node: str | None = None, peer: str | None = None,
                 revoke: bool = False, note: str | None = None) -> None:
        super().__init__()
        self.own = own  # the nodes the console may change: its own, and those trusting its operator key
        self.graph = graph
        self.wanted = node  # where the grant is needed, perhaps on a node the console cannot change
        self.node = node if node in own else (own[0] if own else None)
        self.peer = peer if peer and peer != self.node else ""  # never a node granting itself
        self.revoke = revoke
        self.note = note  # why `wanted` cannot be changed from here, and what to do

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="grant-dialog"):
            yield Static("Grant or revoke an allow entry", classes="dialog-title")
            if self.wanted and self.wanted not in self.own:
                note = self.note or (f"The grant is needed on {self.wanted}, which this console did not start: "
                                     f"its allow list is its own (restart it with --allow {self.peer or 'PEER'}).")
                yield Static(Text(f"{note} Below: the nodes this console may change.", style="yellow"),
                             classes="preview", id="gr-note")
            yield Label("on node (started by this console, or trusting its operator key)")
            yield Select([(n, n) for n in self.own], value=self.node, id="gr-node", allow_blank=False)
            yield Label("peer (the node that may write to it)")
            yield Input(value=self.peer, id="gr-peer", suggester=SuggestFromList(self.graph.names))
            with RadioSet(id="gr-mode", compact=True):
                yield RadioButton("grant (allow)", value=not self.revoke, id="gr-grant")
                yield RadioButton("revoke", value=self.revoke, id="gr-revoke")
            yield Static(id="gr-preview", classes="preview")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply", id="gr-go", variant="primary")
                yield Button("Cancel", id="gr-cancel")

    def on_mount(self) -> None:
        self._preview()

    def values(self) -> tuple[str | None, str, bool]:
        sel = self.query_one("#gr-node", Select).value
        node = sel if isinstance(sel, str) else None
        return node, self.query_one("#gr-peer", Input).value.strip(), self.query_one("#gr-grant", RadioButton).value

    def _preview(self) -> None:
        node, peer, grant = self.values()
        t = Text()
        if not node or not peer:
            t.append("choose a node and a peer to see what the change opens or closes", style="dim")
        else:
            t.append("preview:\n", style="bold")
            for line in grant_preview(self.graph, node, peer, grant):
                t.append(f"  {line}\n", style="green" if line.startswith("opens") else
                         "red" if line.startswith("closes") else "")
        self.query_one("#gr-preview", Static).update(t)

    @on(Input.Changed)
    @on(Select.Changed)
    @on(RadioSet.Changed)
    def _changed(self) -> None:
        self.refresh_preview()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "gr-cancel":
            self.dismiss(None)
            return
        node, peer, grant = self.values()
        if not node or not peer:
            self.notify("choose a node and a peer", severity="error")
            return
        if node == peer:
            self.notify(f"{node} cannot grant itself: choose another peer", severity="error")
            return
        self.dismiss((node, peer, grant))

    def on_input_submitted(self) -> None:
        self.on_button_pressed(Button.Pressed(self.query_one("#gr-go", Button)))


class PickScreen(ModalScreen[str | None]):
    """Pick one item (e.g. which of the console's nodes to stop)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, items: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.items = items

    def compose(self) -> ComposeResult:
        from textual.widgets import OptionList
        from textual.widgets.option_list import Option

        with Vertical(classes="dialog", id="pick-dialog"):
            yield Static(Text(self.title_text), classes="dialog-title")
            yield OptionList(*[Option(label, id=key) for key, label in self.items], id="pick-list", markup=False)

    def on_option_list_option_selected(self, event) -> None:
        self.dismiss(event.option.id)
