"""The durable extension with real files on a persistent file system and real processes: store and
forward, the outbox across restarts, expiry, v1-only targets, handlers cut by kill -9, copies carried
over a receiver's restart, duplicates, receipts and their verification, the CLI, tmpfs refused."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from speed_runtime import DeliveryError, Node, generate_key_file, load_key
from speed_runtime.core.durable import NotDurableError, OutboxFullError
from speed_runtime.ext.durable_store import (RAMFS_MAGIC, TMPFS_MAGIC, filesystem_type, list_outboxes, list_pending,
                                             verify_receipts)

from ..helpers.processes import NodeProcesses
from ..helpers.wait import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEED = [sys.executable, "-m", "speed_runtime"]


def persistent_base() -> str:
    """A private directory on a disk file system (durable refuses tmpfs): inside the work tree
    (git-ignored), else the system's temporary directory where that is on disk."""
    for parent in (os.path.join(REPO, ".durable-tests"), tempfile.gettempdir()):
        os.makedirs(parent, exist_ok=True)
        if filesystem_type(parent) not in (TMPFS_MAGIC, RAMFS_MAGIC):
            path = tempfile.mkdtemp(prefix="speed-durable-", dir=parent)
            os.chmod(path, 0o700)
            return path
    raise AssertionError("no persistent directory for the durable tests")


@pytest.fixture
def base():
    path = persistent_base()
    yield path
    subprocess.run(["rm", "-rf", path])


@pytest.fixture
def droot(base):
    return os.path.join(base, "env")


@pytest.fixture
def dkey(base):
    path = os.path.join(base, "speed.key")
    generate_key_file(path)
    return path


@pytest.fixture
def dprocs(droot, dkey):
    group = NodeProcesses(droot, dkey)
    yield group
    group.stop_all()


def speed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(SPEED + list(args), capture_output=True, text=True, timeout=60, cwd=REPO)


def lines(proc, count: int, timeout: float = 30.0) -> list[dict]:
    return [json.loads(proc.read_line(timeout)) for _ in range(count)]


def durable_events(node: Node) -> list:
    events: list = []
    node.add_observer(lambda e: events.append(e) if getattr(e, "kind", "") == "durable" else None)
    return events


def test_store_and_forward_survives_the_senders_restart_and_delivers_when_the_target_comes_online(
        droot, dkey, dprocs):
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        ids = [tx.send("rx", {"n": n}, durable=True) for n in (1, 2, 3)]   # rx was never registered
    assert ids == [1, 2, 3]
    listed = speed("outbox", "--dir", droot, "--json")
    rows = json.loads(listed.stdout)
    assert [(r["node"], r["target"], r["targetState"], r["id"]) for r in rows] == \
        [("tx", "rx", "missing", 1), ("tx", "rx", "missing", 2), ("tx", "rx", "missing", 3)]
    assert "WAITING" in speed("outbox", "--dir", droot).stdout
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:       # a new instance: the outbox is still there
        assert [i["id"] for i in tx.extension("durable").outbox_items()] == [1, 2, 3]
        rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])
        got = lines(rx, 3)
        assert [(m["data"], m["durableId"], m["redelivered"]) for m in got] == \
            [({"n": 1}, 1, False), ({"n": 2}, 2, False), ({"n": 3}, 3, False)]
        wait_until(lambda: not tx.extension("durable").outbox_items(), 20, "the receipts")
        assert tx.send("rx", "now", durable=True, confirm=True, timeout=20) == 4
    assert lines(rx, 1)[0]["durableId"] == 4
    result = speed("receipts", "rx", "--dir", droot, "--key", dkey)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tx <- rx" in result.stdout and "4 receipts, 4 handled: verified" in result.stdout
    assert list_outboxes(droot) == [] and speed("outbox", "--dir", droot).stdout.startswith("no durable messages")


