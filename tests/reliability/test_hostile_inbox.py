"""Cases 6 and 7: hostile entries in the inbox of a real `speed node` process, and senders that are
not allowed. tests/runtime/test_node.py covers a symlink to a file, a FIFO, an empty directory, a
hard link and a non-envelope name in an in-process node; here the receiver is a separate process
whose read volume is measured, and the list adds a symlink to a FIFO and to a directory, a 1 GiB
sparse file, a valid envelope owned by another user, a socket, an undecodable name and an empty
file."""
import os
import socket
import time

import pytest

from speed_runtime import AccessDeniedError, Node
from speed_runtime.core import payloads
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.journal import read_journal

from ..helpers.wait import wait_until


def rchar(pid):
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def craft(sender, target_name, target_id, key, data, seq):
    body = payloads.encode_payload(payloads.message(sender.name, target_name, data))
    nonce = os.urandom(12)
    header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(body), sender.id_bytes,
                    bytes.fromhex(target_id.replace("-", "")))
    return envelope_filename(sender.name, sender.id_bytes, seq, nonce), seal(header, body, key, nonce)


def journal_rejections(root, name):
    path = os.path.join(root, "speed_traces", f"{name}.jsonl")
    if not os.path.exists(path):
        return []
    return [r for r in read_journal(path)[0] if getattr(r, "outcome", "") == "rejected"]


def test_hostile_inbox_entries_in_a_real_process(procs, root, key, workdir):
    target = procs.start("r", allow=["a"], trace=True, echo=True)
    inbox = os.path.join(root, "r", "inbox")
    secret = os.path.join(workdir, "secret")
    with open(secret, "w") as f:
        f.write("top secret")
    fifo = os.path.join(workdir, "fifo")
    os.mkfifo(fifo)
    linked = os.path.join(workdir, "linked")
    with open(linked, "wb") as f:
        f.write(b"\0" * 200)

    def name(seq):
        return f"a.00000000.{seq:020d}.00000000.env"
    with Node(root, key, "a", allow=["r"]) as a:
        before = rchar(target.proc.pid)
        expected = {}  # seq in the file name -> reason
        os.symlink(secret, os.path.join(inbox, name(1)))
        expected[1] = "bad_file"
        os.symlink(fifo, os.path.join(inbox, name(2)))
        expected[2] = "bad_file"
        os.mkfifo(os.path.join(inbox, name(3)))
        expected[3] = "bad_file"
        os.mkdir(os.path.join(workdir, "dir"))  # made outside: the node may remove an empty directory at once
        with open(os.path.join(workdir, "dir", "inside"), "w") as f:
            f.write("x")
        os.rename(os.path.join(workdir, "dir"), os.path.join(inbox, name(4)))
        expected[4] = "bad_file"
        os.link(linked, os.path.join(inbox, name(5)))
        expected[5] = "bad_file"
        with open(os.path.join(workdir, "sparse"), "wb") as f:
            os.truncate(f.fileno(), 1 << 30)
        os.rename(os.path.join(workdir, "sparse"), os.path.join(inbox, name(6)))
        expected[6] = "too_large"
        fname, data = craft(a, "r", target.id, key, "owned by nobody", 1)  # authentic, but not our uid's file
        foreign = os.path.join(workdir, "foreign")
        with open(foreign, "wb") as f:
            f.write(data)
        os.chown(foreign, 65534, 65534)
        os.rename(foreign, os.path.join(inbox, name(7)))
        expected[7] = "bad_file"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(os.path.join(inbox, name(8)))
        expected[8] = "bad_file"
        os.symlink("/", os.path.join(inbox, name(9)))
        expected[9] = "bad_file"
        open(os.path.join(inbox, name(10)), "wb").close()
        expected[10] = "bad_size"
        for junk in ("notes.txt", ".hidden.env", os.fsdecode(b"a.\xff\xfe.env"), "a.00000000.1.00000000.env"):
            with open(os.path.join(inbox, junk), "wb") as f:
                f.write(b"junk")
        try:
            want = len(expected) + 4
            rejected = wait_until(lambda: len(journal_rejections(root, "r")) >= want and journal_rejections(root, "r"),
                                  timeout=30, interval=0.05, what=f"{want} rejections in r's journal")
        finally:
            sock.close()
        by_seq = {r.seq: r.reason for r in rejected if r.peer == "a"}
        assert by_seq == expected
        assert sorted(r.reason for r in rejected if r.peer == "?") == ["unauthorized"] * 4  # contract §5.5 step 1
        a.send("r", "still works")  # nothing blocked the node
        assert target.messages(1)[0]["data"] == "still works"
        read = rchar(target.proc.pid) - before
        assert read < 16 << 20, "the node read far more than any envelope"
        print({"hostileEntries": want, "bytesReadByTheNode": read})
    wait_until(lambda: os.listdir(inbox) == [], timeout=10, what="an empty inbox")
    assert open(secret).read() == "top secret" and os.path.exists(fifo) and open(linked, "rb").read() == b"\0" * 200
    journal = open(os.path.join(root, "speed_traces", "r.jsonl")).read()
    assert "top secret" not in journal and "owned by nobody" not in journal
    assert target.proc.poll() is None


