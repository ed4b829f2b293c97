"""What a console on one environment works with, built once (``ConsoleServices.build``, called by
``ui.app.make_app``) and handed to the app: its clock, folders, config, operator key, the bridge the
readers fill, the environment's audit log and call history, the operator's actions (None without
a key) and, with --demo, the demo environment. ``shutdown`` ends what they started."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..paths import Paths
from . import runtime as rt
from .actions import ActionService
from .bridge import Bridge
from .clock import Clock, SystemClock
from .config import Config
from .history import AuditLog, CallHistory
from .operator import OperatorChoice


@dataclass
class ConsoleServices:
    root: Path
    key: rt.KeyInfo | None
    readonly: bool
    clock: Clock
    paths: Paths
    config: Config
    operator: OperatorChoice  # the operator key for `control` requests, if any
    bridge: Bridge
    audit: AuditLog
    calls: CallHistory
    actions: ActionService | None  # None without a key: nothing can be done, only watched
    demo: Any = None  # environments.demo.DemoEnvironment, with --demo

    @classmethod
    def build(cls, root: Path | str, key: rt.KeyInfo | None, *, readonly: bool = False, clock: Clock | None = None,
              paths: Paths | None = None, config: Config | None = None, operator: OperatorChoice | None = None,
              demo: Any = None) -> "ConsoleServices":
        root = Path(root)
        clock = clock or SystemClock()
        paths = paths or Paths.default()
        config = config or Config.load(paths.config_file)
        operator = operator or OperatorChoice()
        bridge = Bridge()
        # the environment's own audit log and call history: another ROOT never shows (or re-runs) them
        audit = AuditLog(paths.audit_log(root), now=clock.time)
        calls = CallHistory(paths.call_history(root))
        actions = None if key is None else ActionService(root, key, bridge, audit, calls, clock, readonly,
                                                          operator=operator,
                                                          own_operator_key=paths.env_dir(root) / "operator.key")
        if demo is not None and actions is not None:
            demo.hand_over(actions.own)  # its traffic driver calls and sends for the console
        return cls(root, key, readonly, clock, paths, config, operator, bridge, audit, calls, actions, demo)

    def shutdown(self) -> None:
        if self.demo is not None:
            self.demo.stop()  # its traffic driver first, then its processes
            # the demo's environment is gone: so is what the console kept about it
            shutil.rmtree(self.paths.env_dir(self.root), ignore_errors=True)
        if self.actions is not None:
            self.actions.stop_all()
