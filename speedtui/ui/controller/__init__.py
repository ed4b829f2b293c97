"""The operator's actions as the console runs them: which dialog, which confirmation, which
thread worker, and what is said when they finish. The app routes keys and typed messages here;
the controller talks to the UI only through a ``UiPort`` (``ui/port.py``), never the app, so it
runs under a fake port in tests. Split by responsibility: nodes, grants, calls and messages,
traced envelopes (replays), the extensions' requests, exports."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...services import runtime as rt
from ...services.actions import ActionService
from ...services.history import AuditLog
from ...services.operator import OperatorChoice
from ..port import UiPort
from ..state import ConsoleState
from .calls import CallActions
from .exports import Exports
from .extensions import ExtensionRequests
from .grants import GrantActions
from .nodes import NodeActions
from .runner import ActionRunner
from .traces import TraceActions

__all__ = ["Controller"]


class Controller:
    def __init__(self, port: UiPort, state: ConsoleState, actions: ActionService | None, *, root: Path,
                 key: rt.KeyInfo | None, readonly: bool, operator: OperatorChoice, audit: AuditLog,
                 exports_folder: Path, now: Callable[[], float], confirm_send: bool,
                 look_again: Callable[[], None]) -> None:
        self.runner = ActionRunner(port, actions, readonly, look_again, lambda: state.keycheck.wrong_key)
        self.grants = GrantActions(self.runner, state, operator)
        self.exports = Exports(port, audit, exports_folder, root, now)
        self.calls = CallActions(self.runner, state, root, key, operator.key is not None, confirm_send,
                                 self.grants.cannot_change, self.exports.copy)
        self.nodes = NodeActions(self.runner, state, root, operator,
                                 reopen={"call": self.calls.open, "send": self.calls.send})
        self.traces = TraceActions(self.runner, state, key, now, self.calls.from_trace)
        self.extensions = ExtensionRequests(self.runner, state, root, key, audit)
