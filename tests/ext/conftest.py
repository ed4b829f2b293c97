"""Fixtures of the extension tests: real node processes (tests/helpers/scripted_node.py as the
receiver, tests/ext/quota_peer.py as senders), a stopped process, memory and inbox probes."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ..helpers.processes import REPO, NodeProcess, NodeProcesses, _pump


class Peers(NodeProcesses):
    def start_peer(self, name: str, target: str, *, count: int = 1, interval: float = 0.0, size: int = 0,
                   features=(), options: dict | None = None, timeout: float = 10.0, non_blocking: bool = False,
                   wait_go: bool = False, key_path: str | None = None) -> NodeProcess:
        cmd = [sys.executable, "-m", "tests.ext.quota_peer", self.root, key_path or self.key_path, name, target,
               "--count", str(count), "--interval", str(interval), "--size", str(size), "--timeout", str(timeout),
               "--options", json.dumps(options or {})]
        for feature in features:
            cmd += ["--feature", feature]
        if non_blocking:
            cmd.append("--non-blocking")
        if wait_go:
            cmd.append("--wait-go")
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO)
        node = NodeProcess(name, proc)
        threading.Thread(target=_pump, args=(proc.stdout, node.lines.put), daemon=True).start()
        threading.Thread(target=_pump, args=(proc.stderr, node.stderr.append), daemon=True).start()
        self.started.append(node)
        line = node.read_line(30)
        assert line.startswith(f"ready {name} id="), line
        node.id = line.split("id=")[1].split()[0]
        return node


def go(node: NodeProcess) -> None:
    node.proc.stdin.write("go\n")
    node.proc.stdin.flush()


@pytest.fixture
def peers(root, key_path):
    group = Peers(root, key_path)
    yield group
    for node in group.started:
        with contextlib.suppress(ProcessLookupError):
            node.proc.send_signal(signal.SIGCONT)
        if node.proc.stdin is not None:
            with contextlib.suppress(OSError):
                node.proc.stdin.close()  # a peer waiting for `go` ends at EOF
    group.stop_all()


@contextlib.contextmanager
def stopped(node: NodeProcess):
    """The process is stopped (SIGSTOP) inside the block: it takes nothing from its inbox."""
    node.proc.send_signal(signal.SIGSTOP)
    try:
        yield node
    finally:
        node.proc.send_signal(signal.SIGCONT)


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def files_of(root: str, target: str, sender: str) -> list[str]:
    """The envelope files `sender` has in `target`'s inbox now."""
    try:
        return [n for n in os.listdir(os.path.join(root, target, "inbox")) if n.startswith(sender + ".")]
    except FileNotFoundError:
        return []


def messages(node: NodeProcess, count: int, timeout: float = 60.0) -> list[dict]:
    """The next `count` JSON lines a scripted receiver prints (one per handled MESSAGE)."""
    return [json.loads(node.read_line(timeout)) for _ in range(count)]


def _all_stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


@contextlib.contextmanager
def frozen(*nodes: NodeProcess):
    """Every thread of these processes is stopped inside the block (not merely signalled): a
    listing of a directory only they change is then a snapshot, not a walk over a moving set."""
    for node in nodes:
        node.proc.send_signal(signal.SIGSTOP)
    try:
        for node in nodes:
            deadline = time.monotonic() + 10
            while not _all_stopped(node.proc.pid):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node.name} did not stop")
                time.sleep(0.0005)
        yield
    finally:
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGCONT)
