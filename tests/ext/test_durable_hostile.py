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
    # a copy the sender sent again before the receipt of the first came back (it retries every
    # 0.2 s: on a busy machine that happens) is a duplicate with the receipt of the message it
    # repeats; a genuine message refused below a forged floor (the finding) would have none
    duplicates = [r for r in journal(droot, "rx") if r.get("kind") == "durable" and r.get("event") == "duplicate"]
    assert len(duplicates) == len(rejected(droot, "rx", "durable_duplicate"))
    assert all(r.get("status") == "handled" and r.get("index") is not None and r["id"] in ids + [1, 2, top]
               for r in duplicates), duplicates
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


def test_a_fifo_or_a_link_in_place_of_a_ledger_is_refused_aloud_and_nothing_is_acknowledged(droot, dkey, dprocs,
                                                                                           base):
    rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])
    ledger = os.path.join(droot, "rx", "durable", "ledger", "tx.log")
    os.mkfifo(ledger)
    outside = os.path.join(base, "not-a-ledger")
    with open(outside, "w") as f:
        f.write("kept\n")
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        tx.send("rx", "waits", durable=True)
        wait_until(lambda: any("tx.log is not a regular file" in line for line in rx.stderr), 20, "the refusal")
    os.unlink(ledger)
    os.symlink(outside, ledger)                                       # a link: never followed either
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:  # a new instance delivers at once
        wait_until(lambda: any("Too many levels of symbolic links" in line for line in rx.stderr), 20,
                   "the second refusal")
        assert [i["id"] for i in tx.extension("durable").outbox_items()] == [1] and rx.proc.poll() is None
    os.unlink(ledger)
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        assert tx.send("rx", "then", durable=True, confirm=True, timeout=30) == 2
        wait_until(lambda: not tx.extension("durable").outbox_items(), 30, "the first message's receipt")
    assert sorted(m["data"] for m in lines(rx, 2)) == ["then", "waits"]
    assert open(outside).read() == "kept\n"


def test_links_fifos_and_odd_names_in_a_senders_durable_directories_are_left_alone(droot, dkey, base):
    with Node(droot, dkey, "tx", allow=["away", "other"], durable=True) as tx:
        tx.send("away", "kept", durable=True)
        tx.send("other", "kept too", durable=True)
    home = os.path.join(droot, "tx", "durable")
    elsewhere = os.path.join(base, "elsewhere")
    os.mkdir(elsewhere)
    os.symlink(elsewhere, os.path.join(home, "outbox", "linked"))
    os.mkdir(os.path.join(home, "outbox", "x\x1b]2;title\x07"))
    receipts = os.path.join(home, "receipts", "other.log")
    if os.path.lexists(receipts):
        os.unlink(receipts)
    os.mkfifo(receipts)
    tx = Node(droot, dkey, "tx", allow=["away", "other"], durable=True)
    health: list = []
    tx.add_observer(lambda e: health.append(e) if getattr(e, "kind", "") == "health" else None)
    with tx:
        assert [(i["target"], i["id"]) for i in tx.extension("durable").outbox_items()] == [("away", 1)]
        assert tx.send("away", "next", durable=True) == 2
    details = " ".join(e.detail for e in health)
    assert "outbox/linked" in details and "receipts/other.log" in details and "\x1b" not in details
    assert os.listdir(elsewhere) == []
    for args in (("outbox", "--dir", droot, "--json"), ("receipts", "away", "--dir", droot, "--key", dkey)):
        result = speed(*args)                                         # returns: nothing blocks on the FIFO
        assert "\x1b" not in result.stdout + result.stderr
    assert [r["target"] for r in json.loads(speed("outbox", "--dir", droot, "--json").stdout)] == ["away", "away",
                                                                                                   "other"]
