"""``:`` jumps to a node, a service or a view (as in k9s), with completion as you type."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static


@dataclass(frozen=True)
class JumpTarget:
    kind: str  # view | node | service
    name: str


def jump_targets(views: list[tuple[str, str]], nodes: list[str], services: list[str]) -> dict[str, JumpTarget]:
    """Everything ``:`` can reach, by what the operator types (views by id and by label)."""
    out: dict[str, JumpTarget] = {}
    for vid, label in views:
        out[vid] = out[label.lower()] = JumpTarget("view", vid)
    for s in services:
        out.setdefault(s, JumpTarget("service", s))
    for n in nodes:
        out[n] = JumpTarget("node", n)  # a node named like a view or a service wins: it is what is running
    return out


def resolve(text: str, targets: dict[str, JumpTarget]) -> JumpTarget | None:
    text = text.strip()
    if text in targets:
        return targets[text]
    low = text.lower()
    starts = sorted(k for k in targets if k.lower().startswith(low)) if low else []
    return targets[starts[0]] if starts else None


class JumpScreen(ModalScreen[JumpTarget | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    AUTO_FOCUS = "#jump-input"  # as soon as it is composed (keys typed ahead: SpeedApp.on_key)

    def __init__(self, targets: dict[str, JumpTarget]) -> None:
        super().__init__()
        self.targets = targets

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="jump-dialog"):
            yield Static("Jump to a node, a service or a view", classes="dialog-title")
            yield Input(placeholder=": name (→ completes)", id="jump-input",
                        suggester=SuggestFromList(sorted(self.targets), case_sensitive=False))
            yield Static(id="jump-hint", classes="preview")

    def on_mount(self) -> None:
        self._hint("")

    def _hint(self, text: str) -> None:
        t = resolve(text, self.targets)
        hint = Text()
        if t is None:
            hint.append("nothing by that name" if text.strip() else "type a name; → takes the completion",
                        style="dim" if not text.strip() else "yellow")
        else:
            hint.append(f"Enter: {t.kind} {t.name}", style="green")
        self.query_one("#jump-hint", Static).update(hint)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._hint(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        t = resolve(event.value, self.targets)
        if t is None:
            self.notify(f"nothing to jump to called {event.value.strip()!r}", severity="warning")
            return
        self.dismiss(t)
