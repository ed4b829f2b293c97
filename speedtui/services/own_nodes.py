"""The nodes a console starts: in its own process (speed_runtime.Node, its events pushed to the
bridge) or as `speed node` processes (ready line, stderr kept for the failure sentence, stdout
drained by a thread), and how each is stopped. ActionService (actions.py) keeps the table of them
and audits every start and stop."""
from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models.commands import NodeSpec, node_command
from ..models.traces import record_of
from . import runtime as rt
from .bridge import Bridge
from .processes import _close_pipes, _drain, _read_line, _terminate, speed_command


class ActionError(Exception):
    """An action that could not be done; the message is shown to the operator."""


@dataclass
class OwnNode:
    spec: NodeSpec
    node: Any = None  # speed_runtime.Node
    proc: subprocess.Popen | None = None
    started: float = 0.0
    unsubscribe: Any = None
    output: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None  # drains the process's stdout
    stoppable: bool = True  # False for a node someone else drives (the demo's traffic driver)

    @property
    def kind(self) -> str:
        return "in-process" if self.node is not None else "process"

    @property
    def alive(self) -> bool:
        if self.node is not None:
            return getattr(self.node, "state", "running") == "running"
        return self.proc is not None and self.proc.poll() is None


def launch_in_process(root: Path, key: rt.KeyInfo, spec: NodeSpec, bridge: Bridge) -> OwnNode:
    """Start a node in the console's process; its events reach the bridge (without a journal)."""
    import speed_runtime
    from speed_runtime.demo import DEMO_SERVICES

    kwargs: dict[str, Any] = dict(groups=list(spec.groups), allow=list(spec.allow), trace=spec.trace)
    if spec.lease_seconds:
        kwargs["lease_seconds"] = spec.lease_seconds
    if spec.heartbeat_seconds:
        kwargs["heartbeat_seconds"] = spec.heartbeat_seconds
    node = speed_runtime.Node(str(root), key.runtime_key or str(key.path), spec.name, **kwargs)
    for s in spec.services:
        if s not in DEMO_SERVICES:
            raise ActionError(f"unknown demo service {s!r}; choose from {', '.join(DEMO_SERVICES)}")
        node.register(s, DEMO_SERVICES[s])
    unsub = None
    if not spec.trace:  # with tracing on, the journal already brings every event
        unsub = node.add_observer(_observer(bridge))
    node.start()
    return OwnNode(spec=spec, node=node, started=time.time(), unsubscribe=unsub)


def _observer(bridge: Bridge):

    def observe(event: Any) -> None:
        try:
            rec = record_of(event, source="observer")
        except Exception:  # noqa: BLE001 - never break the runtime's thread
            return
        if rec is not None:
            bridge.push_records([rec])

    return observe


def launch_process(root: Path, key: rt.KeyInfo, spec: NodeSpec, ready_timeout: float) -> OwnNode:
    """Start a `speed node` process; returns once it printed `ready` (else ActionError, with the
    last line of its stderr)."""
    # --control-stdin: grants and revokes reach the process (set_allow)
    args = node_command(root, key.path, spec, control_stdin=True).exec_argv(speed_command())
    # stderr goes to an unlinked temporary file: a pipe nobody drains could fill and block the node
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_file,
                            start_new_session=True, text=True)
    own = OwnNode(spec=spec, proc=proc, started=time.time())
    line = _read_line(proc, ready_timeout)
    if not line.startswith("ready"):
        err = ""
        if proc.poll() is None:
            _terminate(proc)
        try:
            err_file.seek(0)
            err = err_file.read(65536).decode(errors="replace").strip()
        except (OSError, ValueError):
            pass
        err_file.close()
        detail = err.splitlines()[-1] if err else (line or "no 'ready' line")
        raise ActionError(f"speed node {spec.name} did not start: {detail}")
    err_file.close()  # the child keeps its own descriptor
    own.output.append(line)
    own.reader = threading.Thread(target=_drain, args=(proc, own.output), name=f"speedtui-out-{spec.name}",
                                  daemon=True)
    own.reader.start()
    return own


def stop_own(own: OwnNode) -> None:
    if own.node is not None:
        try:
            own.node.close()
        except Exception:  # noqa: BLE001
            pass
    if own.proc is not None:
        _terminate(own.proc, close=False)
        if own.reader is not None:
            own.reader.join(10)  # EOF once the process is gone
        _close_pipes(own.proc)
