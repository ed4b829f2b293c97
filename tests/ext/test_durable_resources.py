"""The durable extension at the limits of its process: a ledger that cannot grow (`ulimit -f`),
few descriptors (`ulimit -n`) and many senders. Real `speed node` processes, real files."""
from __future__ import annotations

import json
import os
import resource
import signal
from contextlib import ExitStack

from speed_runtime import Node, load_key
from speed_runtime.ext.durable_store import verify_receipts

from benchmarks.durable_red_team import ledger_descriptors

from ..helpers.wait import wait_until
from .test_durable import base, dkey, dprocs, droot, lines, speed  # noqa: F401 (fixtures)


def limited(resource_id: int, value: int):
    """A preexec_fn: the child runs under `ulimit` `value`; SIGXFSZ is ignored so that a write
    beyond the file-size limit returns EFBIG (what a node must survive) instead of killing it."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource_id, (value, value))
    return apply


def entry_counters(root: str, name: str) -> dict:
    with open(os.path.join(root, "speed_registry", f"{name}.node")) as f:
        return json.load(f)["counters"]


def test_a_ledger_that_cannot_grow_acknowledges_nothing_torn_and_says_so(droot, dkey, dprocs):
    rx = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"],
                      preexec_fn=limited(resource.RLIMIT_FSIZE, 16 << 10))      # ulimit -f 16
    ledger = os.path.join(droot, "rx", "durable", "ledger", "tx.log")
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=0.2) as tx:
        for n in range(100):
            tx.send("rx", n, durable=True)
        wait_until(lambda: any("cannot store durable receipts for tx" in line for line in rx.stderr), 60,
                   "the store failure on rx's stderr")
        line = next(line for line in rx.stderr if "cannot store durable receipts for tx" in line)
        assert "File too large" in line and str(ledger) in line
        wait_until(lambda: entry_counters(droot, "rx")["durableStoreErrors"] > 0, 20, "the counter")
        waiting = {i["id"] for i in tx.extension("durable").outbox_items()}
        assert waiting                                                # not acknowledged: still in the outbox
        rx.stop()
        with open(ledger, "rb") as f:
            records = [json.loads(r) for r in f.read().splitlines()]   # every record whole
        receipted = {r["receipt"]["id"] for r in records if "receipt" in r}
        cut = {r["claim"]["id"] for r in records if "claim" in r} - receipted   # handlers that ran, unreceipted
        assert len(receipted) == 100 - len(waiting) and len(cut) <= 1
        first = lines(rx, len(receipted) + len(cut))
        result = speed("receipts", "rx", "--dir", droot, "--key", dkey)
        assert result.returncode == 0, result.stdout
        again = dprocs.start("rx", allow=["tx"], echo=True, extra=["--durable"])   # the limit lifted
        wait_until(lambda: not tx.extension("durable").outbox_items(), 60, "every receipt")
    runs: dict[int, list[bool]] = {}
    for m in first + lines(again, len(waiting)):
        runs.setdefault(m["data"], []).append(m["redelivered"])
    assert sorted(runs) == list(range(100))                              # none lost
    assert all(len(flags) == 1 or all(flags[1:]) for flags in runs.values()), runs   # a rerun only marked
    reports = verify_receipts(droot, load_key(dkey).raw, "rx")
    assert len(reports) == 2 and all(r.ok and r.count == 100 for _, r in reports), reports


def test_ten_times_more_durable_senders_than_open_ledgers_under_a_low_descriptor_limit(droot, dkey, dprocs):
    senders = [f"s{i:02d}" for i in range(40)]
    rx = dprocs.start_scripted("rx", allow=senders, options={"durable": True, "durable_open_ledgers": 4},
                               preexec_fn=limited(resource.RLIMIT_NOFILE, 32))  # ulimit -n 32
    pid = rx.proc.pid
    most = 0
    for round_ in range(2):                       # the second round reopens ledgers closed in the first
        for name in senders:
            with Node(droot, dkey, name, allow=["rx"], durable=True) as tx:
                assert tx.send("rx", [name, round_], durable=True, confirm=True, timeout=30) == round_ + 1
            most = max(most, len(ledger_descriptors(pid)))
    assert most <= 4 + 1                           # the limit, and one opened before the next is closed
    got = [tuple(m["data"]) for m in lines(rx, 80)]
    assert sorted(got) == sorted((name, r) for name in senders for r in (0, 1))
    assert rx.proc.poll() is None and not any("Too many open files" in line for line in rx.stderr)
    reports = verify_receipts(droot, load_key(dkey).raw, "rx")
    assert len(reports) == 80 and all(r.ok and r.count == 2 for _, r in reports)


def test_a_durable_receiver_under_a_low_descriptor_limit_keeps_its_lease_with_many_senders_at_once(
        droot, dkey, dprocs):
    """`ulimit -n 32`, 40 senders at once, the default bound of open ledgers (32): beside its own
    descriptors, 32 ledgers and its receipt targets took the receiver past its limit ("registry
    thread: OSError: [Errno 24] Too many open files"), it lost its lease and stopped. Its open
    ledgers are fewer under a low limit now (an eighth of it, as the targets' directories)."""
    senders = [f"c{i:02d}" for i in range(40)]
    rx = dprocs.start("rx", allow=senders, echo=True, extra=["--durable"],
                      preexec_fn=limited(resource.RLIMIT_NOFILE, 32))     # ulimit -n 32
    pid, most = rx.proc.pid, [0, 0]
    with ExitStack() as started:
        nodes = [started.enter_context(Node(droot, dkey, name, allow=["rx"], durable=True)) for name in senders]
        for node in nodes:
            for n in range(3):
                node.send("rx", [node.name, n], durable=True)

        def done() -> bool:
            most[0] = max(most[0], len(ledger_descriptors(pid)))
            most[1] = max(most[1], len(os.listdir(f"/proc/{pid}/fd")))
            return not any(node.extension("durable").outbox_items() for node in nodes)
        wait_until(done, 120, "every durable message receipted")
    assert sorted(tuple(m["data"]) for m in lines(rx, 120)) == sorted((s, n) for s in senders for n in range(3))
    assert rx.proc.poll() is None and most[0] <= 32 // 8 + 1 and most[1] < 32, most
    assert not any("Too many open files" in line or "lease" in line for line in rx.stderr), rx.stderr


def test_the_speed_command_bounds_a_receivers_open_ledgers_with_an_option(droot, dkey, dprocs):
    """`speed node --durable-open-ledgers N`: the bound was a Node option only (issue 26)."""
    senders = [f"s{i}" for i in range(6)]
    rx = dprocs.start("rx", allow=senders, echo=True, extra=["--durable", "--durable-open-ledgers", "2"])
    most = 0
    for name in senders:
        with Node(droot, dkey, name, allow=["rx"], durable=True) as tx:
            assert tx.send("rx", name, durable=True, confirm=True, timeout=30) == 1
        most = max(most, len(ledger_descriptors(rx.proc.pid)))
    assert most <= 2 + 1                           # the bound, and one opened before the next is closed
    assert sorted(m["data"] for m in lines(rx, 6)) == senders