def test_a_sender_that_is_not_allowed_writes_nothing_and_is_discarded_unread(procs, root, key, workdir):
    guarded = procs.start("guarded", allow=["friend"], services=["echo"], trace=True, echo=True)
    home = os.path.join(root, "guarded")
    with Node(root, key, "stranger", allow=["guarded"]) as stranger:
        # outbound check: nothing is sealed or written
        with pytest.raises(AccessDeniedError, match="does not allow stranger"):
            stranger.send("guarded", "let me in")
        with pytest.raises(AccessDeniedError, match="does not allow stranger"):
            stranger.call("guarded", "echo", {})
        assert stranger.counters()["sealed"] == 0
        assert os.listdir(os.path.join(home, "inbox")) == [] and os.listdir(os.path.join(home, "tmp")) == []
        # inbound check: an authentic envelope written anyway is discarded unread
        fname, data = craft(stranger, "guarded", guarded.id, key, "forced", 1)
        outside = os.path.join(workdir, "witness")  # a second link that outlives the inbox entry
        with open(outside, "wb") as f:
            f.write(data)
        past = time.time() - 1000
        os.utime(outside, (past, time.time()))  # atime < mtime: any read would move atime (relatime)
        os.link(outside, os.path.join(home, "tmp", fname))
        os.rename(os.path.join(home, "tmp", fname), os.path.join(home, "inbox", fname))
        rejected = wait_until(lambda: journal_rejections(root, "guarded"), timeout=20, what="the rejection")
        assert [(r.peer, r.reason, r.size) for r in rejected] == [("stranger", "unauthorized", 0)]
        assert os.stat(outside).st_atime == pytest.approx(past, abs=1), "the file was read"
        with open(outside, "rb") as f:  # the witness is sensitive: reading it does move atime
            f.read()
        assert os.stat(outside).st_atime > past + 500
        # a node that is allowed still gets through
        with Node(root, key, "friend", allow=["guarded"]) as friend:
            friend.send("guarded", "hello")
            assert guarded.messages(1)[0] == {"from": "friend", "seq": 1, "data": "hello"}
    assert guarded.lines.empty()


def test_a_fresh_grant_is_honoured_even_when_the_senders_cache_lags(root, key, monkeypatch):
    """Found by the soak (defect D4): a callee whose cache had not yet seen the caller's fresh grant
    refused to write the response, and the call timed out. A sender now checks that its cached
    entry is still the file's current version before every send (one stat)."""
    with Node(root, key, "a", allow=["b"], linger_seconds=0) as a, Node(root, key, "b", allow=[]) as b:
        wait_until(lambda: "b" in a.peers(), what="a to see b")
        monkeypatch.setattr(a.monitor, "process_hints", lambda *_: None)  # a's watch stops following changes
        monkeypatch.setattr(a.monitor, "rescan", lambda *_: None)
        b.allow("a")
        a.send("b", "right after the grant")
        assert b.receive(timeout=20).data == "right after the grant"
        granted = a.monitor.get("b")
        b.revoke("a")  # honoured by the sender at once: nothing is written
        with pytest.raises(AccessDeniedError, match="does not allow a"):
            a.send("b", "after the revoke")
        assert os.listdir(os.path.join(root, "b", "inbox")) == []
        # a revoke that lands between the sender's read and its delivery: the inbound check discards it unread
        monkeypatch.setattr(a.monitor, "current", lambda name: granted)
        a.send("b", "raced the revoke")
        wait_until(lambda: b.counters()["rejected"] == {"unauthorized": 1}, timeout=20, what="the inbound check")


def test_a_late_look_at_a_consumed_file_records_no_second_judgement(root, key):
    """Found by the soak (defect D8): a rescan took a file in, then the file's own (late) inotify event
    made the node look at the name again; with the sender revoked meanwhile it recorded an
    `unauthorized` rejection of an envelope it had already accepted. One file, one record."""
    events = []
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a"]) as b:
        b.add_observer(lambda e: events.append(e) if getattr(e, "dir", "") == "in" else None)
        sent = []
        a.add_observer(lambda e: sent.append(e) if getattr(e, "outcome", "") == "sent" else None)
        a.send("b", "once", confirm=True, timeout=20)
        b.revoke("a")
        b.receiver.look_again([sent[0].file, "not-an-envelope"])  # the late wake-up, as the protocol thread sees it
        assert [(e.outcome, e.reason) for e in events] == [("accepted", None)]
        assert b.counters()["rejected"] == {}
