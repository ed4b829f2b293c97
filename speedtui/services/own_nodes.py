"""The nodes a console starts: in its own process (speed_runtime.Node, its events pushed to the
bridge) or as `speed node` processes (ready line, stderr kept for the failure sentence, stdout
drained by a thread), the table of them (``OwnNodes``), and how each is stopped. ActionService
(actions.py) audits every start and stop."""
from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
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


class OwnNodes(Mapping[str, OwnNode]):
    """The nodes this console runs, by name (thread-safe: workers start and stop them while the UI
    reads the lists)."""

    def __init__(self) -> None:
        self._nodes: dict[str, OwnNode] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> OwnNode:
        with self._lock:
            return self._nodes[name]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._nodes))

    def __len__(self) -> int:
        with self._lock:
            return len(self._nodes)

    def add(self, own: OwnNode) -> None:
        """Keep ``own`` (a node just started, or one handed over: the demo's traffic driver)."""
        with self._lock:
            self._nodes[own.spec.name] = own

    def pop(self, name: str) -> OwnNode | None:
        with self._lock:
            return self._nodes.pop(name, None)

    def pop_all(self) -> list[OwnNode]:
        with self._lock:
            owns, self._nodes = list(self._nodes.values()), {}
        return owns

    def running(self, name: str) -> bool:
        with self._lock:
            own = self._nodes.get(name)
        return own is not None and own.alive

    def alive(self) -> list[str]:
        """Every running node this console started, in-process or process."""
        with self._lock:
            return sorted(n for n, o in self._nodes.items() if o.alive)

    def in_process(self) -> list[str]:
        """The running nodes in the console's process: they call and send for it."""
        with self._lock:
            return sorted(n for n, o in self._nodes.items() if o.node is not None and o.alive)

    def processes(self) -> list[str]:
        """The running nodes the operator launched as separate processes: quitting stops them."""
        with self._lock:
            return sorted(n for n, o in self._nodes.items() if o.proc is not None and o.stoppable and o.alive)

    def stoppable(self) -> list[str]:
        """The nodes the operator may stop."""
        with self._lock:
            return sorted(n for n, o in self._nodes.items() if o.stoppable)

    def node(self, name: str) -> Any:
        """The running in-process node ``name`` (speed_runtime.Node), else ActionError."""
        with self._lock:
            own = self._nodes.get(name)
        if own is None or own.node is None:
            raise ActionError(f"{name} is not one of this console's in-process nodes")
        if not own.alive:
            raise ActionError(f"{name} is not running")
        return own.node

    def replay_state(self, name: str) -> dict[str, Any] | None:
        """The live replay state of an in-process node of ours (None for any other)."""
        with self._lock:
            own = self._nodes.get(name)
        if own is None or own.node is None or not own.alive:
            return None
        try:
            return own.node.replay_state()
        except Exception:  # noqa: BLE001
            return None


def launch_in_process(root: Path, key: rt.KeyInfo, spec: NodeSpec, bridge: Bridge) -> OwnNode:
    """Start a node in the console's process; its events reach the bridge (without a journal)."""
    import speed_runtime
    from speed_runtime.demo import DEMO_SERVICES

    kwargs: dict[str, Any] = dict(groups=list(spec.groups), allow=list(spec.allow), trace=spec.trace)
    if spec.lease_seconds:
        kwargs["lease_seconds"] = spec.lease_seconds
    if spec.heartbeat_seconds:
        kwargs["heartbeat_seconds"] = spec.heartbeat_seconds
    if spec.operators:
        kwargs["operators"] = list(spec.operators)
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
    last line of its stderr). Its grants change through control requests (``spec.operators``
    names the console's own operator key), so its stdin is not used."""
    args = node_command(root, key.path, spec).exec_argv(speed_command())
    # stderr goes to an unlinked temporary file: a pipe nobody drains could fill and block the node
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_file,
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