def test_a_message_whose_time_to_live_runs_out_is_a_send_error(droot, dkey):
    with Node(droot, dkey, "tx", allow=["ghost"], durable=True) as tx:
        events = durable_events(tx)
        with pytest.raises(DeliveryError) as info:
            tx.send("ghost", "never", durable=True, ttl=0.5, confirm=True, timeout=20)
        assert "expired" in str(info.value)
        assert tx.extension("durable").outbox_items() == []
        errors = [e for e in events if e.event == "send_error"]
        assert [(e.peer, e.id, e.status) for e in errors] == [("ghost", 1, "expired")]
        assert "time-to-live ran out before ghost was online" in errors[0].detail
        assert tx.counters()["durableSendErrors"] == 1
    with open(os.path.join(droot, "tx", "durable", "receipts", "ghost.log")) as f:
        assert json.loads(f.readline())["expired"]["id"] == 1
    with Node(droot, dkey, "tx", allow=["ghost"], durable=True) as tx:  # an expired id is never given again
        assert tx.send("ghost", "again", durable=True) == 2


def test_a_v1_only_node_never_receives_a_durable_envelope(droot, dkey, dprocs):
    v1 = dprocs.start("plain", allow=["tx"], trace=True)
    with Node(droot, dkey, "tx", allow=["plain", "later"], durable=True) as tx:
        events = durable_events(tx)
        with pytest.raises(NotDurableError) as info:
            tx.send("plain", "x", durable=True)
        assert "does not speak the durable extension" in str(info.value)
        assert tx.extension("durable").outbox_items() == [] and tx.counters()["sealed"] == 0
        tx.send("later", "stored while later is away", durable=True)       # stored: later is not registered
        dprocs.start("later", allow=["tx"], trace=True)                    # … and comes up without durable
        wait_until(lambda: any(e.event == "send_error" for e in events), 20, "the send error")
        [error] = [e for e in events if e.event == "send_error"]
        assert error.peer == "later" and "does not speak the durable extension" in error.detail
        assert tx.counters()["sealed"] == 0                                 # nothing was ever sealed for them
        assert tx.send("plain", "v1 still works") == 1
    v1.stop()
    journal = os.path.join(droot, "speed_traces", "plain.jsonl")
    records = [json.loads(line) for line in open(journal)]
    from_tx = [r for r in records if r.get("kind", "envelope") == "envelope" and r.get("peer") == "tx"]
    assert [(r["outcome"], r["type"]) for r in from_tx] == [("accepted", "MESSAGE"), ("accepted", "EVENT")]
    envelopes = [__import__("base64").b64decode(r["envelope"]) for r in from_tx]
    assert all(not (int.from_bytes(e[2:4], "big") & 0x0010) for e in envelopes)


def test_a_handler_cut_by_kill_9_runs_again_marked_redelivered_and_is_receipted_once(droot, dkey, dprocs):
    rx = dprocs.start_scripted("rx", allow=["tx"], delay_ms=60_000, options={"durable": True})
    ledger = os.path.join(droot, "rx", "durable", "ledger", "tx.log")
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=60) as tx:
        tx.send("rx", "slow", durable=True)
        wait_until(lambda: os.path.exists(ledger) and b'"claim"' in open(ledger, "rb").read(), 20, "the claim")
        rx.proc.kill()                                                       # inside the handler
        rx.proc.wait()
        assert [p.file for p in list_pending(droot, ["rx"])]                 # the copy is still in the inbox
        again = dprocs.start_scripted("rx", allow=["tx"], options={"durable": True})
        [msg] = lines(again, 1)
        assert (msg["data"], msg["durableId"], msg["redelivered"]) == ("slow", 1, True)
        wait_until(lambda: not tx.extension("durable").outbox_items(), 20, "the receipt")
    with open(ledger) as f:
        records = [json.loads(line) for line in f]
    assert [next(iter(r)) for r in records] == ["claim", "claim", "receipt"]
    assert list_pending(droot, ["rx"]) == []
    reports = verify_receipts(droot, _raw(dkey), "rx")
    assert reports and all(r.ok and r.count == 1 for _, r in reports)


