"""The nodes a console starts: in its own process (speed_runtime.Node, its events pushed to the
bridge) or as `speed node` processes (started with exactly the line the launch dialog shows, read
by `speed`'s own parser; both output pipes followed by a thread into the node's log), the table of
them (``OwnNodes``) with their logs (``NodeLogs``), and how each is stopped. ActionService
(actions.py) audits every start and stop."""
from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from speed_runtime.core.errors import SpeedError
from speed_runtime.core.records import HealthTrace, LeaseTrace

from ..models.commands import NodeSpec, node_command
from ..models.logs import LogBook, LogLine, exit_sentence
from ..models.traces import record_of
from . import runtime as rt
from .bridge import Bridge
from .launch import node_settings
from .processes import _close_pipes, _terminate, follow_output, speed_command


class ActionError(Exception):
    """An action that could not be done; the message is shown to the operator. `unanswered`: the
    target took the request and never answered (it may have been applied, or refused unread)."""

    def __init__(self, message: str, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered


def no_answer_came(exc: BaseException) -> bool:
    """Whether `exc` says a request, call or confirmed message got no answer at all: the runtime's
    error said so (`SpeedError.unanswered`), or an ActionError made from one."""
    return isinstance(exc, (SpeedError, ActionError)) and exc.unanswered


class NameTakenError(ActionError):
    """A node could not be launched: another live node holds its name."""


@dataclass
class OwnNode:
    spec: NodeSpec
    node: Any = None  # speed_runtime.Node
    proc: subprocess.Popen | None = None
    started: float = 0.0
    unsubscribe: Any = None
    reader: threading.Thread | None = None  # follows the process's stdout and stderr into its log
    logged: bool = False  # an in-process node's events go to its log
    stoppable: bool = True  # False for a node someone else drives (the demo's traffic driver)

    @property
    def kind(self) -> str:
        return "in-process" if self.node is not None else "process"

    @property
    def alive(self) -> bool:
        if self.node is not None:
            return getattr(self.node, "state", "running") == "running"
        return self.proc is not None and self.proc.poll() is None


class Observable(Protocol):
    """What the logs need of an in-process node (speed_runtime.Node): its trace events."""

    def add_observer(self, observer: Callable[[Any], None]) -> Callable[[], None]: ...


class NodeLogs:
    """The logs of the console's nodes (``models.logs.LogBook``) behind a lock: the threads that
    follow processes and the nodes' observers write, the UI reads."""

    def __init__(self, clock: Callable[[], float] = time.time, **book: Any) -> None:
        self._book = LogBook(**book)
        self._lock = threading.Lock()
        self.clock = clock

    def open(self, name: str, kind: str, pid: int | None = None) -> None:
        with self._lock:
            self._book.open(name, kind, self.clock(), pid)

    def add(self, name: str, stream: str, text: str) -> None:
        with self._lock:
            self._book.add(name, stream, text, self.clock())

    def end(self, name: str, how: str) -> None:
        with self._lock:
            self._book.end(name, how, self.clock())

    @property
    def version(self) -> int:
        return self._book.version

    def names(self) -> list[str]:
        with self._lock:
            return self._book.names()

    def states(self) -> list[str]:
        with self._lock:
            return self._book.states()

    def summary(self, name: str | None = None) -> str:
        with self._lock:
            return self._book.summary(name)

    def lines(self, name: str | None = None) -> list[LogLine]:
        with self._lock:
            return self._book.lines(name)

    def last(self, name: str, stream: str) -> str:
        with self._lock:
            return self._book.last(name, stream)

    def follow(self, name: str, node: Observable) -> None:
        """Log an in-process node (speed_runtime.Node): its health events and its own lease events."""
        self.open(name, "in-process")
        node.add_observer(self.observer(name))

    def observer(self, name: str) -> Callable[[Any], None]:

        def observe(event: Any) -> None:
            if isinstance(event, HealthTrace):
                self.add(name, "health", f"{event.event}: {event.detail}" if event.detail else event.event)
            elif isinstance(event, LeaseTrace) and event.subject == name:
                self.add(name, "health", f"lease {event.event}")

        return observe


class OwnNodes(Mapping[str, OwnNode]):
    """The nodes this console runs, by name (thread-safe: workers start and stop them while the UI
    reads the lists), and their logs."""

    def __init__(self) -> None:
        self._nodes: dict[str, OwnNode] = {}
        self._lock = threading.Lock()
        self.logs = NodeLogs()

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
        """Keep ``own`` (a node just started, or one handed over: the demo's traffic driver); an
        in-process node's health and lease events go to its log from now on."""
        if own.node is not None and not own.logged:
            self.logs.follow(own.spec.name, own.node)
            own.logged = True
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


def launch_in_process(root: Path, key: rt.KeyInfo, spec: NodeSpec, bridge: Bridge, logs: NodeLogs) -> OwnNode:
    """Start a node in the console's process, with the Node options `speed node` gives the same
    line; its events reach the bridge (without a journal), its health and lease events its log."""
    import speed_runtime
    from speed_runtime.demo import DEMO_SERVICES

    node = speed_runtime.Node(str(root), key.runtime_key or str(key.path), spec.name,
                              **node_settings(node_command(root, key.path, spec)))
    for s in spec.services:
        node.register(s, DEMO_SERVICES[s])
    unsub = None
    if not spec.trace:  # with tracing on, the journal already brings every event
        unsub = node.add_observer(_observer(bridge))
    logs.follow(spec.name, node)
    try:
        node.start()
    except BaseException as exc:
        logs.end(spec.name, f"did not start: {exc}")
        raise
    return OwnNode(spec=spec, node=node, started=time.time(), unsubscribe=unsub, logged=True)


def _observer(bridge: Bridge):

    def observe(event: Any) -> None:
        try:
            rec = record_of(event, source="observer")
        except Exception:  # noqa: BLE001 - never break the runtime's thread
            return
        if rec is not None:
            bridge.push_records([rec])

    return observe


def start_followed(args: list[str], name: str, logs: NodeLogs,
                   ready_timeout: float) -> tuple[subprocess.Popen, threading.Thread, str]:
    """Start a `speed node` process whose stdout and stderr go to ``logs`` under ``name`` (a thread
    reads both for as long as it runs, and notes how it ended); returns the process, that thread
    and its first stdout line (its `ready` line, unless it failed), waited for up to
    ``ready_timeout``. The console's launches and the demo's nodes start this way."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    logs.open(name, "process", proc.pid)
    ready = threading.Event()
    first: list[str] = []

    def on_line(stream: str, text: str) -> None:
        if stream == "stdout" and not first:
            first.append(text)
            ready.set()
        logs.add(name, stream, text)

    def on_end(code: int | None) -> None:
        logs.end(name, exit_sentence(code))
        ready.set()

    reader = threading.Thread(target=follow_output, args=(proc, on_line, on_end), name=f"speedtui-out-{name}",
                              daemon=True)
    reader.start()
    ready.wait(ready_timeout)
    return proc, reader, first[0] if first else ""


def launch_process(root: Path, key: rt.KeyInfo, spec: NodeSpec, ready_timeout: float, logs: NodeLogs) -> OwnNode:
    """Start a `speed node` process with exactly ``node_command(root, key, spec)``; returns once it
    printed `ready` (else ActionError, with the last line of its stderr). Its grants change through
    control requests (``spec.operators`` names the console's own operator key), so its stdin is
    not used."""
    args = node_command(root, key.path, spec).exec_argv(speed_command())
    proc, reader, line = start_followed(args, spec.name, logs, ready_timeout)
    if not line.startswith("ready"):
        _terminate(proc, close=False)
        reader.join(10)
        _close_pipes(proc)
        detail = logs.last(spec.name, "stderr") or line or "no 'ready' line"
        raise ActionError(f"speed node {spec.name} did not start: {detail}")
    return OwnNode(spec=spec, proc=proc, started=time.time(), reader=reader)


def stop_own(own: OwnNode, logs: NodeLogs | None = None) -> None:
    if own.node is not None:
        try:
            own.node.close()
        except Exception:  # noqa: BLE001
            pass
        if logs is not None:
            logs.end(own.spec.name, "closed")
    if own.proc is not None:
        _terminate(own.proc, close=False)
        if own.reader is not None:
            own.reader.join(10)  # EOF once the process is gone
        _close_pipes(own.proc)
