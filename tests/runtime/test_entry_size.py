"""A node never publishes a registry entry that its readers refuse (more than MAX_ENTRY_BYTES):
published, it was unreadable to everyone, its own node included, which then took its lease for lost
and stopped (exit 5). A grant that would make the entry too large is refused before it takes
effect, through every channel (the API, `speed node --allow` at start, an operator's `control`
request); the entry in force and the lease stay."""
from __future__ import annotations

import json
import os

import pytest

from speed_runtime import EntryTooLargeError, Node
from speed_runtime.core import control
from speed_runtime.core.entry import MAX_ENTRY_BYTES

from ..ext.control_forge import send

OPERATOR = control.OperatorKey(bytes(range(1, 33)))
LONG = [f"n{i:04d}" + "x" * 59 for i in range(1200)]  # 64 characters each: ~70 bytes of entry apiece


def entry_of(root: str, name: str) -> dict:
    with open(os.path.join(root, "speed_registry", f"{name}.node"), "rb") as f:
        data = f.read()
    assert len(data) <= MAX_ENTRY_BYTES
    return json.loads(data)


def test_a_node_whose_grants_do_not_fit_does_not_start(root, key):
    with pytest.raises(EntryTooLargeError, match="registry entry would be .* bytes, more than the 65,536"):
        Node(root, key, "big", allow=LONG).start()
    assert not os.path.exists(os.path.join(root, "speed_registry", "big.node"))


def test_a_grant_that_does_not_fit_is_refused_and_the_node_keeps_its_entry_and_lease(root, key):
    with Node(root, key, "big", allow=LONG[:800]) as node:
        granted = 800
        with pytest.raises(EntryTooLargeError):
            for name in LONG[800:]:
                node.allow(name)
                granted += 1
        assert 800 < granted < 1200 and len(node.allowed) == granted
        assert LONG[granted] not in node.allowed
        assert node.keeper.publish()  # a heartbeat: still ours, still readable
        assert entry_of(root, "big")["allow"] == sorted(LONG[:granted])
        node.revoke(LONG[0])
        node.allow(LONG[granted])  # room again
        assert LONG[granted] in entry_of(root, "big")["allow"]


def test_an_operators_grant_that_does_not_fit_is_answered_not_applied(root, key):
    with Node(root, key, "big", operators=[OPERATOR.public_text], allow=["ops"]) as node, \
            Node(root, key, "ops", allow=["big"]) as ops:
        ops.on_message(lambda m: None)
        with pytest.raises(EntryTooLargeError):
            for name in LONG:
                node.allow(name)
        before = set(node.allowed)
        future, _, _ = send(ops, "big", node.id, OPERATOR, arguments={"peer": "z" * 64})
        result = future.result()
        assert (result["changed"], result["published"]) == (False, False)
        assert set(node.allowed) == before and "z" * 64 not in entry_of(root, "big")["allow"]
        assert node.keeper.publish()


def test_a_service_that_does_not_fit_is_refused_and_the_node_keeps_its_entry_and_lease(root, key):
    """The same bound through the other list a node publishes: a service offered when the entry
    cannot carry its name was added, then every publish failed and the lease ran out."""
    with Node(root, key, "big", allow=LONG[:900]) as node:
        offered = []
        with pytest.raises(EntryTooLargeError):
            for i in range(200):
                node.register(f"s{i:03d}" + "y" * 60, lambda arguments: arguments)
                offered.append(f"s{i:03d}" + "y" * 60)
        assert offered and f"s{len(offered):03d}" + "y" * 60 not in node.services.names()
        assert node.keeper.publish()
        assert entry_of(root, "big")["services"] == offered
