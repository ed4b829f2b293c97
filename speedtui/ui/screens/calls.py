"""The call and message dialogs: fire an SPC call (the result is shown in the dialog), send a
MESSAGE; without a node of the console's own, both offer to start one.  Where the target does not
allow the chosen caller and the console may change its grants (its own node, or one trusting the
operator key), both offer to grant first and revoke afterwards."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from rich.text import Text
from speed_runtime.core.visible import visible, visible_json
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Select, Static

from ...models.access import AccessGraph
from ...models.commands import speed_call_command
from ...services.processes import console_node_name
from ..messages import CopyText, RunCall, StartConsoleNode
from ..widgets.toggles import OnOffCheckbox as Checkbox


def parse_args(text: str) -> tuple[dict | None, str]:
    text = text.strip() or "{}"
    try:
        val = json.loads(text)
    except ValueError as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if not isinstance(val, dict):
        return None, "arguments must be a JSON object, e.g. {\"amount\": 100}"
    return val, ""


def no_own_node(what: str, operator: bool = True) -> ComposeResult:
    """Shown instead of the sender field when the console has no node to send from."""
    yield Static(Text.assemble(
        ("This console has no node of its own", "bold yellow"),
        (f" to {what} from (only nodes it runs can send). Start one: it registers as ", ""),
        (console_node_name(), "bold"), (" in this environment, runs inside the console and stops with it. "
                                         "Other nodes must allow it before it can reach them", ""),
        ("." if operator else ", and without an operator key (speedtui --operator-key PATH) the console "
                              "cannot grant that on nodes it did not start.", "")),
        classes="no-own-node")
    yield Button(f"Start {console_node_name()}", id="start-console-node", variant="primary")


def focus_at_once(screen, widget) -> None:
    """Focus `widget` now, while the dialog mounts: keys typed in the burst that opened it (a paste,
    `tmux send-keys`) are handled after this and find it focused (SpeedApp.on_key sends them to it);
    `widget.focus()` would wait until after them, and they were lost. Not scrolled to: nothing is
    laid out yet (at 80x24 the message dialog scrolled past its title), and its field is near the
    top."""
    screen.set_focus(widget, scroll_visible=False)


def grants_missing(graph: AccessGraph, caller: str | None, target: str, answer: bool) -> list[tuple[str, str]]:
    """The (node, peer) grants a message from ``caller`` to ``target`` lacks (and its answer back)."""
    if not caller or target not in graph.nodes or caller == target:
        return []
    out = [] if graph.may_write(caller, target) else [(target, caller)]
    if answer and caller in graph.nodes and not graph.may_write(target, caller):
        out.append((caller, target))
    return out


def _grants_of(graph: AccessGraph) -> dict[str, tuple]:
    """What the dialogs' checks read of each node: its grants, services and operators."""
    return {name: (row.allow, row.services, row.operators) for name, row in graph.nodes.items()}


class GrantOffer:
    """The part of the call and message dialogs that offers to grant first (and revoke after)."""

    prefix = ""

    def setup_offer(self, own: list[str], administered: Iterable[str],
                    cannot_change: Callable[[str, str], str] | None) -> None:
        self.changeable = set(own) | set(administered)
        self.cannot_change = cannot_change

    def offer_widgets(self) -> ComposeResult:
        with Horizontal(classes="checks", id=f"{self.prefix}-grants"):
            # an offer: nothing in the environment changes unless the operator ticks it
            yield Checkbox("grant first", value=False, id=f"{self.prefix}-grant", compact=True)
            yield Checkbox("revoke afterwards", value=True, id=f"{self.prefix}-revoke", compact=True)

    def offer_lines(self, missing: list[tuple[str, str]], t: Text) -> bool:
        """Explain the missing grants into ``t`` as the offer stands (ticked or not); show the offer if
        the console can make them all. True when nothing is missing once the ticked grants are made."""
        can = self._can_offer(missing)
        self.query_one(f"#{self.prefix}-grants").display = can
        ticked = can and self.query_one(f"#{self.prefix}-grant", Checkbox).value
        for node, peer in missing:
            if ticked:
                t.append(f"✓ {node} will allow {peer} first (grant first)\n", style="green")
            elif node in self.changeable and can:
                t.append(f"○ {node} does not allow {peer}: tick \"grant first\" to allow it (operator key or "
                         "the console's node)\n", style="yellow")
            elif node in self.changeable:  # (no offer: another grant it needs cannot be made from here)
                blocked = ", ".join(sorted({n for n, _ in missing if n not in self.changeable}))
                t.append(f"○ {node} does not allow {peer}: the console could grant that, but not what {blocked} "
                         "lacks (above)\n", style="yellow")
            else:
                why = self.cannot_change(node, peer) if self.cannot_change else f"{node} cannot be changed from here"
                t.append(f"✗ {node} does not allow {peer}: {why}\n", style="red")
        return not missing or ticked

    def follow_registry(self, graph: AccessGraph) -> None:
        """The registry changed while the dialog is open: its checks follow (a grant made
        meanwhile, or a target restarted with it, was still said to be missing)."""
        if graph is not self.graph and _grants_of(graph) != _grants_of(self.graph):  # (the same until rows change)
            self.graph = graph
            try:
                self.recheck()
            except NoMatches:  # the dialog is closing
                pass

    def recheck(self) -> None:  # pragma: no cover - each dialog's own
        raise NotImplementedError

    def _can_offer(self, missing: list[tuple[str, str]]) -> bool:
        """Whether the console can make every missing grant (the offer is shown only then)."""
        return bool(missing) and all(node in self.changeable for node, _ in missing)

    def offer_choice(self, missing: list[tuple[str, str]]) -> tuple[bool, bool]:
        if not self._can_offer(missing):  # decided as the offer's lines decided, not read off a widget
            return False, False
        grant = self.query_one(f"#{self.prefix}-grant", Checkbox).value
        return grant, grant and self.query_one(f"#{self.prefix}-revoke", Checkbox).value


