"""Issue 13 items 4-6: a stopped lock holder, FIFOs where files should be, slow services. Each
used to hang a process or an environment; now each is bounded and says why. Real processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from speed_runtime import Node, SpcError, generate_key_file
from speed_runtime.core.errors import KeyFileError
from speed_runtime.fsutil import prepare_root

from ..helpers.wait import wait_until

SPEED = [sys.executable, "-m", "speed_runtime"]
HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # Ctrl-Z inside the lock
"""


@pytest.fixture
def stopped_holder(root):
    """A real process that holds speed_registry/.lock and is stopped (SIGSTOP) inside it."""
    prepare_root(root)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, os.path.join(root, "speed_registry", ".lock")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    wait_until(lambda: open(f"/proc/{proc.pid}/stat").read().split(")")[1].split()[0] == "T", what="the stop")
    yield proc
    proc.kill()
    proc.wait()


def test_a_stopped_lock_holder_gives_one_sentence_with_its_pid_not_a_hang(stopped_holder, root, key_path):
    started = time.monotonic()
    done = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n", "--lock-timeout", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and time.monotonic() - started < 30
    assert f"held by pid {stopped_holder.pid}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_sigterm_ends_a_node_waiting_for_the_lock(stopped_holder, root, key_path):
    proc = subprocess.Popen(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # let it reach the wait for the lock (if it is not there yet, SIGTERM ends it even sooner)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) != 0  # answered at once, not after the 10 s lock wait


def test_a_running_node_reports_a_held_lock_and_keeps_receiving(root, key):
    """A node whose renewals hit the held lock counts the failures and goes on handling its inbox."""
    with Node(root, key, "a", allow=["b"], heartbeat_seconds=0.2, lease_seconds=30, lock_timeout=0.5) as a, \
            Node(root, key, "b", allow=["a"]) as b:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.path.join(root, "speed_registry", ".lock")],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            wait_until(lambda: a.counters()["registryWriteErrors"] >= 2, timeout=30, what="renewals to fail")
            b.send("a", "still listening", confirm=True, timeout=20)
            assert a.receive(timeout=10).data == "still listening"
            assert a.state == "running"
        finally:
            holder.kill()
            holder.wait()


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_a_lock_that_is_not_a_file_is_one_sentence(root, key_path, kind):
    prepare_root(root)
    lock = os.path.join(root, "speed_registry", ".lock")
    os.mkdir(lock) if kind == "directory" else os.symlink("/etc/passwd", lock)
    done = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_fifo_as_journal_is_refused_at_once(root, key_path):
    prepare_root(root)
    traces = os.path.join(root, "speed_traces")
    os.mkdir(traces, 0o700)
    os.mkfifo(os.path.join(traces, "n.jsonl"), 0o600)
    done = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n", "--trace"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_keygen_never_writes_a_key_into_a_fifo(workdir):
    fifo = os.path.join(workdir, "trap.key")
    os.mkfifo(fifo, 0o600)
    got = []

    def reader() -> None:  # a waiting reader, as an attacker would leave one
        with open(fifo, "rb") as f:
            got.append(f.read())
    thread = threading.Thread(target=reader, name="test-fifo-reader")
    thread.start()
    done = subprocess.run(SPEED + ["keygen", fifo, "--force"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "not a regular file" in done.stderr
    with pytest.raises(KeyFileError, match="not a regular file"):
        generate_key_file(fifo, overwrite=True)
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the reader: it gets end-of-file
    thread.join(10)
    assert got == [b""], "the reader received bytes"


def test_a_slow_service_cannot_starve_the_others_and_late_requests_never_run(procs, root, key):
    """8 calls fill a slow service (4 at a time), 5 more with a 1 s timeout get TIMEOUT and never
    run (a caller that retries does not execute twice); meanwhile echo answers at once."""
    srv = procs.start_scripted("srv", allow=["cli"])
    started = []
    with Node(root, key, "cli", allow=["srv"]) as cli:
        busy = [cli.call_async("srv", "slow", {"seconds": 3, "i": i}, timeout=30) for i in range(8)]
        wait_until(lambda: (_collect(srv, started), len(started) >= 4)[1], timeout=20, what="four to start")
        late = [cli.call_async("srv", "slow", {"seconds": 0.1, "late": i}, timeout=1) for i in range(5)]
        t0 = time.monotonic()
        assert cli.call("srv", "echo", {"ping": 1}, timeout=10) == {"ping": 1}
        assert time.monotonic() - t0 < 2, "echo waited behind the slow service"
        for f in late:
            with pytest.raises(SpcError) as info:
                f.result(30)
            assert info.value.code == "TIMEOUT"
        for f in busy:
            assert f.result(60)["slept"] == 3
        # every start is printed before its result is sent: all eight are there, and no late one
        wait_until(lambda: (_collect(srv, started), len([s for s in started if "i" in s["args"]]) == 8)[1],
                   timeout=20, what="the start lines")
    assert not [s for s in started if "late" in s["args"]], "a request was run after its deadline"
    assert len([s for s in started if "i" in s["args"]]) == 8


def _collect(node, into: list) -> None:
    while True:
        try:
            line = json.loads(node.lines.get_nowait())
        except Exception:
            return
        if isinstance(line, dict) and "started" in line:
            into.append(line)


def test_hour_long_services_block_neither_other_services_nor_a_stop(procs, root, key_path):
    """8 × `speed call srv sleep '{"seconds":3600}' --timeout 0.5` used to block every service of
    the node for an hour, and SIGTERM waited for them. Now 4 run (the service's limit), 4 are
    answered TIMEOUT at their deadline without running, echo still answers, and a stop leaves
    after its bounded grace."""
    callers = [f"c{i}" for i in range(8)]
    srv = procs.start("srv", allow=callers + ["other"], services=["sleep", "echo"])
    calls = [subprocess.Popen(SPEED + ["call", "--dir", root, "--key", key_path, "--as", name, "srv", "sleep",
                                       '{"seconds": 3600}', "--timeout", "0.5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in callers]
    assert [c.wait(60) for c in calls] == [4] * 8  # each caller: TIMEOUT, exit code 4
    echo = subprocess.run(SPEED + ["call", "--dir", root, "--key", key_path, "--as", "other", "srv", "echo",
                                   '{"x": 1}', "--timeout", "10"], capture_output=True, text=True, timeout=60)
    assert echo.returncode == 0 and json.loads(echo.stdout) == {"x": 1}, echo.stderr
    t0 = time.monotonic()
    assert srv.stop(timeout=60) == 0
    assert time.monotonic() - t0 < 20, "the stop waited for the hour-long services"


def test_journal_line_limits_and_deep_nesting_drop_no_valid_record(workdir):
    """A journal line of 100,000 `[` and a 64 MiB line without a newline: each counts as one
    malformed line, every valid record around them is kept, and memory stays bounded."""
    import tracemalloc

    from speed_runtime.journal import read_journal
    path = os.path.join(workdir, "j.jsonl")
    good = '{"kind":"lease","ts":1.5,"node":"a","subject":"b","event":"observed_join"}\n'
    with open(path, "w") as f:
        f.write(good + "[" * 100_000 + "\n" + good + "x" * (64 << 20) + "\n" + good + "y" * (8 << 20))
    tracemalloc.start()
    events, bad = read_journal(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(events) == 3 and bad == 3
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB to read it"


def test_registry_fifos_are_reported_not_read(root, key):
    prepare_root(root)
    fifo = os.path.join(root, "speed_registry", "evil.node")
    os.mkfifo(fifo, 0o600)
    holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer attached
    try:
        from speed_runtime.registry import Registry
        records = Registry(root, create=False).scan()
        assert [r.error for r in records if r.name == "evil"] == ["registry entry evil is not a regular file"]
        with Node(root, key, "a") as a:
            wait_until(lambda: "evil" in a.monitor.bad_entries, timeout=20, what="the monitor to report it")
    finally:
        os.close(holder)


def test_a_lease_of_inf_is_one_sentence(root, key_path):
    for value in ("inf", "1e400", "nan", "-5"):
        done = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n", "--lease", value],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and "Traceback" not in done.stderr and "--lease" in done.stderr, done.stderr


def test_a_node_uses_one_inotify_instance(root, key):
    def instances() -> int:
        return sum(1 for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}") and "inotify" in _link(f"/proc/self/fd/{fd}"))
    before = instances()
    with Node(root, key, "one"):
        assert instances() - before == 1


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@pytest.mark.parametrize("limit", [6, 7, 8])
def test_running_out_of_descriptors_names_the_limit(root, key_path, limit):
    """Whichever open fails first (the inotify instance, the registry lock, an entry), one sentence."""
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))\n"
            "from speed_runtime.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", code, "node", "--dir", root, "--key", key_path, "--name", "n"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "ulimit -n" in done.stderr and done.stderr.count("\n") == 1, done.stderr

