"""A Node's behaviour, in one process with real directories, real inotify and real threads."""
import json
import os
import shutil
import threading
import time

import pytest

from speed_runtime import (AccessDeniedError, ConfigError, DeliveryError, EnvelopeTrace, LeaseLostError, LeaseTrace,
                           Node, Service, SpcError, SpcTrace)
from speed_runtime.demo import DEMO_SERVICES
from speed_runtime.journal import read_journal
from speed_runtime.registry import Registry
from speed_runtime.transport import inject

from ..helpers.wait import wait_until


def demo(node):
    for name, fn in DEMO_SERVICES.items():
        node.register(name, fn)
    return node


@pytest.fixture
def pair(root, key):
    with Node(root, key, "caller", allow=["callee"], groups=["front"]) as a, \
            Node(root, key, "callee", allow=["caller"], groups=["back"]) as b:
        yield a, demo(b)


def test_spc_success_and_every_error_code(pair):
    a, b = pair
    assert a.call("callee", "calculateTax", {"amount": 100}) == {"tax": 18.0}
    assert a.call("callee", "echo", {"x": [1, "é"]}) == {"x": [1, "é"]}
    cases = [("nope", {}, "SERVICE_NOT_FOUND"), ("calculateTax", {}, "INVALID_ARGUMENTS"),
             ("calculateTax", {"amount": True}, "INVALID_ARGUMENTS"), ("echo", [1], "INVALID_ARGUMENTS"),
             ("fail", {}, "EXECUTION_FAILED")]
    for service, args, code in cases:
        with pytest.raises(SpcError) as info:
            a.call("callee", service, args)
        assert info.value.code == code, (service, info.value)
    b.register("guarded", lambda args: "secret", policy={"someone-else"})
    with pytest.raises(SpcError) as info:
        a.call("callee", "guarded", {})
    assert info.value.code == "ACCESS_DENIED"
    b.register("unserialisable", lambda args: {1, 2})
    with pytest.raises(SpcError) as info:
        a.call("callee", "unserialisable", {})
    assert info.value.code == "INTERNAL_ERROR" and "not JSON" in info.value.message
    b.register("bounded", lambda args: time.sleep(1.0), timeout=0.1)
    with pytest.raises(SpcError) as info:
        a.call("callee", "bounded", {})
    assert info.value.code == "TIMEOUT" and "time limit" in info.value.message
    assert info.value.unanswered is False   # the callee answered TIMEOUT: it opened the request


def test_an_error_text_that_cannot_be_sent_as_it_is_still_answers_at_once(pair):
    """A service failing with a lone surrogate in its error text answered nothing: its caller
    waited its whole timeout. One too large for the caller's limit likewise."""
    a, b = pair
    b.register("surrogate", lambda args: (_ for _ in ()).throw(SpcError("EXECUTION_FAILED", "bad \ud800 text")))
    b.register("huge", lambda args: (_ for _ in ()).throw(SpcError("EXECUTION_FAILED", "x" * (2 << 20))))
    started = time.monotonic()
    with pytest.raises(SpcError) as info:
        a.call("callee", "surrogate", {}, timeout=30)
    assert info.value.code == "EXECUTION_FAILED" and info.value.message == "bad \ufffd text"
    with pytest.raises(SpcError) as info:
        a.call("callee", "huge", {}, timeout=30)
    assert info.value.code == "INTERNAL_ERROR" and "cannot be sent" in info.value.message
    assert time.monotonic() - started < 25          # answered, not timed out


def test_caller_timeout_and_late_response_is_dropped_and_counted(pair):
    a, _ = pair
    with pytest.raises(SpcError) as info:
        a.call("callee", "sleep", {"seconds": 0.5}, timeout=0.1)
    assert info.value.code == "TIMEOUT" and info.value.unanswered is True  # the caller's own deadline
    wait_until(lambda: a.counters()["lateResponses"] == 1, what="the late response")


def test_call_checks_both_grants_before_writing(root, key):
    with Node(root, key, "a") as a, Node(root, key, "b", allow=["a"]) as b, Node(root, key, "c") as c:
        demo(b)
        with pytest.raises(AccessDeniedError, match="does not allow b"):
            a.call("b", "echo", {})  # a would not accept the response
        with pytest.raises(AccessDeniedError, match="node c does not allow a"):
            a.send("c", "hi")
        assert a.counters()["sealed"] == 0
        for name in ("b", "c"):
            assert os.listdir(os.path.join(root, name, "inbox")) == [] and os.listdir(os.path.join(root, name, "tmp")) == []


