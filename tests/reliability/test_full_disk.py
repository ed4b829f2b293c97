"""Case 10: a full file system. A 256 KiB tmpfs is mounted as the communication directory's file
system (CI runs as root; if the mount fails the test fails, it is never skipped), filled to the last
page, and the nodes on it are driven through it."""
import errno
import os
import subprocess

import pytest

from speed_runtime import DeliveryError, Node
from speed_runtime.journal import read_journal
from speed_runtime.registry import Registry

from ..helpers.wait import wait_until


@pytest.fixture
def small_fs(workdir):
    mountpoint = os.path.join(workdir, "fs")
    os.mkdir(mountpoint, 0o700)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mountpoint],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"case 10 needs root to mount a 256 KiB tmpfs at {mountpoint}: mount said "
                    f"{done.stderr.strip()!r} (exit {done.returncode})")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", mountpoint], check=True)


def fill(path):
    """Write until ENOSPC, then fill the last pages byte-wise; returns the filler paths."""
    fillers = []
    for i, chunk in enumerate((64 << 10, 4096, 1)):
        name = os.path.join(path, f"filler{i}")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600)
        fillers.append(name)
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
    for i in range(100):  # and every page a new small file could take
        try:
            with open(os.path.join(path, f"tiny{i}"), "wb") as f:
                f.write(b"x")
            fillers.append(os.path.join(path, f"tiny{i}"))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            fillers.append(os.path.join(path, f"tiny{i}"))
            break
    return fillers


def test_a_full_file_system_fails_sends_cleanly_and_recovers(small_fs, key):
    root = os.path.join(small_fs, "env")
    with Node(root, key, "r", allow=["s"], heartbeat_seconds=0.2, lease_seconds=5, trace=True) as r, \
            Node(root, key, "s", allow=["r"], heartbeat_seconds=0.2, lease_seconds=5) as s:
        r.register("echo", lambda args: args)
        assert s.send("r", "before") == 1
        assert r.receive(timeout=20).data == "before"
        registry = Registry(root)
        fillers = fill(small_fs)
        try:
            with pytest.raises(DeliveryError) as info:
                s.send("r", "x" * 3000)
            assert "No space left on device" in str(info.value) and "nothing was delivered" in str(info.value)
            with pytest.raises(DeliveryError):
                s.call("r", "echo", {"pad": "y" * 3000}, timeout=5)
            assert os.listdir(os.path.join(root, "r", "inbox")) == []  # nothing half-written was delivered
            assert os.listdir(os.path.join(root, "r", "tmp")) == []    # and no temporary was left behind
            # stay full across several heartbeats (every 0.2 s) and journal flushes (every 0.25 s)
            beat = registry.read("r").last_heartbeat
            wait_until(lambda: r.counters().get("registryWriteErrors", 0) >= 3, timeout=20,
                       what="r to try (and fail) to renew on the full file system")
            assert registry.read("r").last_heartbeat == beat
        finally:
            for path in fillers:
                os.unlink(path)
        # space is back: both nodes renew again and everything works
        for name in ("r", "s"):
            before = registry.read(name).last_heartbeat
            wait_until(lambda: registry.read(name).last_heartbeat > before, timeout=20, what=f"{name} to renew")
        assert all(t.is_alive() for t in r.threads() + s.threads()) and r.state == s.state == "running"
        assert s.send("r", "after") == 2  # the failed send consumed no sequence number (reading 5)
        assert r.receive(timeout=20).data == "after"
        assert s.call("r", "echo", {"ok": 1}, timeout=20) == {"ok": 1}
        assert r.counters()["rejected"] == {}
    records, torn = read_journal(os.path.join(root, "speed_traces", "r.jsonl"))
    assert torn == 0  # the journal kept what it could not write while full, then appended it whole
    assert sorted(e.seq for e in records if getattr(e, "outcome", "") == "accepted" and e.type == "MESSAGE") == [1, 2]


