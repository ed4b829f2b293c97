"""The durable extension against what a member of the environment (holding the key) can write:
forged copies naming an honest sender, files planted in durable directories. Real `speed node`
processes, real files."""
from __future__ import annotations

import json
import os
import time
import uuid

from speed_runtime import Node, load_key
from speed_runtime.core import durable as d
from speed_runtime.core import payloads
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.ext.durable_store import verify_receipts
from speed_runtime.transport import inject

from ..helpers.wait import wait_until
from .test_durable import dkey, dprocs, droot, base, lines, speed  # noqa: F401 (fixtures)


def forge(root: str, key_path: str, *, sender: str, target: str, source: bytes, target_id: bytes, stream: str,
          msg_id: int, base_id: int, seq: int = 1, data="forged") -> str:
    """A durable MESSAGE sealed under the environment key, as any member could write it."""
    body = d.add_fields(payloads.encode_payload(payloads.message(sender, target, data)),
                        d.DurableFields(stream, msg_id, base_id, int(time.time() * 1000) + 3_600_000))
    nonce = os.urandom(12)
    header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(body), source, target_id, d.FLAG_DURABLE)
    name = envelope_filename(sender, source, seq, nonce)
    inject(root, target, name, seal(header, body, load_key(key_path), nonce))
    return name


def journal(root: str, name: str) -> list[dict]:
    path = os.path.join(root, "speed_traces", f"{name}.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def rejected(root: str, name: str, reason: str) -> list[dict]:
    return [r for r in journal(root, name) if r.get("outcome") == "rejected" and r.get("reason") == reason]


def test_a_forged_copy_with_the_largest_ids_neither_blackholes_nor_stalls_the_honest_sender(droot, dkey, dprocs):
    rx = dprocs.start("rx", allow=["tx"], echo=True, trace=True, extra=["--durable"])
    rx_id = uuid.UUID(rx.id).bytes
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        for n in (1, 2):
            tx.send("rx", n, durable=True, confirm=True, timeout=20)
        earlier = tx.id_bytes
    assert [m["durableId"] for m in lines(rx, 2)] == [1, 2]
    stream = open(os.path.join(droot, "tx", "durable", "outbox", "rx", "stream")).read().strip()
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=0.2) as tx:
        top = d.MAX_ID
        # the finding: any source ID, the victim's stream, id = base = 2^63-1
        forge(droot, dkey, sender="tx", target="rx", source=os.urandom(16), target_id=rx_id, stream=stream,
              msg_id=top, base_id=top)
        wait_until(lambda: rejected(droot, "rx", "unknown_sender"), 20, "the forged copy refused")
        # the same from an instance the sender really had (its lineage): it authenticates as tx, is
        # handled like any message sent with the key, and moves the floor no further than allowed
        forge(droot, dkey, sender="tx", target="rx", source=earlier, target_id=rx_id, stream=stream, msg_id=top,
              base_id=top, seq=1000)                 # (after that instance's own envelopes on the link)
        assert lines(rx, 1)[0]["durableId"] == top
        ids = [tx.send("rx", {"after": n}, durable=True) for n in range(20)]
        wait_until(lambda: not tx.extension("durable").outbox_items(), 30, "the receipts of every later message")
    assert sorted(m["durableId"] for m in lines(rx, 20)) == ids
    assert not rejected(droot, "rx", "durable_duplicate")
    rx.stop()
    again = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])     # both sides restarted
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        assert tx.send("rx", "restarted", durable=True, confirm=True, timeout=20) == ids[-1] + 1
    assert lines(again, 1)[0]["data"] == "restarted"
    reports = dict(verify_receipts(droot, load_key(dkey).raw, "rx"))
    assert reports["ledger of rx"].ok and reports["ledger of rx"].count == 24
    # the sender never stored the forged message's receipt: its copy of the chain shows the hole
    assert not reports["stored by tx"].ok and reports["stored by tx"].first_break == 3
    result = speed("receipts", "rx", "--dir", droot, "--key", dkey)
    assert result.returncode == 1 and "BROKEN at receipt 3: receipt 3 is missing" in result.stdout
