"""Helpers of the extension tests: the journal of a node as records, envelopes read back from an
inbox with the key, forged chunks sealed as a key holder could; real node processes
(tests/helpers/scripted_node.py as the receiver, tests/ext/quota_peer.py as senders), a stopped
process, memory and inbox probes."""
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

from speed_runtime.core import chunks
from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.transport import inject

from ..helpers.processes import REPO, NodeProcess, NodeProcesses, _pump
from ..helpers.wait import wait_until

FEATURES = ["chunks", "reliable"]
MiB = 1 << 20


def journal(root: str, name: str, kind: str | None = None) -> list[dict]:
    out = []
    try:
        with open(os.path.join(root, "speed_traces", f"{name}.jsonl"), encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if kind is None or rec.get("kind", "envelope") == kind:
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out


def wait_record(node, kind: str, timeout: float = 20.0, **match) -> dict:
    """The first journal record of `node` (a started Node with trace=True) matching `match`."""
    def find():
        node.journal.flush()
        return next((r for r in journal(node.root, node.name, kind) if all(r.get(k) == v for k, v in match.items())),
                    None)
    return wait_until(find, timeout, f"{node.name} {kind} record {match}")


def inbox(root: str, name: str) -> list[str]:
    return sorted(os.listdir(os.path.join(root, name, "inbox")))


def read_inbox(root: str, name: str, key) -> list[tuple[Header, bytes]]:
    """Every envelope waiting in `name`'s inbox, opened with the key: (header, plaintext)."""
    out = []
    for f in inbox(root, name):
        with open(os.path.join(root, name, "inbox", f), "rb") as fh:
            opened = open_envelope(fh.read(), key, 2 * MiB)
        out.append((opened.header, opened.payload))
    return out


class Forger:
    """Seals envelopes as `node` (a started Node) would towards `target` (a started Node), with
    sequence numbers that continue after what the test sealed so far; delivers them with inject."""

    def __init__(self, node, target, first_seq: int = 1000):
        self.node, self.target, self.seq = node, target, first_seq

    def envelope(self, etype: int, plaintext: bytes, flags: int, seq: int | None = None) -> tuple[str, bytes]:
        if seq is None:
            self.seq += 1
            seq = self.seq
        nonce = os.urandom(12)
        header = Header(etype, seq, int(__import__("time").time() * 1000), len(plaintext), self.node.id_bytes,
                        self.target.id_bytes, flags)
        return envelope_filename(self.node.name, self.node.id_bytes, seq, nonce), \
            seal(header, plaintext, self.node.key, nonce)

    def deliver(self, etype: int, plaintext: bytes, flags: int) -> str:
        name, data = self.envelope(etype, plaintext, flags)
        inject(self.node.root, self.target.name, name, data)
        return name

    def message(self, body: bytes, mid: str, order: list[int] | None = None, limit: int = 4096,
                forged: dict[int, dict] | None = None) -> list[tuple[str, bytes]]:
        """The sealed chunks of one message, to be delivered in `order` (chunk indexes; repeats and
        omissions allowed; by default all, in order), numbered in that order. Each chunk names the
        tag of the envelope that carried the chunk before (a chunk never delivered is sealed all the
        same, so the chain goes on). `forged` changes header fields of a chunk as a key holder could."""
        cutter = chunks.Chunker({"from": self.node.name, "to": self.target.name, "body": "bytes"}, mid, body, limit,
                                MiB)
        order = list(range(cutter.count)) if order is None else order
        base, self.seq = self.seq, self.seq + len(order) + cutter.count
        out: dict[int, tuple[str, bytes]] = {}
        prev = None
        for index in range(cutter.count):  # in chain order; each position of `order` gets its own number
            plaintext = cutter.plaintext(index, prev)
            if forged and index in forged:
                header, piece = chunks.decode(plaintext, 1, chunks.FLAG_BINARY | chunks.FLAG_CHUNK)
                plaintext = chunks.binary_plaintext({**header, **forged[index]}, piece.data)
            sealed = None
            for pos in [p for p, i in enumerate(order) if i == index] or [len(order) + index]:
                out[pos] = self.envelope(1, plaintext, chunks.FLAG_BINARY | chunks.FLAG_CHUNK, base + pos + 1)
                sealed = sealed or out[pos][1]
            prev = chunks.chain_value(sealed)
        return [out[pos] for pos in range(len(order))]

    def deliver_all(self, sealed: list[tuple[str, bytes]]) -> None:
        for name, data in sealed:
            inject(self.node.root, self.target.name, name, data)


class stopped:
    """SIGSTOP a node process so that what is sent to it stays in its inbox."""

    def __init__(self, proc):
        self.proc = proc

    def __enter__(self):
        self.proc.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(self.proc.proc.pid) == "T", 5, "the process to stop")
        return self

    def __exit__(self, *exc):
        self.proc.proc.send_signal(signal.SIGCONT)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def features():
    return list(FEATURES)


class Peers(NodeProcesses):
    def start_peer(self, name: str, target: str, *, count: int = 1, interval: float = 0.0, size: int = 0,
                   features=(), options: dict | None = None, timeout: float = 10.0, non_blocking: bool = False,
                   wait_go: bool = False, key_path: str | None = None, replay: bool = False) -> NodeProcess:
        cmd = [sys.executable, "-m", "tests.ext.quota_peer", self.root, key_path or self.key_path, name, target,
               "--count", str(count), "--interval", str(interval), "--size", str(size), "--timeout", str(timeout),
               "--options", json.dumps(options or {})]
        for feature in features:
            cmd += ["--feature", feature]
        if non_blocking:
            cmd.append("--non-blocking")
        if wait_go:
            cmd.append("--wait-go")
        if replay:
            cmd.append("--replay")
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
