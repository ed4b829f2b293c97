"""A receiver's ledger (`ROOT/<rx>/durable/ledger/<sender>.log`) removed, or replaced by a directory
or a symbolic link, while the node holds it open: the next message is not acknowledged, the failure
is a store error like any (counter, health record, a line), the sender is refused until the node is
restarted, and after the operator's repair nothing is handled twice or lost. In-process nodes on a
disk file system (the fixtures of test_durable.py)."""
from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from speed_runtime import Node, load_key
from speed_runtime.ext import durable
from speed_runtime.ext.durable_store import verify_receipts

from ..helpers.wait import wait_until
from .test_durable import base, dkey, droot  # noqa: F401 (fixtures)

HOW = ["removed", "directory", "symlink"]


def replace(ledger: str, how: str, outside: str) -> None:
    os.unlink(ledger)
    if how == "directory":
        os.mkdir(ledger)
    elif how == "symlink":
        os.symlink(outside, ledger)


def clear(ledger: str, how: str) -> None:
    """The operator takes away what was put in the ledger's place."""
    if how == "directory":
        os.rmdir(ledger)
    elif how == "symlink":
        os.unlink(ledger)


def receiver(droot: str, dkey: str, handled: list, health: list) -> Node:
    rx = Node(droot, dkey, "rx", allow=["tx"], durable=True)
    rx.add_observer(lambda e: health.append(e) if getattr(e, "kind", "") == "health" else None)
    rx.on_message(lambda m: handled.append((m.data, m.redelivered)))
    return rx.start()


def refused_then_restarted(droot: str, dkey: str, base: str, how: str, caplog, restore: bool) -> list:
    ledger = os.path.join(droot, "rx", "durable", "ledger", "tx.log")
    outside = os.path.join(base, "another-file")
    with open(outside, "w") as f:
        f.write("kept\n")
    handled: list = []
    health: list = []
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=0.2) as tx:
        rx = receiver(droot, dkey, handled, health)
        try:
            assert tx.send("rx", "first", durable=True, confirm=True, timeout=20) == 1
            replace(ledger, how, outside)
            with caplog.at_level("WARNING", logger="speed_runtime"):
                second = tx.send("rx", "second", durable=True)
                wait_until(lambda: rx.counters().get("durableStoreErrors", 0) >= 2, 20,
                           "the store failure counted (the first copy and the one delivered again)")
            failures = [e for e in health if e.event == "durable_store_failed"]
            assert len(failures) == 1                                 # once a minute, as any store error
            detail = failures[0].detail
            assert f"{ledger} was removed or replaced" in detail and "refused until the node is restarted" in detail
            assert any(detail in r.getMessage() for r in caplog.records)   # the line on stderr
            # no receipt: the message waits in the sender's outbox; its handler never ran
            assert [i["id"] for i in tx.extension("durable").outbox_items()] == [second]
            assert handled == [("first", False)]
            assert open(outside).read() == "kept\n"                    # a link is never followed
            held = re.search(r"/proc/\d+/fd/\d+", detail).group(0)
            clear(ledger, how)
            if restore:                               # the ledger copied back from the descriptor
                shutil.copyfile(held, ledger)
                os.chmod(ledger, 0o600)
            time.sleep(0.5)                           # refused until the restart, whatever is there now
            assert handled == [("first", False)] and tx.extension("durable").outbox_items()
        finally:
            rx.close()
        rx = receiver(droot, dkey, handled, health)                   # the operator restarts the node
        try:
            wait_until(lambda: not tx.extension("durable").outbox_items(), 30, "the second message's receipt")
        finally:
            rx.close()
    assert handled == [("first", False), ("second", False)]            # none twice, none lost
    assert open(outside).read() == "kept\n"
    return verify_receipts(droot, load_key(dkey).raw, "rx")


@pytest.mark.parametrize("how", HOW)
def test_a_ledger_replaced_while_open_is_refused_aloud_and_kept_whole_when_copied_back(droot, dkey, base, how,
                                                                                     caplog):
    reports = dict(refused_then_restarted(droot, dkey, base, how, caplog, restore=True))
    assert reports["ledger of rx"].ok and reports["ledger of rx"].count == 2
    assert reports["stored by tx"].ok and reports["stored by tx"].count == 2


@pytest.mark.parametrize("how", HOW)
def test_a_ledger_replaced_while_open_then_cleared_starts_again_after_the_restart_nothing_twice(droot, dkey, base,
                                                                                               how, caplog):
    reports = dict(refused_then_restarted(droot, dkey, base, how, caplog, restore=False))
    # a new ledger: its chain starts again (the operator was told), the floor from the sender's base
    assert reports["ledger of rx"].ok and reports["ledger of rx"].count == 1
    assert not reports["stored by tx"].ok and reports["stored by tx"].first_break == 1


@pytest.mark.parametrize("damage", [b"\0", b"x"])
def test_a_ledger_damaged_in_its_middle_is_refused_aloud_and_taken_again_once_mended(droot, dkey, base, damage,
                                                                                    caplog, monkeypatch):
    """A line in the middle of a ledger overwritten (a stray write, a bad block: NUL bytes, or
    bytes that are no record) was skipped without a word: the floor and receipts it held were
    lost, and messages receipted there could be handled again. Only a torn last line is what a
    crash leaves (cut when the ledger is opened); any other line that is no record is damage,
    refused aloud: the sender's messages wait in its outbox until the operator mends the ledger."""
    ledger = os.path.join(droot, "rx", "durable", "ledger", "tx.log")
    handled: list = []
    health: list = []
    with Node(droot, dkey, "tx", allow=["rx"], durable=True, durable_retry_seconds=0.2) as tx:
        rx = receiver(droot, dkey, handled, health)
        try:
            for n in range(4):
                assert tx.send("rx", n, durable=True, confirm=True, timeout=20) == n + 1
        finally:
            rx.close()
        with open(ledger, "rb") as f:
            lines = f.read().split(b"\n")
        lines[2] = damage * len(lines[2])                                # the third line, its length kept
        with open(ledger, "wb") as f:
            f.write(b"\n".join(lines))
        reads: list[str] = []  # the damaged ledger is read once, not again for every copy retried
        real = durable.replay_ledger
        monkeypatch.setattr(durable, "replay_ledger",
                            lambda lines, *args: reads.append(args[1]) or real(lines, *args))
        rx = receiver(droot, dkey, handled, health)
        try:
            with caplog.at_level("WARNING", logger="speed_runtime"):
                after = tx.send("rx", "after", durable=True)
                wait_until(lambda: any(e.event == "durable_store_failed" for e in health), 20, "the store failure")
                wait_until(lambda: rx.counters()["durableStoreErrors"] >= 3, 20, "three copies refused")
            assert reads == ["tx"]
            detail = next(e.detail for e in health if e.event == "durable_store_failed")
            assert f"{ledger} is damaged: line 3 is not a record this node wrote" in detail, detail
            assert any(detail in r.getMessage() for r in caplog.records)   # the line on stderr
            assert [i["id"] for i in tx.extension("durable").outbox_items()] == [after]
            assert [d for d, _ in handled] == [0, 1, 2, 3]
        finally:
            rx.close()
        os.unlink(ledger)                                 # mended: the operator removed it
        rx = receiver(droot, dkey, handled, health)
        try:
            wait_until(lambda: not tx.extension("durable").outbox_items(), 30, "the message's receipt")
        finally:
            rx.close()
    assert [d for d, _ in handled] == [0, 1, 2, 3, "after"]
