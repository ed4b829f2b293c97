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
from ...services.launch import LAUNCH_FEATURES, LaunchError, check_spec, parse_seconds, parse_settings
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
    """What `speed node` can be asked, as a form: the line it makes is shown below and kept
    current; each field is checked by `speed node`'s own parser and the runtime's settings
    (``services/launch.py``), a problem one sentence beside its field. A separate process is
    started with exactly the line shown (the console's own operator key included)."""

    # typing goes to the name at once: focused as soon as the dialog is composed, so that keys typed
    # ahead of it find it focused when they come back up to the app (SpeedApp.on_key)
    AUTO_FOCUS = "#ln-name"

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    FIELDS = ("name", "groups", "allow", "features", "quota", "threat", "durable", "operator", "lease", "heartbeat",
              "line")

    def __init__(self, root: str, key_path: str, names: list[str], fabrics: list[str],
                 operator_public: str | None = None, operator_fingerprint: str | None = None,
                 own_key_public: str | None = None) -> None:
        super().__init__()
        self.root = root
        self.key_path = key_path
        self.names = names
        self.fabrics = fabrics
        self.operator_public = operator_public  # the operator key the console holds (offered by default)
        self.operator_fingerprint = operator_fingerprint
        self.own_key_public = own_key_public  # the console's own key, trusted by every process it launches
        self.tried = False  # "a node needs a name" only once Launch was pressed

    def _row(self, label: str, widget) -> ComposeResult:
        with Horizontal(classes="ln-row"):
            yield Label(label)
            yield widget

    def _error(self, field: str) -> Static:
        return Static(id=f"ln-err-{field}", classes="ln-error")

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="launch-dialog"):
            yield Static("Launch a node (speed node)", classes="dialog-title")
            with VerticalScroll():
                yield from self._row("name", Input(placeholder="e.g. billing", id="ln-name", compact=True))
                yield self._error("name")
                with RadioSet(id="ln-where", compact=True):
                    yield RadioButton("in this console", value=True, id="ln-inproc")
                    yield RadioButton("separate `speed node` process", id="ln-proc")
                yield Static(id="ln-only-process", classes="ln-note")
                yield from self._row("fabrics (groups)", Input(id="ln-groups", placeholder="comma separated",
                                                                suggester=SuggestFromList(self.fabrics), compact=True))
                yield self._error("groups")
                yield from self._row("allow", Input(id="ln-allow", placeholder="nodes that may write to it",
                                                    suggester=SuggestFromList(self.names), compact=True))
                yield self._error("allow")
                yield Label("demo services")
                with Horizontal(classes="checks"):
                    for s in DEMO_SERVICE_NAMES:
                        yield Checkbox(s, value=s == "echo", id=f"ln-svc-{s}", compact=True)
                yield Label("features (extensions)")
                with Horizontal(classes="checks"):
                    for f in LAUNCH_FEATURES:
                        yield Checkbox(f, id=f"ln-feat-{f}", compact=True)
                yield self._error("features")
                yield from self._row("quota", Input(id="ln-quota", placeholder="pending=64 rate=200 (feature quota)",
                                                    compact=True))
                yield self._error("quota")
                yield from self._row("threat", Input(id="ln-threat", placeholder="threshold=100 release=50",
                                                     compact=True))
                yield self._error("threat")
                with Horizontal(classes="checks"):
                    yield Checkbox("durable", id="ln-durable", compact=True)
                    yield Checkbox("durable on tmpfs (lost at a reboot)", id="ln-tmpfs", compact=True)
                yield self._error("durable")
                with Horizontal(classes="checks"):
                    if self.operator_public:
                        yield Checkbox(f"trust the operator key {self.operator_fingerprint or ''}".strip(),
                                       value=True, id="ln-operator", compact=True)
                    else:
                        yield Static(Text("no operator key loaded: speedtui --operator-key PATH", style="dim"))
                yield self._error("operator")
                with Horizontal(classes="ln-row"):
                    yield Label("lease (s)")
                    yield Input(id="ln-lease", placeholder="30", compact=True, classes="half")
                    yield Label(" heartbeat (s)")
                    yield Input(id="ln-heartbeat", placeholder="5", compact=True, classes="half")
                yield self._error("lease")
                yield self._error("heartbeat")
                with Horizontal(classes="checks"):
                    yield Checkbox("tracing", value=True, id="ln-trace", compact=True)
                    yield Checkbox("echo messages (stdout)", id="ln-echo", compact=True)
            yield self._error("line")
            yield Static(id="ln-preview", classes="preview")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Launch", id="ln-go", variant="primary", compact=True)
                yield Button("Cancel", id="ln-cancel", compact=True)

    def on_mount(self) -> None:
        self.refresh_preview()

    def _value(self, field: str) -> str:
        return self.query_one(f"#ln-{field}", Input).value

    def _ticked(self, wid: str) -> bool:
        found = self.query(f"#ln-{wid}")
        return bool(found) and found.first(Checkbox).value

    def read(self) -> tuple[NodeSpec, dict[str, str]]:
        """The spec the fields make and what is wrong with it (field → one sentence)."""
        problems: dict[str, str] = {}
        parsed: dict[str, object] = {}
        for field, parse in (("lease", parse_seconds), ("heartbeat", parse_seconds), ("quota", parse_settings),
                             ("threat", parse_settings)):
            try:
                parsed[field] = parse(self._value(field))
            except LaunchError as exc:
                problems[field] = str(exc)
                parsed[field] = None if field in ("lease", "heartbeat") else ()
        in_process = self.query_one("#ln-inproc", RadioButton).value
        operators = ((self.operator_public,) if self.operator_public and self._ticked("operator") else ())
        if not in_process and self.own_key_public and self.own_key_public not in operators:
            operators += (self.own_key_public,)  # what the console adds to every process it launches
        spec = NodeSpec(
            name=self._value("name").strip(),
            groups=split_list(self._value("groups")),
            allow=split_list(self._value("allow")),
            services=tuple(s for s in DEMO_SERVICE_NAMES if self._ticked(f"svc-{s}")),
            trace=self._ticked("trace"),
            in_process=in_process,
            lease_seconds=parsed["lease"], heartbeat_seconds=parsed["heartbeat"],  # type: ignore[arg-type]
            operators=operators,
            features=tuple(f for f in LAUNCH_FEATURES if self._ticked(f"feat-{f}")),
            quota=parsed["quota"], threat=parsed["threat"],  # type: ignore[arg-type]
            durable=self._ticked("durable"), durable_on_tmpfs=self._ticked("tmpfs"),
            echo_messages=self._ticked("echo") and not in_process,
        )
        problems = {**check_spec(spec, self.root, self.key_path), **problems}  # a field's own sentence first
        if not self.tried and not spec.name:
            problems.pop("name", None)
        return spec, problems

    def spec(self) -> NodeSpec:
        return self.read()[0]

    def _preview(self) -> None:
        s, problems = self.read()
        for field in self.FIELDS:
            err = self.query_one(f"#ln-err-{field}", Static)
            text = problems.get(field, "")
            err.update(Text(text))
            err.display = bool(text)
        note = self.query_one("#ln-only-process", Static)
        only = ("echo messages (a process prints each message it receives on its stdout, in its log)"
                if self._ticked("echo") and s.in_process else "")
        note.update(Text(f"only a separate process has: {only}" if only else ""))
        note.display = bool(only)
        t = Text("speed node line: " if not s.in_process else "equivalent: ", style="dim")
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
        self.tried = True
        s, problems = self.read()
        self.refresh_preview()
        if problems:
            first = next(f for f in self.FIELDS if f in problems)
            self.notify(f"{first}: {problems[first]}", severity="error")
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
