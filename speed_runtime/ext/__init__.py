"""Extensions of the wire contract (§9): optional features that a v1-only node never sees.

A node enables extensions with `Node(..., features=[...])` (`speed node --feature NAME`); it
advertises them in its registry entry as `"features": [...]`, and uses one towards another node
only when that node's current entry advertises it (`speaks(entry, name)`). Each extension lives in
its own module here and is specified in docs/PROTOCOL.md ("Extensions"), precisely enough that the
C node in tests/interop/c implements it from that text.

An extension never changes the 64-byte header or the sealing (§5), and never adds an envelope
type: it uses flag bits (the one table: core/envelope.py FLAGS), payload fields, payload layouts
selected by a flag bit, registry fields and journal reasons.

An extension's module defines `EXTENSION`, a subclass of `node.hooks.Extension` (the hooks, and
how a node loads an extension by name), constructed with the node's `ExtensionHost`
(node/context.py). Pure protocol logic of an extension goes in core/<name>.py (tested without
I/O); its node glue here, in ext/<name>.py.
"""
from ..node.hooks import Extension, Outbound, speaks

__all__ = ["Extension", "Outbound", "speaks"]