def _raw(key_path: str) -> bytes:
    return load_key(key_path).raw


def test_copies_in_the_inbox_survive_a_receiver_restart_while_their_sender_is_away(droot, dkey, dprocs):
    rx = dprocs.start_scripted("rx", allow=["tx"], options={"durable": True})
    os.kill(rx.proc.pid, signal.SIGSTOP)                                    # files stay in its inbox
    try:
        with Node(droot, dkey, "tx", allow=["rx"], durable=True, linger_seconds=0.2) as tx:
            for n in (1, 2, 3):
                tx.send("rx", n, durable=True)
            wait_until(lambda: len(list_pending(droot, ["rx"])) == 3, 20, "three copies in rx's inbox")
    finally:
        rx.proc.kill()                                                       # and the receiver dies too
        rx.proc.wait()
    again = dprocs.start_scripted("rx", allow=["tx"], options={"durable": True})
    got = lines(again, 3)                                                    # sealed for the dead instance
    assert sorted((m["data"], m["durableId"], m["redelivered"]) for m in got) == [(1, 1, False), (2, 2, False),
                                                                               (3, 3, False)]
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:        # the sender comes back: copies again
        wait_until(lambda: not tx.extension("durable").outbox_items(), 30, "the receipts")
    with pytest.raises(TimeoutError):
        again.read_line(1.0)                                                 # the copies were duplicates
    assert all(r.ok and r.count == 3 for _, r in verify_receipts(droot, _raw(dkey), "rx"))


def test_copies_delivered_again_before_the_receipt_are_handled_once(droot, dkey, dprocs):
    rx = dprocs.start_scripted("rx", allow=["tx"], delay_ms=1500, options={"durable": True, "trace": True})
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=0.1) as tx:
        events = durable_events(tx)
        assert tx.send("rx", "once", durable=True, confirm=True, timeout=30) == 1
        copies = [e for e in events if e.event == "delivered"]
        assert len(copies) >= 2                                             # retried while the handler ran
    assert [m["data"] for m in lines(rx, 1)] == ["once"]
    journal = os.path.join(droot, "speed_traces", "rx.jsonl")
    wait_until(lambda: os.path.exists(journal) and b"durable_duplicate" in open(journal, "rb").read(), 10,
               "the duplicates in rx's journal")
    with pytest.raises(TimeoutError):
        rx.read_line(1.0)


def test_an_altered_receipt_breaks_the_chain_at_its_position(droot, dkey, dprocs):
    dprocs.start("rx", allow=["tx"], extra=["--durable"])
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        for n in range(3):
            tx.send("rx", n, durable=True, confirm=True, timeout=20)
    path = os.path.join(droot, "tx", "durable", "receipts", "rx.log")
    text = open(path).read().splitlines()
    text[1] = text[1].replace('"status":"handled"', '"status":"failed"')
    open(path, "w").write("\n".join(text) + "\n")
    result = speed("receipts", "rx", "--dir", droot, "--key", dkey)
    assert result.returncode == 1
    assert "stored by tx): 3 receipts, 1 handled: BROKEN at receipt 2: receipt 2 does not verify" in result.stdout
    assert "ledger of rx): 3 receipts, 3 handled: verified" in result.stdout


def test_a_full_outbox_refuses_with_one_sentence_and_stores_nothing(droot, dkey):
    with Node(droot, dkey, "tx", allow=["away"], durable=True, outbox_limit=2) as tx:
        tx.send("away", 1, durable=True)
        tx.send("away", 2, durable=True)
        with pytest.raises(OutboxFullError) as info:
            tx.send("away", 3, durable=True)
        assert "its limit is 2 messages" in str(info.value) and "nothing was stored" in str(info.value)
        assert [i["id"] for i in tx.extension("durable").outbox_items()] == [1, 2]