class CallScreen(GrantOffer, ModalScreen[None]):
    """Fire an SPC call; the call runs in a worker, the result is shown here."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Close"), Binding("ctrl+y", "copy", "Copy as command")]
    prefix = "call"

    def __init__(self, own: list[str], graph: AccessGraph, root: str, key_path: str, caller: str | None = None,
                 target: str = "", service: str = "", arguments: Any = None, timeout: float = 5.0,
                 administered: Iterable[str] = (), cannot_change: Callable[[str, str], str] | None = None,
                 operator: bool = True) -> None:
        super().__init__()
        self.setup_offer(own, administered, cannot_change)
        self.operator = operator
        self.own = own
        self.graph = graph
        self.root = root
        self.key_path = key_path
        self.init = dict(caller=caller if caller in own else (own[0] if own else None), target=target,
                         service=service, timeout=f"{timeout:g}",
                         arguments=arguments if isinstance(arguments, str)  # the text as typed
                         else json.dumps(arguments if arguments is not None else {}))

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="call-dialog"):
            yield Static("Fire an SPC call", classes="dialog-title")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Call", id="call-go", variant="primary")
                yield Button("Copy (ctrl+y)", id="call-copy")
                yield Button("Close", id="call-close")
            if not self.own:
                yield from no_own_node("call", self.operator)
            with Horizontal(classes="formrow"):
                if self.own:
                    with Vertical():
                        yield Label("caller (ours)")
                        yield Select([(n, n) for n in self.own], value=self.init["caller"], id="call-caller",
                                     allow_blank=False)
                with Vertical():
                    yield Label("target")
                    yield Input(value=self.init["target"], id="call-target",
                                suggester=SuggestFromList(self.graph.names, case_sensitive=True))
                with Vertical():
                    yield Label("service")
                    yield Input(value=self.init["service"], id="call-service")
            with Horizontal(classes="formrow"):
                with Vertical(classes="wide"):
                    yield Label("arguments (JSON object)")
                    yield Input(value=self.init["arguments"], id="call-args")
                with Vertical(classes="narrow"):
                    yield Label("timeout s")
                    yield Input(value=self.init["timeout"], id="call-timeout")
            yield from self.offer_widgets()
            yield Static(id="call-check", classes="preview")
            yield Static(id="call-result", classes="result")

    def on_mount(self) -> None:
        self._update_services()
        self._check()
        if not self.own:  # Enter starts the console node: the one thing to do first
            focus_at_once(self, self.query_one("#start-console-node", Button))
        else:  # typing goes to the first field still empty
            empty = next((f for f in ("#call-target", "#call-service") if not self.query_one(f, Input).value), None)
            focus_at_once(self, self.query_one(empty or "#call-args", Input))

    def values(self) -> dict[str, Any]:
        sel = self.query_one("#call-caller", Select).value if self.own else None
        args, err = parse_args(self.query_one("#call-args", Input).value)
        try:
            timeout = float(self.query_one("#call-timeout", Input).value)
            if timeout <= 0:
                raise ValueError
        except ValueError:
            timeout = None
        return dict(caller=sel if isinstance(sel, str) else None,
                    target=self.query_one("#call-target", Input).value.strip(),
                    service=self.query_one("#call-service", Input).value.strip(),
                    arguments=args, args_error=err, timeout=timeout)

    def recheck(self) -> None:
        self._update_services()
        self._check()

    def _update_services(self) -> None:
        target = self.query_one("#call-target", Input).value.strip()
        svcs = list(self.graph.nodes[target].services) if target in self.graph.nodes else []
        self.query_one("#call-service", Input).suggester = SuggestFromList(svcs, case_sensitive=True)

    def _check(self) -> str:
        v = self.values()
        problems = []
        if not v["caller"]:
            problems.append("this console has no node to call from: start one (button above)")
        if not v["target"]:
            problems.append("choose a target")
        elif v["target"] not in self.graph.nodes:
            problems.append(f"{v['target']} is not in the registry")
        if not v["service"]:
            problems.append("choose a service")
        elif v["target"] in self.graph.nodes and v["service"] not in self.graph.nodes[v["target"]].services:
            svcs = ", ".join(self.graph.nodes[v["target"]].services) or "none"
            problems.append(f"{v['target']} does not advertise {v['service']} (it offers {svcs})")
        if v["args_error"]:
            problems.append(v["args_error"])
        if v["timeout"] is None:
            problems.append("timeout must be a positive number of seconds")
        t = Text()
        granted = self.offer_lines(self.missing(v), t)
        if problems:
            for p in problems:
                t.append(f"✗ {p}\n", style="red")
        else:
            # without the grants the call is refused (ACCESS_DENIED): not "ready" beside a missing one
            offered = self.query_one("#call-grants").display
            t.append("✓ ready: " if granted else "○ refused unless granted first: " if offered else
                     "✗ refused (a grant it needs cannot be made from here): ",
                     style="green" if granted else "yellow" if offered else "red")
            t.append(speed_call_command(v["target"], v["service"], v["arguments"], v["caller"], self.root,
                                        self.key_path, v["timeout"]), style="dim")
        self.query_one("#call-check", Static).update(t)
        return "; ".join(problems)

    def missing(self, v: dict[str, Any]) -> list[tuple[str, str]]:
        return grants_missing(self.graph, v["caller"], v["target"], answer=True)

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _changed(self, event) -> None:
        try:
            if getattr(event, "input", None) is not None and event.input.id == "call-target":
                self._update_services()
            self._check()
        except NoMatches:  # the dialog is closing
            pass

    def on_input_submitted(self) -> None:
        self.action_call()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id
        if bid == "call-close":
            self.dismiss(None)
        elif bid == "call-copy":
            self.action_copy()
        elif bid == "start-console-node":
            v = self.values()
            self.dismiss(None)
            self.app.post_message(StartConsoleNode(then="call", fill=dict(
                target=v["target"], service=v["service"], arguments=self.query_one("#call-args", Input).value,
                timeout=v["timeout"] or 5.0)))
        else:
            self.action_call()

    def action_call(self) -> None:
        # only blocking problems stop the call; a service the target does not advertise
        # is still sent (the callee answers SERVICE_NOT_FOUND, which is worth seeing)
        v = self.values()
        if not v["caller"] or not v["target"] or not v["service"] or v["args_error"] or v["timeout"] is None:
            self.notify(self._check() or "incomplete call", severity="error")
            return
        grant, revoke = self.offer_choice(self.missing(v))
        self.query_one("#call-result", Static).update(Text("granting, then calling…" if grant else "calling…",
                                                           style="yellow"))
        self.app.post_message(RunCall(v["caller"], v["target"], v["service"], v["arguments"], v["timeout"],
                                      grant, revoke))

    def show_result(self, rec) -> None:
        t = Text()
        if rec.status == "SUCCESS":
            t.append("SUCCESS ", style="bold green")
            t.append(visible_json(rec.result)[:400])
        else:
            t.append(f"{rec.error_code or 'failed'}: ", style="bold red")
            t.append(rec.error_message)
        if rec.latency_ms is not None:
            t.append(f"   latency {rec.latency_ms:.1f} ms", style="dim")
        self.query_one("#call-result", Static).update(t)

    def show_failure(self, text: str) -> None:
        self.query_one("#call-result", Static).update(Text.assemble(("not called: ", "bold red"), visible(text)))

    def action_copy(self) -> None:
        v = self.values()
        if v["target"] and v["service"] and v["arguments"] is not None:
            line = speed_call_command(v["target"], v["service"], v["arguments"], v["caller"] or console_node_name(),
                                      self.root, self.key_path, v["timeout"] or 5.0)
            self.app.post_message(CopyText(line, "the `speed call` line"))


class SendScreen(GrantOffer, ModalScreen[tuple[str, str, Any, bool, bool, bool] | None]):
    """Send a MESSAGE; dismissed with (sender, to, data, confirm, grant first, revoke afterwards)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    prefix = "snd"

    def __init__(self, own: list[str], names: list[str], confirm_default: bool = False,
                 graph: AccessGraph | None = None, administered: Iterable[str] = (),
                 cannot_change: Callable[[str, str], str] | None = None, operator: bool = True,
                 to: str = "", data: str | None = None) -> None:
        super().__init__()
        self.setup_offer(own, administered, cannot_change)
        self.operator = operator
        self.to, self.data = to, data if data is not None else '{"hello": "world"}'
        self.graph = graph if graph is not None else AccessGraph(())
        self.own = own
        self.names = names
        self.confirm_default = confirm_default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="send-dialog"):
            yield Static("Send a message", classes="dialog-title")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Send", id="snd-go", variant="primary")
                yield Button("Cancel", id="snd-cancel")
            if self.own:
                yield Label("from (this console's node)")
                yield Select([(n, n) for n in self.own], value=self.own[0], id="snd-from", allow_blank=False)
            else:
                yield from no_own_node("send", self.operator)
            yield Label("to")
            yield Input(value=self.to, id="snd-to", suggester=SuggestFromList(self.names, case_sensitive=True))
            yield Label("data (any JSON value)")
            yield Input(value=self.data, id="snd-data")
            yield Checkbox("wait for delivery confirmation (ACK)", value=self.confirm_default, id="snd-confirm")
            yield from self.offer_widgets()
            yield Static(id="snd-check", classes="preview")

    def missing(self) -> list[tuple[str, str]]:
        sender, to, _, _ = self._values()
        # with a revoke to follow a grant, the console waits for the ACK (the answer needs the reverse
        # grant); a plain message needs none ("revoke afterwards" is ticked by default, alone it asks nothing)
        answer = self.query_one("#snd-confirm", Checkbox).value or (
            self.query_one("#snd-grant", Checkbox).value and self.query_one("#snd-revoke", Checkbox).value)
        return grants_missing(self.graph, sender, to, answer=answer)

    def on_mount(self) -> None:
        self._changed()
        if not self.own:  # Enter starts the console node: the one thing to do first
            focus_at_once(self, self.query_one("#start-console-node", Button))
        else:
            focus_at_once(self, self.query_one("#snd-to", Input))

    def _values(self):
        sel = self.query_one("#snd-from", Select).value if self.own else None
        sender = sel if isinstance(sel, str) else None
        to = self.query_one("#snd-to", Input).value.strip()
        try:
            data = json.loads(self.query_one("#snd-data", Input).value)
            err = ""
        except ValueError as exc:
            data, err = None, f"data is not valid JSON: {exc}"
        return sender, to, data, err

    def recheck(self) -> None:
        self._changed()

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _changed(self) -> None:
        try:
            _, _, _, err = self._values()
            t = Text()
            self.offer_lines(self.missing(), t)
        except NoMatches:  # the dialog is closing
            return
        if err:
            t.append(f"✗ {err}", style="red")
        self.query_one("#snd-check", Static).update(t)

    def on_input_submitted(self) -> None:
        self.on_button_pressed(Button.Pressed(self.query_one("#snd-go", Button)))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "snd-cancel":
            self.dismiss(None)
            return
        if event.button.id == "start-console-node":
            to, data = self.query_one("#snd-to", Input).value.strip(), self.query_one("#snd-data", Input).value
            self.dismiss(None)
            self.app.post_message(StartConsoleNode(then="send", fill=dict(to=to, data=data)))
            return
        sender, to, data, err = self._values()
        if not sender or not to or err:
            self.notify(err or ("start a console node first (the button above)" if not sender
                                else "choose a receiver"), severity="error")
            return
        grant, revoke = self.offer_choice(self.missing())
        self.dismiss((sender, to, data, self.query_one("#snd-confirm", Checkbox).value, grant, revoke))