def test_service_objects_duplicates_and_async(pair):
    a, b = pair

    class Adder(Service):
        def invoke(self, arguments, caller):
            return {"sum": sum(arguments["values"]), "caller": caller}

    b.register("add", Adder())
    with pytest.raises(ConfigError, match="already registered"):
        b.register("add", Adder())
    futures = [a.call_async("callee", "add", {"values": [i, i]}) for i in range(20)]
    assert [f.result(10)["sum"] for f in futures] == [2 * i for i in range(20)]
    assert futures[0].result()["caller"] == "caller"


def test_confirmed_send_returns_after_the_handler_ran(pair):
    a, b = pair
    handled = []
    b.on_message(lambda m: (time.sleep(0.05), handled.append(m.data)))
    a.send("callee", {"n": 1}, confirm=True)
    assert handled == [{"n": 1}]
    a.send("callee", b"\x00raw", confirm=True)
    assert handled[-1] == b"\x00raw"


def test_a_confirmed_send_whose_acknowledgement_could_not_come_back_is_refused_before_anything(pair):
    """As a call's: the sender that does not allow its target would refuse the ACK; the message
    was sent, handled, and reported "not acknowledged (it may still be handled)"."""
    a, b = pair
    handled = []
    b.on_message(handled.append)
    a.revoke("callee")
    with pytest.raises(AccessDeniedError, match="so its acknowledgement could not come back") as info:
        a.send("callee", {"n": 1}, confirm=True, timeout=2)
    assert info.value.missing == ("caller", "callee")
    assert a.send("callee", {"n": 2}) == 1                  # unconfirmed: nothing has to come back
    wait_until(lambda: handled, 10, "the unconfirmed message")
    assert [m.data for m in handled] == [{"n": 2}]


def test_confirmed_send_reports_a_failing_handler(pair):
    a, b = pair
    b.on_message(lambda m: 1 / 0)
    with pytest.raises(DeliveryError, match="EXECUTION_FAILED"):
        a.send("callee", "boom", confirm=True)


def test_grants_are_published_at_once(pair, root):
    a, b = pair
    registry = Registry(root)
    b.allow("newcomer")
    assert "newcomer" in registry.read("callee").allow
    b.revoke("newcomer", "caller")
    assert registry.read("callee").allow == ()
    # the callee may have started a moment ago: its entry reaches the caller's cache through the watch
    wait_until(lambda: "callee" in a.peers() and "caller" not in a.peers()["callee"].allow,
               what="the registry watch to carry the revoke")
    with pytest.raises(AccessDeniedError):
        a.send("callee", "x")
    assert registry.read("callee").services == tuple(sorted(DEMO_SERVICES))


def test_fabrics_are_published_and_never_affect_delivery(pair, root):
    a, b = pair
    assert Registry(root).read("caller").groups == ("front",)
    assert a.call("callee", "echo", {"ok": 1}) == {"ok": 1}  # different fabrics still talk


def test_per_sender_fifo_with_senders_in_parallel(root, key):
    gate = threading.Event()
    seen = []
    with Node(root, key, "recv", allow=["s1", "s2"]) as r, Node(root, key, "s1", allow=["recv"]) as s1, \
            Node(root, key, "s2", allow=["recv"]) as s2:
        def handler(m):
            if m.sender == "s1" and m.data == 0:
                assert gate.wait(10)  # s1's lane is blocked ...
            seen.append((m.sender, m.data))
        r.on_message(handler)
        for i in range(5):
            s1.send("recv", i)
        for i in range(5):
            s2.send("recv", i)
        wait_until(lambda: [x for x in seen if x[0] == "s2"] == [("s2", i) for i in range(5)], what="s2's messages")
        assert not any(s == "s1" for s, _ in seen)  # ... while s2 went on
        gate.set()
        wait_until(lambda: len(seen) == 10, what="s1's messages")
        assert [d for s, d in seen if s == "s1"] == list(range(5))