def test_a_killed_sender_delivers_what_it_confirmed_after_its_restart(droot, dkey, dprocs):
    script = ("import sys, os, time; from speed_runtime import Node\n"
              "n = Node(sys.argv[1], sys.argv[2], 'tx', allow=['rx'], durable=True).start()\n"
              "[n.send('rx', i, durable=True) for i in range(5)]\nprint('stored', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, droot, dkey], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "stored"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])
    with Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        assert sorted(m["data"] for m in lines(rx, 5)) == [0, 1, 2, 3, 4]
        wait_until(lambda: not tx.extension("durable").outbox_items(), 20, "the receipts")


def test_tmpfs_is_refused_with_one_sentence_or_run_with_a_loud_warning(dkey, workdir):
    root = os.path.join(workdir, "env")                                      # workdir is on /dev/shm
    assert filesystem_type(workdir) == TMPFS_MAGIC
    refused = speed("node", "--dir", root, "--key", dkey, "--name", "n", "--durable")
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith(f"speed: the communication directory {root} is on tmpfs (memory)")
    assert "--durable-on-tmpfs" in refused.stderr and "Traceback" not in refused.stderr
    procs = NodeProcesses(root, dkey)
    try:
        procs.start("n", extra=["--durable", "--durable-on-tmpfs"])
        wait_until(lambda: any("WARNING" in line and "tmpfs" in line for line in procs.started[0].stderr), 10,
                   "the warning")
    finally:
        procs.stop_all()


def test_speed_send_durable_stores_for_an_offline_target_and_delivers_on_a_later_run(droot, dkey, dprocs):
    refused = speed("send", "rx", "1", "--durable", "--dir", droot, "--key", dkey)
    assert refused.returncode == 2 and "a durable send needs --as NAME" in refused.stderr
    stored = speed("send", "rx", '{"first": 1}', "--durable", "--as", "tx", "--timeout", "1", "--dir", droot,
                   "--key", dkey)
    assert stored.returncode == 0 and "stored durable message in tx's outbox for rx" in stored.stderr
    assert [(i.node, i.target, i.id) for i in list_outboxes(droot)] == [("tx", "rx", 1)]
    rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])
    done = speed("send", "rx", '{"second": 2}', "--durable", "--as", "tx", "--timeout", "30", "--dir", droot,
                 "--key", dkey)
    assert done.returncode == 0 and "durable message 2 to rx: handled (receipted)" in done.stderr
    assert sorted(m["durableId"] for m in lines(rx, 2)) == [1, 2]


def test_a_message_receipted_after_its_cli_sender_exited_is_listed_as_receipted_not_waiting(droot, dkey, dprocs):
    """`speed send --durable` waits --timeout for the receipt, then exits; a receiver that takes the
    copy later receipts it in its ledger and sends the receipt nowhere (the sender's entry is gone),
    so the message stays in the sender's outbox. The listing says the target receipted it."""
    rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])
    os.kill(rx.proc.pid, signal.SIGSTOP)  # a busy receiver: it takes the copy after the sender gave up
    try:
        stored = speed("send", "rx", '{"n": 1}', "--durable", "--as", "tx", "--timeout", "1", "--dir", droot,
                       "--key", dkey)
        assert stored.returncode == 0 and "not receipted within 1 s" in stored.stderr
    finally:
        os.kill(rx.proc.pid, signal.SIGCONT)
    assert lines(rx, 1)[0]["durableId"] == 1
    wait_until(lambda: [i.receipted for i in list_outboxes(droot)] == ["handled"], 20, "the receipt in rx's ledger")
    assert [(i.node, i.target, i.id, i.state) for i in list_outboxes(droot)] == \
        [("tx", "rx", 1, "receipted handled, receipt not taken by tx")]
    listed = speed("outbox", "--dir", droot)
    assert "receipted handled, receipt not taken by tx" in listed.stdout
    assert "1 of 1 already receipted by their target" in listed.stderr
    assert json.loads(speed("outbox", "--dir", droot, "--json").stdout)[0]["receipted"] == "handled"
    chains = {where: r for where, r in verify_receipts(droot, load_key(dkey).raw, "rx")}
    assert chains["ledger of rx"].count == 1 and "stored by tx" not in chains  # what `v` shows beside it


