"""A receiver's resident memory stays within its documented bounds whatever senders send
(docs/PROTOCOL.md reading 24 and "### chunks", Memory): what it holds is counted as what it costs
decoded (core/payloads.json_cost), so the bounds hold as RSS — read from /proc/PID/status of a
real `speed node` process, against values chosen to cost the most per byte (`[{},{},…]`).
And running out of memory is the receiver's own problem, never held against the sender."""
from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time

import pytest

from speed_runtime import Node
from speed_runtime.core import payloads
from speed_runtime.node.config import NodeConfig

from ..helpers.processes import REPO, SPEED, _pump
from ..helpers.wait import wait_until

MiB = 1 << 20
CFG = NodeConfig()
SLACK = 16 * MiB   # what a node's own life adds (journal, heartbeats, one envelope being read and decoded)


def status(pid: int, field: str) -> int:
    """A field of /proc/PID/status, in bytes (VmRSS, VmHWM, VmSize)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def journal(root: str, name: str) -> list[dict]:
    try:
        with open(os.path.join(root, "speed_traces", f"{name}.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def records(root: str, name: str, kind: str, **match) -> list[dict]:
    return [r for r in journal(root, name) if r.get("kind", "envelope") == kind
            and all(r.get(k) == v for k, v in match.items())]


def wait_record(root: str, name: str, kind: str, timeout: float = 60.0, **match) -> dict:
    return wait_until(lambda: next(iter(records(root, name, kind, **match)), None), timeout,
                      f"a {kind} record {match} in {name}'s journal", interval=0.1)


def objects(size: int) -> list:
    """A JSON value of about `size` bytes of text that costs the most per byte decoded: [{},{},…]."""
    return [{}] * (size // 3)


def shown_for(seconds: float, condition) -> None:
    """Give what must not happen `seconds` to happen (the unbounded reader it guards against takes
    everything at once), then let the test look."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.1)


