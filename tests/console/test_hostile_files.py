"""Issue 13 items 11 and 4, the console's part: hostile files in the registry and the journals, and
a stopped process holding the registry lock, met by the real app (Pilot) on real files, with real
`speed node` processes. Every test here failed before the console read through the runtime's
readers (a FIFO crashed a new console and froze a running one; a deeply nested line dropped its
whole pass; a 400 MB line was accumulated whole; a lock holder was never named)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from speed_runtime.fsutil import REGISTRY_DIR, TRACES_DIR

from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.ui.app import make_app

from .conftest import SIZE, run_async, wait_for

# a process that opens a path for writing (O_RDWR: a FIFO's open does not wait for a reader) and
# writes into it, or takes the registry lock; it says so, and keeps it until its stdin closes
HOLD_OPEN = ("import os, sys; fd = os.open(sys.argv[1], os.O_RDWR); os.write(fd, sys.argv[2].encode()) "
             "if sys.argv[2] else None; print('ready', flush=True); sys.stdin.read()")
HOLD_LOCK = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
             "fcntl.lockf(fd, fcntl.LOCK_EX); print('ready', flush=True); sys.stdin.read()")


def holder(code: str, path: Path, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.stdin.close()
    proc.wait(30)
    proc.stdout.close()


def console(root, key_path, tmp_path, **kw):
    return make_app(Path(root), rt.load_key(key_path), paths=Paths(Path(tmp_path) / "config", Path(tmp_path) / "data"),
                    **kw)


def record(seq: int, node: str = "a") -> str:
    return json.dumps({"kind": "envelope", "ts": time.time(), "node": node, "dir": "out", "peer": "b",
                       "type": "MESSAGE", "seq": seq, "size": 100, "outcome": "sent"}) + "\n"


def seqs(app) -> set[int]:
    return {r.seq for r in app.traces.ring}


def plant_fifo(path: Path, data: str = "") -> subprocess.Popen:
    """A FIFO at ``path`` with a writer attached from the moment it appears there (made under
    another name and renamed in), holding ``data`` unread."""
    tmp = path.with_name(f".{path.name}.fifo")
    os.mkfifo(tmp, 0o600)
    writer = holder(HOLD_OPEN, tmp, data)
    os.rename(tmp, path)
    return writer


@run_async
async def test_fifos_in_the_registry_neither_freeze_a_running_console_nor_crash_a_new_one(procs, tmp_path):
    lease = 4.0
    procs.start("alive", lease=lease, heartbeat=1)
    reg = Path(procs.root) / REGISTRY_DIR
    # an empty one, and one whose writer fed it the entry of a live node, as a forger would
    forged = json.dumps({"name": "forged", "id": "99999999-9999-4999-8999-999999999999", "pid": os.getpid(),
                         "host": "elsewhere", "lastHeartbeat": time.time() + 3600, "leaseSeconds": 86400})
    app = console(procs.root, procs.key_path, tmp_path)
    writers = []
    async with app.run_test(size=SIZE) as pilot:
        try:
            rows = app.registry.by_name
            await wait_for(pilot, lambda: rows().get("alive") is not None and rows()["alive"].status == "online",
                           what="alive online")
            writers = [plant_fifo(reg / "evil.node"), plant_fifo(reg / "forged.node", forged)]
            planted = time.time()
            # the registry view keeps moving: a heartbeat written a whole lease after the FIFOs came
            await wait_for(pilot, lambda: rows()["alive"].raw["lastHeartbeat"] > planted + lease
                           and rows()["alive"].status == "online", what="alive renewed a lease later, and online")
            for name in ("evil", "forged"):
                await wait_for(pilot, lambda: rows().get(name) is not None
                               and "not a regular file" in (rows()[name].error or ""), what=f"{name} reported")
            # a console that starts with the FIFOs (and their writers) already there
            second = console(procs.root, procs.key_path, tmp_path / "second")
            async with second.run_test(size=SIZE) as pilot2:
                await wait_for(pilot2, lambda: {"alive", "evil", "forged"} <= set(second.registry.by_name()),
                               what="all listed")
                assert second.registry.by_name()["alive"].status == "online"
                assert second.registry.by_name()["forged"].status == "stale"
                await pilot2.press("4")  # and it answers keys
                assert second.active_view() == "traces"
            # never read: what the forger wrote is still in its FIFO
            fd = os.open(reg / "forged.node", os.O_RDONLY | os.O_NONBLOCK)
            try:
                assert os.read(fd, 65536).decode() == forged
            finally:
                os.close(fd)
        finally:
            for w in writers:
                release(w)


@run_async
async def test_deeply_nested_and_endless_journal_lines_are_one_malformed_line_each(tmp_path):
    root = tmp_path / "env"
    (root / TRACES_DIR).mkdir(parents=True, mode=0o700)
    (root / REGISTRY_DIR).mkdir(mode=0o700)
    os.chmod(root, 0o700)
    key_path = rt.generate_key_file(tmp_path / "speed.key")
    journal = root / TRACES_DIR / "a.jsonl"
    journal.write_text(record(1))
    app = console(root, key_path, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: seqs(app) == {1}, what="the first record")
        # one pass: a valid record, 100,000 '[' (deeper than any JSON parser recurses), a valid record
        with open(journal, "a") as fh:
            fh.write(record(2) + "[" * 100_000 + "\n" + record(3))
        await wait_for(pilot, lambda: seqs(app) == {1, 2, 3} and app.traces.bad_lines == 1,
                       what="both records of the pass, the nested line counted once")
        await pilot.press("4")
        await wait_for(pilot, lambda: "1 unreadable journal lines skipped"
                       in str(app.view_widget("traces").query_one("#traces-status").render()), what="status line")


@run_async
async def test_a_400_mb_line_without_newline_costs_bounded_memory_and_is_one_malformed_line(tmp_path):
    root = tmp_path / "env"
    (root / TRACES_DIR).mkdir(parents=True, mode=0o700)
    (root / REGISTRY_DIR).mkdir(mode=0o700)
    os.chmod(root, 0o700)
    key_path = rt.generate_key_file(tmp_path / "speed.key")
    journal = root / TRACES_DIR / "a.jsonl"
    journal.write_text(record(1))
    app = console(root, key_path, tmp_path)
    tracemalloc.start()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: seqs(app) == {1}, what="the first record")
            tracemalloc.reset_peak()
            with open(journal, "a") as fh:
                fh.write(record(2))
                fh.flush()
                fh.truncate(os.fstat(fh.fileno()).st_size + 400 * 2**20)  # 400 MB of NUL bytes, no newline (sparse)
            await wait_for(pilot, lambda: 2 in seqs(app), what="the record before the long line")
            with open(journal, "a") as fh:  # the line ends at last, and a record follows it
                fh.write("\n" + record(3))
            await wait_for(pilot, lambda: seqs(app) == {1, 2, 3} and app.traces.bad_lines == 1,
                           timeout=120, what="the record after the long line; the long line counted once")
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"reading the 400 MB line took {peak / 2**20:.0f} MiB at its peak"


@run_async
async def test_a_stopped_registry_lock_holder_is_named_with_how_long(procs, tmp_path):
    procs.start("alive", lease=30, heartbeat=5)
    lock = Path(procs.root) / REGISTRY_DIR / ".lock"
    app = console(procs.root, procs.key_path, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "alive" in app.registry.by_name(), what="alive listed")
        proc = holder(HOLD_LOCK, lock)
        proc.send_signal(signal.SIGSTOP)  # stopped inside the lock, as by Ctrl-Z
        try:
            banner = lambda: str(app.query_one("#banner").render())  # noqa: E731
            await wait_for(pilot, lambda: f"registry lock held by pid {proc.pid} for" in banner(),
                           what="the holder named")
            first = int(banner().split(" for ")[1].split(" s")[0])
            await wait_for(pilot, lambda: int(banner().split(" for ")[1].split(" s")[0]) >= first + 2,
                           what="the time it has held the lock counting up")
            assert app.query_one("#banner").display
            await pilot.press("3")  # the console stays responsive meanwhile
            assert app.active_view() == "access"
        finally:
            release(proc)
        await wait_for(pilot, lambda: not app.query_one("#banner").display, what="the banner gone with the holder")
