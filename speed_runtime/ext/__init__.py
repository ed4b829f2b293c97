"""Extensions of the wire contract (§9): optional features that a v1-only node never sees.

A node enables extensions with `Node(..., features=[...])` (`speed node --feature NAME`); it
advertises them in its registry entry as `"features": [...]`, and uses one towards another node
only when that node's current entry advertises it (`speaks(entry, name)`). Each extension lives in
its own module here and is specified in docs/PROTOCOL.md ("Extensions"), precisely enough that the
C node in tests/interop/c implements it from that text.

An extension never changes the 64-byte header or the sealing (§5), and never adds an envelope
type: it uses flag bits (the allocation below), payload fields, payload layouts selected by a flag
bit, registry fields and journal reasons.

Hooks (all optional; see Extension): `start` after the node registered, `stop` when it closes,
`entry_fields` merged into every registry entry it writes, `on_envelope` for an accepted envelope
before the node dispatches it (return True when the extension took it over), `rejudge` for a
rejected envelope before it is removed.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..core.entry import RegistryEntry
from ..core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ..core.receiving import Verdict

# Flag bits of the header (§5: bit 0 is v1's "ACK requested", core.envelope.FLAG_ACK_REQUESTED);
# each other bit belongs to one extension. Pure protocol logic of an extension goes in
# core/<name>.py (tested without I/O); its node glue in ext/<name>.py.
FLAG_BINARY = 0x0002      # chunks: the payload is a JSON header, a NUL byte, then raw bytes
FLAG_CHUNK = 0x0004       # chunks: this envelope is one chunk of a larger message
FLAG_RELIABLE = 0x0008    # reliable: the receiver acknowledges; the sender retransmits
FLAG_DURABLE = 0x0010     # durable: written durably, removed only after it was handled, receipted
FLAG_QUOTA = 0x0020       # quota: reserved for the quota extension
FLAG_CONTROL = 0x0040     # control: reserved for the control extension
FLAGS = {FLAG_BINARY: "chunks", FLAG_CHUNK: "chunks", FLAG_RELIABLE: "reliable", FLAG_DURABLE: "durable",
         FLAG_QUOTA: "quota", FLAG_CONTROL: "control"}

# name -> module of this package that defines `EXTENSION` (an Extension subclass)
KNOWN = {"chunks": "chunks", "reliable": "reliable", "quota": "quota", "control": "control", "durable": "durable"}


def speaks(entry: RegistryEntry | None, feature: str) -> bool:
    """Whether `entry`'s node advertises `feature` (§9: use an extension only towards it)."""
    return entry is not None and feature in entry.features


class Extension:
    """Base of an extension's per-node part. `node` is the Node it serves."""

    name = ""

    def __init__(self, node: Any):
        self.node = node

    def start(self) -> None:
        """After the node registered, before it receives."""

    def stop(self) -> None:
        """When the node closes, after its inbox was drained and before it deregisters."""

    def entry_fields(self) -> dict[str, Any]:
        """Registry fields this extension publishes (§9: new registry fields)."""
        return {}

    def on_envelope(self, verdict: "Verdict", sender: str, data: bytes, name: str) -> bool:
        """An accepted envelope, before the node dispatches it; True when this extension handles it."""
        return False

    def rejudge(self, verdict: "Verdict", sender: str, data: bytes, arrived_ms: int) -> "Verdict":
        """A rejected envelope, before it is removed: the verdict to keep (this one, or an acceptance
        under the extension's own rules for what it defines, e.g. durable copies bound to a name)."""
        return verdict


def load(features: tuple[str, ...], node: Any) -> dict[str, Extension]:
    """The extensions a node enables, by name, in the order given."""
    out: dict[str, Extension] = {}
    for feature in features:
        module = KNOWN.get(feature)
        if module is None:
            raise ConfigError(f"unknown feature {feature!r}; the extensions are: {', '.join(sorted(KNOWN))}")
        try:
            cls = importlib.import_module(f".{module}", __name__).EXTENSION
        except (ImportError, AttributeError):
            raise ConfigError(f"the {feature!r} extension is not available in this runtime") from None
        out[feature] = cls(node)
    return out
