"""Grants and revokes (`g`, and `g` / `d` on an Access matrix cell): the dialog on the nodes the
console may change (its own, and those trusting its operator key), and one sentence saying why
and what to do where it may not."""

from __future__ import annotations

from ...services.operator import OperatorChoice
from ..screens.forms import GrantScreen
from ..state import ConsoleState
from .runner import ActionRunner


class GrantActions:
    def __init__(self, runner: ActionRunner, state: ConsoleState, operator: OperatorChoice) -> None:
        self.runner = runner
        self.port = runner.port
        self.state = state
        self.operator = operator

    def cannot_change(self, node: str, peer: str | None = None) -> str:
        """Why the console cannot change ``node``'s grants, and what to do (one sentence)."""
        op = self.operator
        if op.key is None:
            acts = self.runner.actions
            return acts.no_operator_sentence(node) if acts is not None else "no key loaded"
        row = self.state.registry.by_name().get(node)
        if row is None:
            return f"{node} is not in the registry"
        why = "it accepts no control requests" if not row.operators else "it trusts other operators only"
        return (f"{node} does not trust this console's operator key {op.fingerprint} ({why}): restart it with "
                f"`speed node --name {node} ... --operator {op.key.public_text}`"
                + (f" (or with --allow {peer})" if peer else ""))

    def open(self, node: str | None = None, peer: str | None = None, revoke: bool = False) -> None:
        """The grant dialog, pre-filled (on a matrix cell: the pair under the cursor)."""
        acts = self.runner.acts()
        if acts is None:
            return
        own = acts.own.alive()
        nodes = own + [n for n in self.state.administered() if n not in own]
        note = self.cannot_change(node, peer) if node and node not in nodes else None
        if not nodes:
            self.port.notify(note or ("this console may change no node's grants: launch one (n), or load an "
                                      "operator key that nodes trust (speedtui --operator-key PATH)"),
                             severity="warning", timeout=10)
            return
        self.port.push_screen(GrantScreen(nodes, self.state.graph(), node, peer, revoke=revoke, note=note),
                              self._chosen)

    def _chosen(self, choice: tuple[str, str, bool] | None) -> None:
        acts = self.runner.actions
        if choice and acts is not None:
            node, peer, grant = choice
            self.runner.run("grant" if grant else "revoke", lambda: acts.set_allow(node, peer, grant),
                            f"{node} {'now allows' if grant else 'no longer allows'} {peer}")