def test_traces_journal_and_counters(root, key):
    events = []
    with Node(root, key, "a", allow=["b"], trace=True, heartbeat_seconds=0.2, lease_seconds=5) as a, \
            Node(root, key, "b", allow=["a"], trace=True) as b:
        demo(b)
        a.add_observer(events.append)
        a.call("b", "echo", {})
        a.send("b", "m")
        wait_until(lambda: Registry(root).read("a").extra.get("counters", {}).get("sent") == 2, what="published counters")
    kinds = {(type(e).__name__, getattr(e, "outcome", getattr(e, "status", None))) for e in events}
    assert ("EnvelopeTrace", "sent") in kinds and ("EnvelopeTrace", "accepted") in kinds and ("SpcTrace", "SUCCESS") in kinds
    response = next(e for e in events if isinstance(e, EnvelopeTrace) and e.type == "SPC_RESPONSE")
    assert response.latency_ms > 0 and response.service == "echo" and response.status == "SUCCESS"
    records, bad = read_journal(os.path.join(root, "speed_traces", "a.jsonl"))
    assert bad == 0
    lease = [(r.subject, r.event) for r in records if isinstance(r, LeaseTrace)]
    assert ("a", "registered") in lease and ("b", "observed_join") in lease and ("a", "deregistered") in lease
    env = [r for r in records if isinstance(r, EnvelopeTrace)]
    assert {(r.dir, r.type, r.outcome) for r in env} >= {("out", "SPC_REQUEST", "sent"), ("in", "SPC_RESPONSE", "accepted"),
                                                         ("out", "MESSAGE", "sent")}
    assert all(r.envelope is not None for r in env)
    assert os.stat(os.path.join(root, "speed_traces", "a.jsonl")).st_mode & 0o777 == 0o600
    raw = open(os.path.join(root, "speed_traces", "b.jsonl")).read()
    assert '"m"' not in raw and "echo" in raw  # plaintext never enters a journal; service names do


def test_replayed_and_misdirected_envelopes_are_rejected(root, key):
    accepted, rejected = [], []

    def watch(e):
        if isinstance(e, EnvelopeTrace) and e.dir == "in":
            (accepted if e.outcome == "accepted" else rejected).append(e)
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a"]) as b, \
            Node(root, key, "c", allow=["a"]) as c:
        got = []
        b.on_message(got.append)
        b.add_observer(watch)
        c.add_observer(watch)
        a.send("b", "once", confirm=True)
        original = accepted[0]
        inject(root, "b", original.file, original.envelope)
        wait_until(lambda: rejected, what="the replay to be rejected")
        assert rejected[0].reason in ("replayed_nonce", "replayed_sequence")
        inject(root, "c", original.file, original.envelope)  # copied into another node's inbox
        wait_until(lambda: len(rejected) == 2, what="the copy to be rejected")
        assert rejected[1].reason == "wrong_target" and rejected[1].node == "c"
        assert [m.data for m in got] == ["once"]
        assert b.counters()["rejected"] == {"replayed_nonce": 1} or b.counters()["rejected"] == {"replayed_sequence": 1}


def test_unauthorized_file_is_discarded_unread(root, key):
    rejected = []
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a"]) as b:
        b.add_observer(lambda e: rejected.append(e) if getattr(e, "outcome", "") == "rejected" else None)
        got = []
        b.on_message(got.append)
        a.send("b", "first", confirm=True)
        b.revoke("a")
        sent = []
        a.add_observer(lambda e: sent.append(e) if getattr(e, "outcome", "") == "sent" else None)
        a.allow("b")
        # a forged delivery that skips the outbound check still cannot get in
        forged = "a.00000000.00000000000000000009.00000000.env"
        inject(root, "b", forged, b"\0" * 200)
        wait_until(lambda: rejected, what="the unauthorized file to be discarded")
        assert rejected[0].reason == "unauthorized" and rejected[0].size == 0  # never read
        assert forged not in os.listdir(os.path.join(root, "b", "inbox"))
        assert [m.data for m in got] == ["first"]


def test_lease_loss_is_detected_and_fenced(root, key):
    lost = []
    with Node(root, key, "owner", lease_seconds=1.0, heartbeat_seconds=0.1) as owner:
        owner.on_lease_lost(lost.append)
        registry = Registry(root)
        with registry.locked():  # another instance takes the name over
            registry._write(registry.read("owner").__class__(name="owner", id="00000000-0000-4000-8000-000000000001",
                                                             last_heartbeat=time.time(), pid=1))
        wait_until(lambda: lost, what="the owner to notice")
        assert owner.state == "lost"
        with pytest.raises(LeaseLostError):
            owner.send("owner", "x")
    assert Registry(root).read("owner").id.endswith("0001")  # the loser did not deregister the new owner