def test_a_journal_that_cannot_grow_is_said_once_on_stderr_and_the_node_keeps_receiving(procs, root, key):
    """Under `ulimit -f 16` a traced receiver's journal stops growing: it used to keep its records
    in memory, then drop them, without a word. Now one line names the journal and the limit."""
    import resource
    import signal as signals

    def limited() -> None:
        signals.signal(signals.SIGXFSZ, signals.SIG_IGN)  # EFBIG, as a shell's `ulimit -f` gives Python
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))
    rx = procs.start("rx", allow=["tx"], echo=True, trace=True, preexec_fn=limited)
    with Node(root, key, "tx", allow=["rx"]) as tx:
        for n in range(300):
            tx.send("rx", {"n": n, "pad": "x" * 200})
        assert [m["data"]["n"] for m in rx.messages(300)] == list(range(300))
    journal = os.path.join(root, "speed_traces", "rx.jsonl")
    wait_until(lambda: any("cannot append to its trace journal" in line for line in rx.stderr), 30,
               "the journal's failure on rx's stderr")
    said = [line for line in rx.stderr if "trace journal" in line]
    assert len(said) == 1 and journal in said[0] and "`ulimit -f`" in said[0], said
    assert os.path.getsize(journal) <= 16 << 10
    # read once rx has stopped: while it runs, an append cut short by the limit shows its part line
    # until the writer cuts it back (a reader's race, not the journal's state)
    assert rx.stop() == 0
    records, torn = read_journal(journal)
    assert records and torn == 0


def test_a_registry_entry_that_cannot_be_written_says_why_in_one_line(procs, root, key):
    """Under `ulimit -f 1` (1 KiB, less than an entry) `speed node` said only "speed: short write"."""
    import resource
    import signal as signals

    from speed_runtime.cli.common import EXIT_CONFIG

    def limited() -> None:
        signals.signal(signals.SIGXFSZ, signals.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 10, 1 << 10))
    rx = procs.start("rx", allow=["tx"], wait_ready=False, preexec_fn=limited)
    assert rx.proc.wait(30) == EXIT_CONFIG
    wait_until(lambda: rx.stderr, 10, "rx's stderr")
    assert len(rx.stderr) == 1, rx.stderr
    assert rx.stderr[0].startswith("speed: cannot write the registry entry of rx, ") and \
        "(the file-size limit of this process: `ulimit -f`)" in rx.stderr[0], rx.stderr
    assert not [n for n in os.listdir(os.path.join(root, "speed_registry")) if n != ".lock"]  # nothing left half-written


def test_an_echo_that_cannot_be_written_is_said_on_stderr_not_only_counted(root, key, key_path, workdir):
    """`speed node --echo-messages > file` under `ulimit -f 4`: once the file is full every message's
    handler fails (the confirmed sender is told), and that was only a counter."""
    import resource
    import signal as signals

    from speed_runtime import SpeedError

    from ..helpers.processes import REPO, SPEED

    def limited() -> None:
        signals.signal(signals.SIGXFSZ, signals.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 10, 4 << 10))
    out, err = os.path.join(workdir, "echo.out"), os.path.join(workdir, "echo.err")
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        rx = subprocess.Popen(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "rx", "--allow", "tx",
                                       "--echo-messages"], stdout=stdout, stderr=stderr, preexec_fn=limited, cwd=REPO)
    try:
        wait_until(lambda: open(out, "rb").read().startswith(b"ready rx "), 30, "rx's ready line")
        failed = 0
        with Node(root, key, "tx", allow=["rx"]) as tx:
            for n in range(40):  # 40 lines of ~250 bytes: the 4 KiB limit is passed about halfway
                try:
                    tx.send("rx", {"n": n, "pad": "x" * 200}, confirm=True)
                except SpeedError as exc:
                    assert "EXECUTION_FAILED" in str(exc)
                    failed += 1
        assert 10 <= failed < 40
        said = wait_until(lambda: [line for line in open(err).read().splitlines() if "message handler failed" in line],
                          10, "rx's stderr")
        assert len(said) == 1 and "from tx: File too large (the file-size limit of this process: `ulimit -f`)" in \
            said[0] and said[0].endswith("the sender is told it failed"), said
    finally:
        rx.terminate()
        assert rx.wait(30) == 0