def test_a_forged_receipt_is_rejected_and_the_message_stays_until_the_real_one(droot, dkey, dprocs):
    from speed_runtime.core import durable as d
    from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
    from speed_runtime.transport import inject

    rx = dprocs.start("rx", allow=["tx"], extra=["--durable"])
    os.kill(rx.proc.pid, signal.SIGSTOP)
    try:
        with Node(droot, dkey, "tx", allow=["rx"], durable=True, trace=True) as tx:
            tx.send("rx", "real", durable=True)
            wait_until(lambda: list_pending(droot, ["rx"]), 20, "the copy in rx's inbox")
            [item] = tx.extension("durable").outbox_items()
            with open(os.path.join(droot, "tx", "durable", "outbox", "rx", "stream")) as f:
                stream = f.read().strip()
            wrong = d.make_receipt(d.receipt_key(os.urandom(32)), "rx", "tx", stream, 1, item["id"], "handled", 1,
                                   d.ZERO_MAC)                              # a MAC under another key
            body = json.dumps({"from": "rx", "to": "tx", "ackSeq": 1, "receipt": wrong.to_json()}).encode()
            nonce = os.urandom(12)
            header = Header(EnvelopeType.ACK, 1, int(time.time() * 1000), len(body), uuid.UUID(rx.id).bytes,
                            tx.id_bytes, d.FLAG_DURABLE)
            inject(droot, "tx", envelope_filename("rx", header.source_id, 1, nonce),
                   seal(header, body, load_key(dkey), nonce))
            journal = os.path.join(droot, "speed_traces", "tx.jsonl")
            wait_until(lambda: os.path.exists(journal) and b"durable_bad_receipt" in open(journal, "rb").read(), 10,
                       "the rejection")
            assert [i["id"] for i in tx.extension("durable").outbox_items()] == [item["id"]]
            os.kill(rx.proc.pid, signal.SIGCONT)
            wait_until(lambda: not tx.extension("durable").outbox_items(), 20, "the real receipt")
    finally:
        os.kill(rx.proc.pid, signal.SIGCONT)
    assert all(r.ok and r.count == 1 for _, r in verify_receipts(droot, _raw(dkey), "rx"))


def test_garbage_in_an_outbox_is_skipped_and_the_node_goes_on(droot, dkey):
    with Node(droot, dkey, "tx", allow=["away"], durable=True) as tx:
        tx.send("away", "kept", durable=True)
    box = os.path.join(droot, "tx", "durable", "outbox", "away")
    with open(os.path.join(box, "00000000000000000007.msg"), "wb") as f:
        f.write(b"SPEED-OUTBOX-V1\n{not json\n" + os.urandom(64))
    with open(os.path.join(box, ".00000000000000000008.msg.tmp"), "wb") as f:   # a write cut short
        f.write(b"half")
    os.mkfifo(os.path.join(box, "00000000000000000009.msg"))
    with Node(droot, dkey, "tx", allow=["away"], durable=True) as tx:
        assert [i["id"] for i in tx.extension("durable").outbox_items()] == [1]
        assert tx.send("away", "next", durable=True) == 2
    assert not os.path.exists(os.path.join(box, ".00000000000000000008.msg.tmp"))
    listed = speed("outbox", "--dir", droot, "--json")
    assert listed.returncode == 0 and [r["id"] for r in json.loads(listed.stdout)] == [1, 2]


