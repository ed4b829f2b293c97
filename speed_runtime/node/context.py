"""What a node's parts are given instead of the node: `NodeContext`, the collaborators they share,
`Lifecycle`, the few questions about the node's state a part may ask; `ExtensionHost`, all an
extension may ask of the node it serves, is node/hooks.py's (beside the hooks it serves; kept
importable from here) (docs/ARCHITECTURE.md, "The node: composition").

A part is constructed with the context and the other parts it uses, never with the node: so each
part can be built and tested alone with a fake context (tests/runtime/test_node_parts.py), and
no part reaches through another one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..core.keys import Key
from ..monitor import RegistryMonitor
from ..registry import Registry
from .application import Application
from .config import NodeConfig
from .grants import AccessRegistry
from .hooks import ExtensionHost
from .telemetry import Telemetry

if TYPE_CHECKING:  # pragma: no cover
    from .calls import ServiceTable

__all__ = ["ExtensionHost", "Lifecycle", "NodeContext"]  # ExtensionHost: node/hooks.py's, importable here


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
