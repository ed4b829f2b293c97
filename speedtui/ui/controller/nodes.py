"""The operator's actions on nodes: launch one (`n`), start the console's own node (for calls and
messages), stop one it started or administers (`d`), reap a stale registry entry (`x`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from ...models.commands import NodeSpec
from ...services.operator import OperatorChoice
from ...services.own_nodes import ActionError
from ...services.processes import console_node_name
from ..screens.confirm import ConfirmScreen
from ..screens.forms import LaunchScreen, PickScreen
from ..state import ConsoleState
from .runner import ActionRunner


class NodeActions:
    def __init__(self, runner: ActionRunner, state: ConsoleState, root: Path, operator: OperatorChoice,
                 reopen: dict[str, Callable[..., None]]) -> None:
        self.runner = runner
        self.port = runner.port
        self.state = state
        self.root = root
        self.operator = operator
        self.reopen = reopen  # "call" | "send": the dialog to open again once the console's node runs

    def launch(self) -> None:
        acts = self.runner.acts()
        if acts is None:
            return
        fabrics = sorted({g for r in self.state.registry.rows for g in r.groups})
        try:  # every process it launches trusts the console's own key: the line shown says so
            own_key = acts.own_operator_public()
        except ActionError:
            own_key = None  # launching a process says why, in one sentence
        key = self.operator.key
        self.port.push_screen(LaunchScreen(str(self.root), self.state.key_path, self.state.graph().names, fabrics,
                                           operator_public=key.public_text if key is not None else None,
                                           operator_fingerprint=self.operator.fingerprint, own_key_public=own_key),
                              self._launch_chosen)

    def _launch_chosen(self, spec: NodeSpec | None) -> None:
        acts = self.runner.actions
        if spec is not None and acts is not None:
            self.port.notify(f"launching {spec.name}…")
            self.runner.run("launch", lambda: acts.launch(spec), f"{spec.name} is running")

    def start_console_node(self, then: str, fill: dict | None = None) -> None:
        """Start the console's own node, then open the dialog that asked for it again with the fields
        the operator had filled in (`fill`: the dialog's keyword arguments)."""
        acts = self.runner.acts()
        if acts is None:
            return
        name = console_node_name()
        reopen = self.reopen.get(then)
        self.port.notify(f"starting {name}…")

        def started(own: Any) -> str:
            if own.spec.name == name:
                return f"{name} is running"
            return f"{own.spec.name} is running ({name} is held by another live process of this environment)"

        self.runner.run("launch", lambda: acts.start_console_node(name), started,
                        after=None if reopen is None else lambda: reopen(**(fill or {})))

    def stop(self, highlighted: str | None = None) -> None:
        """Stop a node: the highlighted one if it can be stopped from here (after a confirmation),
        else one picked from those that can."""
        acts = self.runner.acts()
        if acts is None:
            return
        own = acts.own.stoppable()
        items = [(n, f"{n} ({acts.own[n].kind})") for n in own]
        items += [(n, f"{n} (operator key)") for n in self.state.administered() if n not in own]
        if highlighted is not None and highlighted in dict(items):
            self._stop_chosen(highlighted)
            return
        if not items:
            self.port.notify("no node to stop: this console started none, and none trusts its operator key"
                             + ("" if self.operator.key else " (none is loaded: speedtui --operator-key PATH)"),
                             severity="warning")
            return
        self.port.push_screen(PickScreen("Stop which node?", items), self._stop_chosen)

    def _stop_chosen(self, name: str | None) -> None:
        acts = self.runner.actions
        if name and acts is not None:
            how = ("" if name in acts.own.stoppable() else
                   " (a stop request signed with the operator key: it drains its inbox, then deregisters)")
            self.port.push_screen(ConfirmScreen("Stop node", f"Stop {name}{how}? It deregisters and its inbox stops "
                                                "being read; calls to it fail until it is started again.",
                                                yes="Stop"), partial(self._stop_confirmed, name))

    def _stop_confirmed(self, name: str, yes: bool | None) -> None:
        acts = self.runner.actions
        if yes and acts is not None:
            self.port.notify(f"stopping {name}…", timeout=3)
            self.runner.run("stop", lambda: acts.stop(name), f"{name} stopped")

    def reap(self, name: str | None) -> None:
        if self.runner.acts() is None or not name:
            return
        row = self.state.registry.by_name().get(name)
        if row is None or row.status != "stale":
            self.port.notify(f"{name} is not stale: only stale entries can be reaped", severity="warning")
            return
        self.port.push_screen(ConfirmScreen("Reap stale entry", f"Remove the stale registry entry of {name} "
                                            f"(pid {row.pid}, host {row.host})?\nThe runtime re-checks staleness "
                                            "under the registry lock and never removes a live entry.", yes="Reap"),
                              partial(self._reap_confirmed, name))

    def _reap_confirmed(self, name: str, yes: bool | None) -> None:
        acts = self.runner.actions
        if yes and acts is not None:
            self.runner.run("reap", lambda: acts.reap(name), f"{name}'s stale entry removed")