def test_leave_is_observed_and_entry_removed(root, key):
    events = []
    with Node(root, key, "watcher", allow=["leaver"]) as w:
        w.add_observer(events.append)
        with Node(root, key, "leaver", allow=["watcher"]):
            wait_until(lambda: ("leaver", "observed_join") in [(e.subject, e.event) for e in events
                                                                 if isinstance(e, LeaseTrace)], what="join")
        wait_until(lambda: ("leaver", "observed_leave") in [(e.subject, e.event) for e in events
                                                              if isinstance(e, LeaseTrace)], what="leave")
        assert any(isinstance(e, EnvelopeTrace) and e.type == "EVENT" and e.outcome == "accepted" for e in events)
        assert Registry(root).read("leaver") is None


def test_hostile_inbox_entries_are_rejected_and_the_node_goes_on(root, key, workdir):
    rejected = []
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a"]) as b:
        b.add_observer(lambda e: rejected.append(e) if getattr(e, "outcome", "") == "rejected" else None)
        inbox = os.path.join(root, "b", "inbox")
        secret = os.path.join(workdir, "secret")
        with open(secret, "w") as f:
            f.write("top secret")
        os.symlink(secret, os.path.join(inbox, "a.00000000.00000000000000000001.00000000.env"))
        os.mkfifo(os.path.join(inbox, "a.00000000.00000000000000000002.00000000.env"))
        os.mkdir(os.path.join(inbox, "a.00000000.00000000000000000003.00000000.env"))
        linked = os.path.join(workdir, "linked")
        with open(linked, "wb") as f:
            f.write(b"\0" * 100)
        os.link(linked, os.path.join(inbox, "a.00000000.00000000000000000004.00000000.env"))
        with open(os.path.join(inbox, "not-an-envelope"), "w") as f:
            f.write("x")
        wait_until(lambda: len(rejected) >= 5, timeout=15, what="five rejections")
        assert sorted(e.reason for e in rejected) == ["bad_file"] * 4 + ["unauthorized"]
        assert os.listdir(inbox) == [] and open(secret).read() == "top secret" and os.path.exists(linked)
        a.send("b", "still works")
        assert b.receive(timeout=10).data == "still works"


def test_orphaned_temporaries_are_swept(root, key):
    with Node(root, key, "n", orphan_seconds=0.5) as n:
        orphan = os.path.join(root, "n", "tmp", "x.00000000.00000000000000000001.00000000.env")
        with open(orphan, "wb") as f:
            f.write(b"partial")
        os.utime(orphan, (time.time() - 10, time.time() - 10))
        wait_until(lambda: not os.path.exists(orphan), what="the orphan to be swept")


def test_a_cancelled_call_does_not_break_reception(pair):
    a, _ = pair
    future = a.call_async("callee", "sleep", {"seconds": 0.3})
    assert future.cancel()  # the caller gives up before the response arrives
    wait_until(lambda: a.counters()["lateResponses"] == 1, what="the response to arrive after the cancel")
    assert a.call("callee", "echo", {"still": "alive"}) == {"still": "alive"}
    assert a.counters().get("protocolErrors", 0) == 0


def test_a_removed_inbox_is_drained_at_intervals_not_in_a_busy_loop(pair, root):
    """After `rm -rf` of its inbox the protocol thread used to scan the old directory in a tight loop
    (a full core) for almost OLD_INBOX_SECONDS; it looks every quarter second, and receives from the
    new inbox as before."""
    a, b = pair
    inbox = b.receiver.inbox
    looks = []
    drain_old = inbox.drain_old

    def counted(*args, **kwargs):
        looks.append(time.monotonic())
        return drain_old(*args, **kwargs)

    inbox.drain_old = counted
    shutil.rmtree(os.path.join(root, "callee", "inbox"))
    # a look at least a second after the first one: the old inbox is still drained then (5 s)
    wait_until(lambda: looks and looks[-1] - looks[0] >= 1.0, what="the old inbox to be looked at for a second")
    first_second = [t for t in looks if t - looks[0] < 1.0]
    assert len(first_second) <= 10, f"{len(first_second)} looks at the old inbox in one second"
    assert a.call("callee", "echo", {"x": 1}, timeout=10) == {"x": 1}  # the new inbox receives