def test_a_durable_handlers_exception_is_a_line_and_a_health_record_not_only_a_counter(droot, dkey, caplog):
    with Node(droot, dkey, "rx", allow=["tx"], durable=True) as rx, \
            Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx:
        health: list = []
        rx.add_observer(lambda e: health.append(e) if getattr(e, "kind", "") == "health" else None)

        def broken(message):
            raise ValueError(f"no invoice {message.data}\x1b]2;title\x07")
        rx.on_message(broken)
        with caplog.at_level("WARNING", logger="speed_runtime"), pytest.raises(DeliveryError) as info:
            tx.send("rx", 42, durable=True, confirm=True, timeout=20)
        assert "not handled: failed" in str(info.value)
        [event] = [e for e in health if e.event == "handler_failed"]
        assert "ValueError" in event.detail and "no invoice 42" in event.detail and "from tx" in event.detail
        assert "\x1b" not in event.detail and "\\x1b" in event.detail          # the text as data, escaped
        assert any(event.detail in r.getMessage() for r in caplog.records)
        assert rx.counters()["handlerErrors"] == 1


def test_a_durable_message_no_receipt_could_answer_is_refused_before_it_is_stored(droot, dkey):
    """Receipts come back from the target: a sender that does not allow it would refuse every one
    and the message would wait for its TTL, handled all along; and a copy larger than the target's
    advertised envelope limit would be refused `too_large` until its TTL. Both are refused at once."""
    from speed_runtime import AccessDeniedError, PayloadTooLargeError
    with Node(droot, dkey, "rx", allow=["tx"], durable=True, features=["chunks"], max_payload=4096) as rx, \
            Node(droot, dkey, "tx", durable=True) as tx:
        with pytest.raises(AccessDeniedError, match="receipts that rx sends back"):
            tx.send("rx", "x", durable=True)
        tx.allow("rx")
        with pytest.raises(PayloadTooLargeError, match="exceeds rx's .* limit of 4096 bytes"):
            tx.send("rx", "y" * 5000, durable=True)
        assert tx.extension("durable").outbox_items() == []
        got: list = []
        rx.on_message(got.append)
        tx.send("rx", "y" * 3000, durable=True, confirm=True, timeout=20)  # within both limits: stored, receipted
        assert [m.data for m in got] == ["y" * 3000]


@contextlib.contextmanager
def _finally(action):
    try:
        yield
    finally:
        action()


def test_a_copy_held_by_a_leaving_target_is_not_expired_under_it(droot, dkey):
    """A target that is leaving drains its inbox: a copy it holds, whose handler started in time,
    is still handled and receipted. The sender waits for that receipt past the time-to-live (it
    expired the message as soon as the target was no longer `online`, and then the receipt said
    `handled`: the two sides disagreed)."""
    import threading
    started, release = threading.Event(), threading.Event()
    rx = Node(droot, dkey, "rx", allow=["tx"], durable=True)
    rx.on_message(lambda m: (started.set(), release.wait(30)))
    closer = threading.Thread(target=rx.close)
    with rx, Node(droot, dkey, "tx", allow=["rx"], durable=True) as tx, _finally(release.set):
        events, durable = durable_events(tx), tx.extension("durable")
        expires = time.time() + 1.0
        tx.send("rx", "slow", durable=True, ttl=1.0)
        assert started.wait(20)                         # its handler began before expiresAt
        closer.start()                                  # rx publishes leaving and drains
        wait_until(lambda: (e := durable._monitor.current("rx")) is not None and e.status == "leaving", 20,
                   "rx leaving")
        wait_until(lambda: time.time() > expires + 0.2, 5, "the time-to-live passed")
        durable._deliver_and_expire()                   # what the sender's thread does, now
        assert not [e for e in events if e.event == "send_error"]
        release.set()
        wait_until(lambda: any(e.event == "receipt" for e in events), 20, "the receipt")
        assert [e.status for e in events if e.event == "receipt"] == ["handled"]
        assert not [e for e in events if e.event == "send_error"]
        closer.join(30)
