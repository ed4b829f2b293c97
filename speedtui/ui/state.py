"""What the views read: the console's models, handed to each view when the app builds it (views
never reach into the app; they read this and post messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..models.access import AccessGraph
from ..models.history import AuditEntry, CallRecord
from ..models.keycheck import KeyCheck
from ..models.registry import RegistryModel
from ..models.replays import ReplayTracker
from ..models.timetravel import RegistryHistory
from ..models.traces import TraceStore
from ..services.runtime import key_verifies


def _no_replay_state(name: str) -> dict[str, Any] | None:
    return None


@dataclass
class ConsoleState:
    root: Path
    root_label: str  # how the header names ROOT (tests and screenshots pin it)
    registry: RegistryModel
    traces: TraceStore
    replays: ReplayTracker
    keycheck: KeyCheck
    key_path: str = "KEY"  # shown in equivalent commands, never read here
    readonly: bool = False
    steady: bool = False  # no timers between a key and its frame (snapshots, screenshots)
    fabric: str | None = None  # None: all fabrics, "": the ungrouped nodes
    audit_entries: Callable[[], list[AuditEntry]] = list
    call_entries: Callable[[], list[CallRecord]] = list
    own_replay_state: Callable[[str], dict[str, Any] | None] = field(default=_no_replay_state)
    own_nodes: Callable[[], list[str]] = list  # the console's running nodes (grants, calls)
    now: Callable[[], float] = float  # the app's injected clock
    lock_text: str = ""  # who holds the registry lock, when another process keeps it
    reader_problems: dict[str, str] = field(default_factory=dict)  # files the readers skip, and why
    history: RegistryHistory = field(default_factory=RegistryHistory)  # the registry as this console saw it
    operator_fingerprint: str | None = None  # the console's operator key (its fingerprint only), if loaded
    # the access graph of the rows it was built from: an open dialog asks for it at every redraw
    _graph: tuple[list, AccessGraph] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, root: Path, root_label: str, key: Any, actions: Any, audit: Any, calls: Any,
              now: Callable[[], float], trace_capacity: int, **options: Any) -> "ConsoleState":
        """The models of a console on ROOT: `key` (or None: envelopes cannot be checked), the
        ActionService for its own nodes (or None), its audit log and call history."""
        secret = key.secret if key is not None else None
        return cls(root=root, root_label=root_label, registry=RegistryModel(),
                   traces=TraceStore(capacity=trace_capacity), replays=ReplayTracker(),
                   keycheck=KeyCheck(lambda data: key_verifies(data, secret) if secret is not None else None,
                                     ours=actions.own.alive if actions else tuple),
                   key_path=str(key.path) if key is not None else "KEY",
                   audit_entries=audit.entries, call_entries=calls.entries,
                   own_replay_state=actions.own.replay_state if actions else _no_replay_state,
                   own_nodes=actions.own.alive if actions else list, now=now, history=RegistryHistory(),
                   **options)

    def administered(self) -> list[str]:
        """The nodes that trust the console's operator key: it may grant, revoke and stop on them."""
        return self.graph().administered(self.operator_fingerprint)

    def graph(self) -> AccessGraph:
        """The access graph of the registry as it is now (built again only when its rows were)."""
        rows = self.registry.rows
        if self._graph is None or self._graph[0] is not rows:
            self._graph = (rows, AccessGraph(rows))
        return self._graph[1]

    def fabric_nodes(self) -> frozenset[str] | None:
        if self.fabric is None:
            return None
        return frozenset(r.name for r in self.registry.rows if self.registry.in_fabric(r))

    def replay_state_for(self, name: str) -> dict[str, Any]:
        """Last accepted sequence per sender and recent rejections: the journals, plus the live
        replay state of the console's own node (the runtime keys it by sender instance id)."""
        st = self.traces.replay_state(name)
        st["source"] = "journals"
        own = self.own_replay_state(name)
        if own is not None:
            st["source"] = "journals + live node state"
            senders = own.get("senders")
            if isinstance(senders, dict):
                names = [v.get("sender") for v in senders.values() if isinstance(v, dict)]
                for k, v in senders.items():
                    if not isinstance(v, dict):
                        continue
                    seq = v.get("lastSeq", v.get("last_seq"))
                    who = str(v.get("sender") or k)
                    if names.count(v.get("sender")) > 1:
                        who = f"{who} #{str(k)[:8]}"
                    if isinstance(seq, int):
                        st["last_accepted"][who] = seq
        return st
