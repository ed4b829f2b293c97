"""What a node's parts are given instead of the node: `NodeContext`, the collaborators they share,
`Lifecycle`, the few questions about the node's state a part may ask, and `ExtensionHost`, all an
extension may ask of the node it serves (docs/ARCHITECTURE.md, "The node: composition").

A part is constructed with the context and the other parts it uses, never with the node: so each
part can be built and tested alone with a fake context (tests/runtime/test_node_parts.py), and
no part reaches through another one.
"""
from __future__ import annotations

from dataclasses import dataclass
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..core.entry import RegistryEntry
from ..core.keys import Key
from ..core.message import Message
from ..core.receiving import Verdict
from ..core.replay import ReplayGuard
from ..monitor import RegistryMonitor
from ..registry import Registry
from .application import Application
from .config import NodeConfig
from .grants import AccessRegistry
from .telemetry import Telemetry

if TYPE_CHECKING:  # pragma: no cover
    from .calls import ServiceTable
    from .hooks import Extension, Outbound


@dataclass(frozen=True, slots=True)
class NodeContext:
    """The collaborators every part of one node shares: who it is, its settings, its grants, what
    it tells (telemetry), the registry and its cache, its application and its services."""

    name: str
    id: str                     # this instance (a UUID), in its entry and in every envelope it seals
    id_bytes: bytes
    root: str
    key: Key
    config: NodeConfig
    access: AccessRegistry      # the names that may write to our inbox
    telemetry: Telemetry
    registry: Registry
    monitor: RegistryMonitor    # entries as their files hold them, departed instances
    application: Application    # the application's handlers and receive() queue
    services: "ServiceTable"


class Lifecycle(Protocol):
    """The node's state, as its parts ask about it (node/node.py implements it)."""

    @property
    def state(self) -> str:
        """new | starting | running | closing | lost | closed"""

    def check_running(self) -> None:
        """Raise NodeClosedError or LeaseLostError unless the node may send now."""

    def may_receive(self) -> bool:
        """Whether the protocol thread may take files now (running or closing, lease known ours)."""

    def name_taken(self) -> bool:
        """Whether another instance now holds our name (then the lease is lost)."""

    def lose_lease(self, exc: Exception) -> None:
        """The lease is gone: fail what waits, tell the application."""


class ExtensionHost(Protocol):
    """All an extension may ask of the node it serves (§9). An extension is constructed with this
    and nothing else; what it keeps of it (telemetry, the monitor) it asks for once, in its
    constructor."""

    name: str
    id: str
    id_bytes: bytes
    root: str
    key: Key
    config: NodeConfig
    telemetry: Telemetry
    monitor: RegistryMonitor

    # ---------------------------------------------------------------- sending
    def deliver_payload(self, out: "Outbound") -> int:
        """Deliver a payload: in the first extension's layout that takes it, else as v1."""

    def send(self, target: str, etype: int, body: bytes, **options: Any) -> int:
        """Seal `body` and deliver it as one envelope (node/sender.py: Sender.send)."""

    def reply(self, target: str, etype: int, payload: dict, trace_extra: dict | None = None,
              flags: int = 0) -> str | None:
        """An answer; never raises (a failure is counted). Why it cannot be sent at all, or None."""

    def live_entry(self, target: str) -> RegistryEntry:
        """The target's entry as its file holds it now, if it may receive (§5.4 step 1)."""

    def check_grant(self, target: str, entry: RegistryEntry) -> None:
        """Raise AccessDeniedError unless `entry` allows this node (§5.4 step 2)."""

    def allows(self, name: str) -> bool:
        """Whether this node allows `name` (its answers can come back)."""

    def expect_ack(self, target: str, seq: int, source_id: bytes, waiter: Future) -> None: ...

    def forget_ack(self, target: str, seq: int) -> None: ...

    def expects_response(self, sender: str, source_id: bytes, payload: dict) -> bool:
        """Whether an SPC response answers a pending call to that instance, in time."""

    def check_running(self) -> None: ...

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Run `callback` on the deadline thread at `when` (time.monotonic)."""

    # ---------------------------------------------------------------- receiving
    @property
    def replay(self) -> ReplayGuard:
        """The receiver's replay state."""

    def judge_as_delivered(self, sender: str, data: bytes, arrived: float,
                           judge: Callable[..., Verdict] | None = None) -> Verdict: ...

    def accepted(self, verdict: Verdict, sender: str, data: bytes, name: str, extra: dict | None = None) -> None: ...

    def reject(self, name: str, sender: str, seq: int, reason: str, size: int = 0, etype: str = "UNKNOWN",
               data: bytes | None = None, remove: bool = True, extra: dict | None = None, detail: str = "",
               attributable: bool = True) -> None: ...

    def remove(self, name: str) -> bool:
        """Remove an inbox file (an extension took what it needed): False if it was gone."""

    def run_on_lane(self, sender: str, name: str, task: Callable[[], None], cost: int = 0) -> bool: ...

    def take(self, name: str) -> bool: ...

    def dispatch(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """An accepted envelope (or assembled message): every extension sees it, then by type."""

    def dispatch_by_type(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """By type (§5.5 step 6), no extension asked."""

    def handle(self, message: Message) -> Exception | None:
        """Run the application's handlers; what one raised."""

    def run_later(self, task: Callable[[], None]) -> None:
        """Run `task` on the control lane of the worker pool, in order (RuntimeError once stopped)."""

    def watch(self, path: str, mask: int, key: str) -> None:
        """Watch a directory on the node's one inotify instance; events go to the extension `key`."""

    # ---------------------------------------------------------------- the node
    def publish(self) -> bool: ...

    def allow(self, name: str) -> bool: ...

    def revoke(self, name: str) -> bool: ...

    def extension(self, name: str) -> "Extension | None":
        """Another enabled extension, or None."""

    def status(self) -> dict[str, Any]:
        """The node's own account (control's `status`)."""

    def close(self) -> None: ...