@contextlib.contextmanager
def blocked_receiver(root: str, key_path: str, senders: list[str], *extra: str):
    """A `speed node` that prints each MESSAGE it handles to a pipe nobody reads until the test
    calls `release()`: its handler blocks on the first, and what arrives behind it waits in its
    read-ahead (or in its inbox)."""
    cmd = SPEED + ["node", "--dir", root, "--key", key_path, "--name", "r", "--trace", "--echo-messages", *extra]
    for name in senders:
        cmd += ["--allow", name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    errors: list[bytes] = []
    threading.Thread(target=_pump, args=(proc.stderr, errors.append), daemon=True).start()
    printed: list[bytes] = []

    def release() -> list[bytes]:
        threading.Thread(target=_pump, args=(proc.stdout, printed.append), daemon=True).start()
        return printed
    try:
        line = proc.stdout.readline()
        assert line.startswith(b"ready r id="), (line, b"".join(errors)[-2000:])
        proc.release = release
        yield proc
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ chunks (issue 26, finding 7)
def test_a_chunked_body_is_reserved_at_what_it_costs_decoded(procs, root, key):
    """Bytes are assembled in one buffer (not the pieces and then their join); a JSON body is
    admitted only if what it costs decoded fits the reassembly budget, else voided with a reason,
    before it is decoded. Before: a 16 MiB `[{},…]` body took a receiver from 25 to 449 MiB."""
    r = procs.start("r", allow=["s"], trace=True, extra=["--feature", "chunks"])
    pid = r.proc.pid
    start = status(pid, "VmRSS")
    with Node(root, key, "s", allow=["r"], features=["chunks"], linger_seconds=0) as s:
        s.send("r", os.urandom(32 * MiB))
        wait_record(root, "r", "message", event="delivered", size=32 * MiB)
        assert status(pid, "VmHWM") - start <= 32 * MiB + 2 * CFG.chunk_size + SLACK  # before: about twice the size

        fits = objects(2 * MiB)
        cost = payloads.decoded_cost(payloads.encode_payload(fits))
        assert cost <= CFG.reassembly_bytes_per_sender
        s.send("r", fits)
        wait_record(root, "r", "message", event="delivered", size=len(payloads.encode_payload(fits)))
        assert status(pid, "VmHWM") - start <= max(cost, 32 * MiB + 2 * CFG.chunk_size) + SLACK

        s.send("r", objects(16 * MiB))  # costs about 45 times its size decoded: never fits 128 MiB
        voided = wait_record(root, "r", "message", event="voided")
        assert voided["reason"] == "message_too_large" and "memory" in voided["detail"]
        assert status(pid, "VmHWM") - start <= max(cost, 32 * MiB + 2 * CFG.chunk_size) + SLACK
    assert not records(root, "r", "envelope", reason="bad_payload")


def test_running_out_of_memory_while_decoding_is_not_the_senders_fault(procs, root, key):
    """A receiver whose budgets are larger than its address space allows (here `ulimit -v`) fails
    to decode a message: it voids it as `reassembly_full` (never `bad_payload`), says so in a
    health record, charges the sender no threat points, and the reliable sender's retransmission
    is delivered once memory allows. Before: `bad_payload` and 20 threat points."""
    r = procs.start_scripted("r", allow=["s"], options={
        "features": ["chunks", "reliable", "quota"], "trace": True,
        "reassembly_bytes": 2048 * MiB, "reassembly_bytes_per_sender": 2048 * MiB})
    pid = r.proc.pid
    limit = status(pid, "VmSize") + 160 * MiB  # far less than decoding the value takes (about 400 MiB)
    resource.prlimit(pid, resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    value = objects(16 * MiB)
    with Node(root, key, "s", allow=["r"], features=["chunks", "reliable"], ack_timeout=1.0,
              max_retransmission_interval=2.0, max_retransmissions=30) as s:
        sent = s.send("r", value, reliable=True)
        voided = wait_record(root, "r", "message", event="voided")
        assert voided["reason"] == "reassembly_full" and "out of memory" in voided["detail"], voided
        assert wait_record(root, "r", "health", event="out_of_memory")
        resource.prlimit(pid, resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        delivered = sent.result(120)
        assert delivered.transmissions >= 2
        assert len(json.loads(r.read_line(60))["data"]) == len(value)
    assert not records(root, "r", "envelope", reason="bad_payload")
    assert not records(root, "r", "threat", peer="s"), "no threat points for the receiver's own problem"


def test_a_message_whose_handler_can_get_no_thread_waits_and_is_never_judged_a_replay(procs, root, key):
    """Under `ulimit -v` no handler thread can be started: the accepted message stays in the inbox,
    held (never judged again: it would be a replay of its own sender's envelope, 30 threat
    points, removed unread), and is handled once a thread can be had. Before: rejected as
    `replayed_nonce`, its sender charged 30 points, the message lost."""
    r = procs.start_scripted("r", allow=["s"], options={"features": ["quota"], "trace": True})
    pid = r.proc.pid
    inbox = os.path.join(root, "r", "inbox")
    resource.prlimit(pid, resource.RLIMIT_AS, (status(pid, "VmSize") + 4 * MiB, resource.RLIM_INFINITY))
    with Node(root, key, "s", allow=["r"], linger_seconds=0) as s:
        s.send("r", {"n": 1})
        wait_record(root, "r", "envelope", outcome="accepted", type="MESSAGE")
        shown_for(3, lambda: not os.listdir(inbox) or records(root, "r", "envelope", outcome="rejected"))
        assert os.listdir(inbox) and r.lines.empty(), "accepted, waiting for a thread"
        resource.prlimit(pid, resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert json.loads(r.read_line(30))["data"] == {"n": 1}
    assert not records(root, "r", "envelope", outcome="rejected")
    assert not records(root, "r", "threat", peer="s")


def test_an_envelope_whose_decoding_runs_out_of_memory_stays_and_is_judged_again(root, key):
    """A MemoryError while an envelope is decoded (before its sequence and nonce are recorded): the
    file stays in the inbox, unjudged, and is judged again (reading 24): handled once, never
    rejected. The fault is injected in the decoder of a real node."""
    failures = []
    with Node(root, key, "r", allow=["s"], trace=True, rescan_seconds=0.2) as r, \
            Node(root, key, "s", allow=["r"], linger_seconds=0) as s:
        got = []
        r.on_message(got.append)
        decode = r.receiver.inbound.decode

        def once_out_of_memory(plaintext, etype, flags):
            if not failures:
                failures.append(etype)
                raise MemoryError
            return decode(plaintext, etype, flags)
        r.receiver.inbound.decode = once_out_of_memory
        s.send("r", {"n": 1})
        wait_until(lambda: got, 30, "the message handled after the failure")
        r.journal.flush()
        assert failures and [m.data for m in got] == [{"n": 1}]
        assert r.counters()["protocolErrors"] == 1 and not r.counters()["rejected"]
    assert not records(root, "r", "envelope", outcome="rejected")


# ------------------------------------------------------------------ read-ahead (issue 26, finding 8)
@pytest.mark.parametrize("senders,each", [(1, 40), (8, 12)])
def test_a_blocked_handler_holds_what_the_read_ahead_bound_allows_as_rss(root, key, key_path, senders, each):
    """Envelopes of ~1 MiB of `[{},…]` (about 25 MiB each decoded) behind a blocked handler: the
    receiver takes files while what it holds costs less than `read_ahead_bytes` (and a sender's
    less than `read_ahead_bytes_per_sender`), so its resident memory grows by at most
    read_ahead_bytes + the cost of one envelope. Then every message is handled. Before: one
    sender grew it from 25 to 803 MiB, eight to 2,093 MiB."""
    names = [f"s{i}" for i in range(senders)]
    value = objects(CFG.max_payload - 1500)
    one = payloads.decoded_cost(payloads.encode_payload(payloads.message("s0", "r", value)))
    with blocked_receiver(root, key_path, names) as r:
        start = status(r.pid, "VmRSS")
        nodes = [Node(root, key, name, allow=["r"], linger_seconds=0) for name in names]
        try:
            for node in nodes:
                node.start()
            threads = [threading.Thread(target=lambda n=node: [n.send("r", value) for _ in range(each)])
                       for node in nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            taken = lambda: len(records(root, "r", "envelope", outcome="accepted", type="MESSAGE"))
            shown_for(10, lambda: taken() > CFG.read_ahead)  # what a reader bounded in count only takes at once
            grown = status(r.pid, "VmHWM") - start
            assert grown <= CFG.read_ahead_bytes + one + SLACK, \
                f"{grown / MiB:.0f} MiB held behind a blocked handler ({taken()} envelopes taken)"
            printed = r.release()
            wait_until(lambda: len(printed) >= senders * each, 300, "every message handled", interval=0.2)
        finally:
            for node in nodes:
                node.close()
    assert sorted(json.loads(line)["from"] for line in printed) == sorted(names * each)


def test_spc_requests_waiting_for_a_worker_are_bounded_as_rss(procs, root, key):
    """Requests with ~1 MiB of `[{},…]` in their arguments to a service whose workers are busy:
    the running ones count against the read-ahead, the waiting ones against `spc_waiting_bytes`
    (beyond, a request is answered TIMEOUT at once and never run). Before: 4 running and 16
    waiting held about 500 MiB."""
    r = procs.start("r", allow=[f"c{i}" for i in range(4)], trace=True, services=["sleep"])
    start = status(r.proc.pid, "VmRSS")
    pad = objects(CFG.max_payload - 1500)
    one = payloads.decoded_cost(payloads.encode_payload({"seconds": 5, "pad": pad}))
    callers = [Node(root, key, f"c{i}", allow=["r"], linger_seconds=0) for i in range(4)]
    try:
        futures = []
        for caller in callers:
            caller.start()
            futures += [caller.call_async("r", "sleep", {"seconds": 5, "pad": pad}, timeout=60) for _ in range(5)]
        taken = lambda: len(records(root, "r", "envelope", outcome="accepted", type="SPC_REQUEST"))
        shown_for(10, lambda: taken() >= 20)
        grown = status(r.proc.pid, "VmHWM") - start
        assert grown <= CFG.read_ahead_bytes + CFG.spc_waiting_bytes + one + SLACK, \
            f"{grown / MiB:.0f} MiB held by {taken()} requests"
        answers = [f.exception(120) for f in futures]
        assert all(a is None or getattr(a, "code", "") == "TIMEOUT" for a in answers), answers
        assert any(a is None for a in answers), "the service ran requests"
    finally:
        for caller in callers:
            caller.close()
