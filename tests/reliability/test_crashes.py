"""Cases 8 and 9: senders kill -9'd at random points while sending (thousands of times), and a
receiver kill -9'd under load and restarted. tests/runtime/test_processes.py kills an idle node
once; these kill in the middle of writes, renames, registrations and receptions."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from speed_runtime import CalleeGoneError, EnvelopeTrace, Node, SpcError
from speed_runtime.core.envelope import parse_filename
from speed_runtime.journal import read_journal

from ..helpers.wait import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run_crasher(root, key_path, mode, kills, budget_s, max_delay_ms, seed, timeout):
    done = subprocess.run([sys.executable, "-m", "tests.reliability.crasher", root, key_path, "r", mode,
                           str(kills[0]), str(kills[1]), str(budget_s), str(max_delay_ms), str(seed)],
                          capture_output=True, text=True,
                          cwd=REPO, env=ENV, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_senders_killed_at_random_points_never_deliver_a_partial_envelope(root, key, key_path):
    got, rejected = [], []
    with Node(root, key, "r", allow=["crasher", "victim"], orphan_seconds=1.0) as r:
        r.on_message(lambda m: got.append((m.sender, m.seq, m.data)))
        r.add_observer(lambda e: rejected.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "rejected"
                       else None)
        # at least 1,000 and up to 2,000 kills mid-delivery (as many as fit in 30 s), then 50 full nodes
        fast = run_crasher(root, key_path, "deliver", (1000, 2000), 30, 8, 1, timeout=600)
        full = run_crasher(root, key_path, "node", (50, 50), 0, 120, 2, timeout=600)
        inbox, tmp = os.path.join(root, "r", "inbox"), os.path.join(root, "r", "tmp")
        registry_dir = os.path.join(root, "speed_registry")
        leftovers = [n for n in os.listdir(registry_dir) if n.endswith(".tmp")]  # victims killed mid-renewal
        planted = os.path.join(registry_dir, ".victim.0123456789ab.tmp")  # and one for certain
        with open(planted, "w") as f:
            f.write('{"name": "vic')
        wait_until(lambda: not os.listdir(inbox), timeout=120, interval=0.05, what="r to drain its inbox")
        wait_until(lambda: not os.listdir(tmp), timeout=30, interval=0.05, what="the orphaned temporaries to be swept")
        wait_until(lambda: not [n for n in os.listdir(registry_dir) if n.endswith(".tmp")], timeout=30,
                   interval=0.05, what="the orphaned registry temporaries to be swept")
        wait_until(lambda: len(got) == r.counters()["received"], timeout=30, what="the handler to catch up")
    # nothing partial or corrupt was ever read: the only rejections are the dead `victim`
    # instances' leftovers after the next instance took the name over
    assert {e.reason for e in rejected} <= {"unknown_sender"}, sorted({e.reason for e in rejected})
    assert all(e.peer == "victim" for e in rejected)
    per_child = defaultdict(list)
    for sender, seq, data in got:
        assert data["blob"] == "x" * len(data["blob"])
        per_child[(sender, data["i"])].append(data["k"])
    for (sender, i), ks in per_child.items():  # each child's accepted envelopes are a prefix of what it sent
        assert ks == list(range(len(ks))), (sender, i, ks)
    crasher_seqs = [seq for sender, seq, _ in got if sender == "crasher"]
    assert crasher_seqs == sorted(crasher_seqs)
    assert fast["kills"] >= 1000 and full["kills"] == 50
    assert sum(1 for s, _ in per_child if s == "crasher") > 0 and sum(1 for s, _ in per_child if s == "victim") > 0
    assert fast["orphansSeen"] > 0, "no kill landed mid-write: the test did not exercise orphans"
    print(json.dumps({"fast": fast, "full": full, "accepted": len(got), "rejected": len(rejected),
                      "childrenWithDeliveries": len(per_child), "registryTmpLeftovers": len(leftovers)}))


def test_a_receiver_killed_under_load_loses_at_most_what_it_was_handling(procs, root, key):
    """kill -9 of a receiver under a stream of messages: everything in its inbox at the crash (and written
    while it was down) is judged by the next instance with a reason, nothing is handled twice, and what is
    lost is at most what the killed process was handling at that moment: accepted envelopes stay in the
    inbox until their handler starts (§5.5 step 6), so with one sender that is one envelope."""
    first = procs.start("r", allow=["s"], trace=True, echo=True)
    total, stop, errors = 6000, threading.Event(), []
    sent_old, sent_new = [], []  # (n, seq) of each successful send, before and after the first failure
    inbox = os.path.join(root, "r", "inbox")
    with Node(root, key, "s", allow=["r"], linger_seconds=0) as s:
        def pump():
            n = 0
            while not stop.is_set() and n < total:
                try:
                    seq = s.send("r", {"n": n})
                    (sent_new if errors else sent_old).append((n, seq))
                    n += 1
                except Exception as exc:  # noqa: BLE001 - recorded and asserted on below
                    errors.append(repr(exc))
                    stop.wait(0.01)
        sender = threading.Thread(target=pump, name="test-pump")
        sender.start()
        try:
            echoed_old = [json.loads(first.read_line(60)) for _ in range(300)]
            first.proc.kill()  # kill -9 under load
            first.proc.wait()
            # the entry still has lease left, but its process is gone: the sender stops writing at once
            wait_until(lambda: len(errors) >= 3, timeout=60, what="the sender to notice the crash")
            while True:  # what the old instance printed before it died (the pipe is closed: no waiting)
                try:
                    echoed_old.append(json.loads(first.lines.get(timeout=5)))
                except Exception:
                    break
            at_restart = sorted(os.listdir(inbox))
            second = procs.start("r", allow=["s"], trace=True, echo=True)
        finally:
            stop.set()
            sender.join()
        assert errors and all("has exited" in e and "NodeUnavailableError" in e for e in errors), errors[:3]
        for n in range(200):  # the new instance is up: what is sent now is for it
            sent_new.append((f"after {n}", s.send("r", {"n": f"after {n}"})))
        journal = os.path.join(root, "speed_traces", "r.jsonl")
        waiting = {parse_filename(n).sequence for n in at_restart if parse_filename(n)}
        echoed_new, rejected = [], {}

        def judged():
            while True:
                try:
                    echoed_new.append(json.loads(second.lines.get_nowait()))
                except Exception:
                    break
            rejected.clear()
            rejected.update({e.seq: e.reason for e in read_journal(journal)[0]
                             if isinstance(e, EnvelopeTrace) and e.outcome == "rejected" and e.peer == "s"})
            handled = {m["data"]["n"] for m in echoed_new}
            return all(n in handled for n, _ in sent_new) and waiting <= set(rejected)
        try:
            wait_until(judged, timeout=180, interval=0.1, what="the new instance to judge every envelope it found")
        except TimeoutError:
            missing = sorted(waiting - set(rejected))
            raise AssertionError(f"{len(missing)} of {len(waiting)} never judged (first {missing[:5]}); "
                                 f"{len(echoed_new)} of {len(sent_new)} new ones handled, inbox now "
                                 f"{len(os.listdir(inbox))}, stderr {''.join(second.stderr)[-500:]}") from None
    handled_old = [m["data"]["n"] for m in echoed_old]
    handled_new = [m["data"]["n"] for m in echoed_new]
    assert handled_old == sorted(handled_old), "the old instance handled a sender out of order"
    assert [m["seq"] for m in echoed_new] == sorted(m["seq"] for m in echoed_new)
    assert not set(handled_old) & set(handled_new), "an envelope was handed to the application twice"
    assert len(handled_new) == len(set(handled_new)) == len(sent_new)
    # every envelope in the inbox at the crash, or written into it while the node was down, was judged by
    # the new instance with a reason (they name the dead instance: wrong_target, docs/PROTOCOL.md reading 7)
    assert {rejected[q] for q in waiting} <= {"wrong_target"}
    lost = [n for n, seq in sent_old if n not in set(handled_old) and seq not in rejected]
    assert len(lost) <= 1, f"lost {len(lost)} envelopes (at most the one being handled): {lost[:10]}"
    print(json.dumps({"sent": len(sent_old) + len(sent_new), "handledBeforeKill": len(handled_old),
                      "inInboxAtRestart": len(waiting), "rejectedAfterRestart": len(rejected),
                      "handledAfterRestart": len(handled_new), "lostAtKill": len(lost)}))


def _call_in_background(node, target, service, arguments, timeout):
    """Start a call on a thread; returns (its outcome list, the thread)."""
    outcome: list = []

    def run() -> None:
        started = time.monotonic()
        try:
            outcome.append((node.call(target, service, arguments, timeout=timeout), time.monotonic() - started))
        except Exception as exc:  # noqa: BLE001 - the test looks at which one
            outcome.append((exc, time.monotonic() - started))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return outcome, thread


def _wait_taken(caller, root) -> None:
    """Until the call was sent and srv took the request from its inbox (its service runs)."""
    inbox = os.path.join(root, "srv", "inbox")
    wait_until(lambda: caller.counters().get("spcCalls") == 1 and not os.listdir(inbox), what="the call to be taken")


@pytest.mark.parametrize("restart", [False, True], ids=["killed", "killed and restarted"])
def test_a_call_whose_callee_dies_fails_when_it_is_seen_gone_not_at_its_timeout(procs, root, key, restart):
    """A callee kill -9'd in the middle of a call can never answer it (a new instance under its name
    neither: the request was sealed for the old one); the call used to wait out its whole timeout."""
    srv = procs.start("srv", allow=["caller"], services=["sleep"])
    with Node(root, key, "caller", allow=["srv"]) as caller:
        outcome, thread = _call_in_background(caller, "srv", "sleep", {"seconds": 300}, 120.0)
        _wait_taken(caller, root)
        srv.proc.kill()
        srv.proc.wait()
        if restart:
            procs.start("srv", allow=["caller"], services=["sleep"])
        thread.join(60)
        assert outcome, "the call was still waiting 60 s after its callee died"
        error, took = outcome[0]
        assert isinstance(error, CalleeGoneError), error
        assert "stopped before it answered sleep" in str(error) and "may have run" in str(error), str(error)
        assert ("restarted" in error.detail or "has exited" in error.detail) if restart \
            else "has exited" in error.detail, error.detail
        assert took < 60


def test_a_call_whose_callee_leaves_gracefully_still_gets_its_answer(procs, root, key):
    """A leaving callee still takes its inbox and answers: the look for gone callees must not fail
    its calls early."""
    srv = procs.start("srv", allow=["caller"], services=["sleep"])
    with Node(root, key, "caller", allow=["srv"]) as caller:
        outcome, thread = _call_in_background(caller, "srv", "sleep", {"seconds": 3}, 60.0)
        _wait_taken(caller, root)
        srv.signal(signal.SIGTERM)
        thread.join(60)
        result, _ = outcome[0]
        assert not isinstance(result, CalleeGoneError), result
        assert result == {"slept": 3} or (isinstance(result, SpcError) and result.code == "INTERNAL_ERROR"), result
