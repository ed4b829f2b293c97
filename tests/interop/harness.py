"""The harness of the C node's interop tests: a communication directory with a key, the C
node's build, child processes whose output lines are collected, envelopes sealed by the test.

Every process is started through a fixture that terminates it at teardown; every wait is a
bounded wait on a condition (a stdout line, a journal record, a file), never a bare sleep.
Forged envelopes are sealed with tests/vectors/generate_vectors.py, the independent
PyNaCl + struct reading of the contract, not with speed_runtime.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nacl.bindings import crypto_aead_chacha20poly1305_ietf_decrypt

from ..helpers.wait import wait_until as wait_for

HERE = Path(__file__).resolve().parent
C_DIR = HERE / "c"
C_BIN = C_DIR / "build" / "speed_c_node"
VECTORS = HERE.parent / "vectors" / "envelope_vectors.json"
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
SPEED = [sys.executable, "-m", "speed_runtime"]
C_RUNTIME = "speed_c_node-c/0.1"
REPLAY_REASONS = {"replayed_nonce", "replayed_sequence"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("speed_vector_generator",
                                                  HERE.parent / "vectors" / "generate_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


# --------------------------------------------------------------------------- environment

@dataclass
class Env:
    root: str
    key_path: str
    key: bytes

    def inbox(self, name: str) -> str:
        return os.path.join(self.root, name, "inbox")

    def inbox_files(self, name: str) -> list[str]:
        return sorted(os.listdir(self.inbox(name)))

    def tmp_files(self, name: str) -> list[str]:
        return sorted(os.listdir(os.path.join(self.root, name, "tmp")))

    def entry(self, name: str) -> dict | None:
        try:
            with open(os.path.join(self.root, "speed_registry", f"{name}.node"), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def inject(self, target: str, filename: str, data: bytes) -> None:
        """Deliver exact bytes the way section 5.4 does: tmp file, link() into inbox, unlink."""
        tmp = os.path.join(self.root, target, "tmp", filename)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.link(tmp, os.path.join(self.inbox(target), filename))
        os.unlink(tmp)

    def forge(self, etype: str | int, payload: dict, *, sender: str, source_id: str, target_id: str,
              seq: int, ts_ms: int | None = None, flags: int = 0, key: bytes | None = None,
              version: int = 1, header_length: int = 64, payload_size: int | None = None) -> tuple[str, bytes]:
        """Seal an envelope with the independent generator's code; returns (file name, bytes).
        Every header field can be set, e.g. a payload size that does not match the file."""
        text = json.dumps(payload, separators=(",", ":")).encode()
        nonce = os.urandom(12)
        ts = int(time.time() * 1000) if ts_ms is None else ts_ms
        type_code = gen.TYPES[etype] if isinstance(etype, str) else etype
        hdr = gen.header(version, type_code, flags, header_length, seq, ts,
                         len(text) if payload_size is None else payload_size, source_id, target_id)
        data = gen.seal(hdr, nonce, text, key or self.key)
        return gen.filename(sender, source_id, seq, nonce), data

    def write_entry(self, name: str, entry: dict) -> None:
        """Replace a registry entry the way writers do (temporary file, rename)."""
        path = os.path.join(self.root, "speed_registry", f"{name}.node")
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{name}.test.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)

    def open_envelope(self, path: str) -> tuple[dict, dict]:
        """Decrypt an envelope file with the key (PyNaCl): (header fields, payload)."""
        with open(path, "rb") as f:
            data = f.read()
        version, etype, flags, hlen, seq, ts, size, src, dst = gen.HEADER.unpack(data[:64])
        plain = crypto_aead_chacha20poly1305_ietf_decrypt(data[76:], data[:64], data[64:76], self.key)
        header = {"version": version, "type": etype, "flags": flags, "header_length": hlen, "seq": seq,
                  "timestamp_ms": ts, "payload_size": size, "source_id": str(uuid.UUID(bytes=src)),
                  "target_id": str(uuid.UUID(bytes=dst))}
        return header, json.loads(plain)


@pytest.fixture
def env():
    base = tempfile.mkdtemp(prefix="speed-interop-", dir=SHM)
    os.chmod(base, 0o700)
    root = os.path.join(base, "root")
    os.mkdir(root, 0o700)
    key = os.urandom(32)
    key_path = os.path.join(base, "speed.key")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("SPEED-KEY-V1\n" + gen.base64.b64encode(key).decode() + "\n")
    yield Env(root, key_path, key)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def c_node_bin():
    """Build the C node once per module (make is incremental)."""
    if shutil.which("make") is None:
        pytest.fail("make is required to build tests/interop/c")
    r = subprocess.run(["make", "-C", str(C_DIR)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail("building the C node failed (is libsodium-dev installed?)\n" + r.stdout + r.stderr)
    return str(C_BIN)


# --------------------------------------------------------------------------- processes

class Proc:
    """A child process whose stdout lines (JSON parsed when possible) are collected."""

    def __init__(self, name: str, cmd: list[str], *, stdin: bool = False, env: dict | None = None,
                 preexec_fn=None):
        self.name = name
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     encoding="utf-8", bufsize=1, preexec_fn=preexec_fn,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.id = ""
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stderr, self.errors), daemon=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))
        stream.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict]:
        out = []
        for line in list(self.lines):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    def find(self, **match: Any) -> list[dict]:
        return [e for e in self.events() if all(e.get(k) == v for k, v in match.items())]

    def wait_event(self, timeout: float = 10.0, **match: Any) -> dict:
        try:
            return wait_for(lambda: (self.find(**match) or [None])[0], timeout, f"{self.name} event {match}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nstdout: {self.lines}\nstderr: {self.errors}") from None

    def wait_line(self, prefix: str, timeout: float = 15.0) -> str:
        def found():
            if self.proc.poll() is not None and not any(l.startswith(prefix) for l in self.lines):
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.errors}")
            return next((l for l in self.lines if l.startswith(prefix)), None)
        try:
            return wait_for(found, timeout, f"{self.name} line {prefix!r}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nstdout: {self.lines}\nstderr: {self.errors}") from None

    def wait_error(self, text: str, timeout: float = 15.0) -> str:
        """Wait for a stderr line containing text."""
        try:
            return wait_for(lambda: next((l for l in list(self.errors) if text in l), None), timeout,
                            f"{self.name} stderr {text!r}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nstdout: {self.lines}\nstderr: {self.errors}") from None

    def count(self, event: str) -> int:
        """How many stdout lines are JSON events of this name (cheap: no parsing)."""
        tag = f'"event":"{event}"'
        return sum(1 for line in list(self.lines) if tag in line)

    def command(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(5)
        return rc


class Procs:
    def __init__(self, env: Env, c_bin: str):
        self.env, self.c_bin = env, c_bin
        self.started: list[Proc] = []

    def c_node(self, name: str, *, allow=(), services=(), lease=None, heartbeat=None, args=(),
               env: dict | None = None, wait_ready: bool = True, preexec_fn=None) -> Proc:
        cmd = [self.c_bin, "node", "--dir", self.env.root, "--key", self.env.key_path, "--name", name, *args]
        for a in allow:
            cmd += ["--allow", a]
        for s in services:
            cmd += ["--service", s]
        if lease is not None:
            cmd += ["--lease", str(lease)]
        if heartbeat is not None:
            cmd += ["--heartbeat", str(heartbeat)]
        p = Proc(name, cmd, stdin=True, env=env, preexec_fn=preexec_fn)
        self.started.append(p)
        if not wait_ready:
            return p
        line = p.wait_line(f"ready {name} id=")
        p.id = line.split("id=")[1].split()[0]
        return p

    def py_node(self, name: str, *, allow=(), services=(), trace=True, echo=True) -> Proc:
        cmd = SPEED + ["node", "--dir", self.env.root, "--key", self.env.key_path, "--name", name]
        for a in allow:
            cmd += ["--allow", a]
        for s in services:
            cmd += ["--service", s]
        if trace:
            cmd.append("--trace")
        if echo:
            cmd.append("--echo-messages")
        p = Proc(name, cmd)
        self.started.append(p)
        line = p.wait_line(f"ready {name} id=", timeout=30)
        p.id = line.split("id=")[1].split()[0]
        return p

    def c_run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([self.c_bin, *args[:1], "--dir", self.env.root, "--key", self.env.key_path, *args[1:]],
                              capture_output=True, text=True, timeout=timeout)

    def stop_all(self) -> None:
        for p in self.started:
            p.stop()


@pytest.fixture
def procs(env, c_node_bin):
    group = Procs(env, c_node_bin)
    yield group
    group.stop_all()


LOCK_HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def hold_registry_lock(procs: Procs, env: Env) -> Proc:
    """A real process that takes speed_registry/.lock and stops itself (SIGSTOP) holding it;
    teardown continues and ends it."""
    reg = os.path.join(env.root, "speed_registry")
    os.makedirs(reg, mode=0o700, exist_ok=True)
    holder = Proc("lock-holder", [sys.executable, "-c", LOCK_HOLDER, os.path.join(reg, ".lock")])
    procs.started.append(holder)
    holder.wait_line("locked")
    wait_for(lambda: _proc_state(holder.pid) == "T", 5, "the lock holder to stop")
    return holder


def inbox_file(env: Env, name: str, timeout: float = 10.0) -> str:
    """The path of the first file to arrive in name's inbox."""
    return wait_for(lambda: next((os.path.join(env.inbox(name), f) for f in env.inbox_files(name)), None),
                    timeout, f"a file in {name}'s inbox")


def stream_until_exit(sender: Proc, receiver: Proc, first: int) -> None:
    """Let the C node `sender` send MESSAGEs to `receiver` in batches until receiver's process
    has exited; each batch waits for the sender's outcome of every command (sent or
    send_error). first is the number of sends already made."""
    written = first
    while receiver.proc.poll() is None:
        sender.proc.stdin.write("".join(f"send {receiver.name} {written + i}\n" for i in range(20)))
        sender.proc.stdin.flush()
        written += 20
        wait_for(lambda: sender.count("sent") + sender.count("send_error") == written, 30,
                 "the sender's outcomes")


def deadline_answers(env: Env, callee: Proc, caller: Proc) -> dict[str, dict]:
    """Three SPC_REQUESTs from caller to callee's echo, injected by the test: "late" has a
    timestamp 5 s old and timeoutMs 1000 (its deadline has passed, inside the 60 s window),
    "in-time" is fresh, "no-deadline" is 5 s old with timeoutMs 0 (no deadline: docs/PROTOCOL.md
    reading 8). The answers, by request id, read from the stopped caller's inbox."""
    with stopped(caller):
        now = int(time.time() * 1000)
        for seq, rid, ts, timeout in ((1, "late", now - 5000, 1000), (2, "in-time", now, 30000),
                                      (3, "no-deadline", now - 5000, 0)):
            req = {"from": caller.name, "to": callee.name, "requestId": rid, "service": "echo",
                   "arguments": {"rid": rid}, "callerNode": caller.name, "timeoutMs": timeout}
            name, data = env.forge("SPC_REQUEST", req, sender=caller.name, source_id=caller.id,
                                   target_id=callee.id, seq=seq, ts_ms=ts)
            env.inject(callee.name, name, data)
        wait_for(lambda: len(env.inbox_files(caller.name)) == 3, 10, "three responses")
        answers = [env.open_envelope(os.path.join(env.inbox(caller.name), f))[1]
                   for f in env.inbox_files(caller.name)]
    return {p["requestId"]: p for p in answers}


def peak_rss_kb(pid: int) -> int:
    """VmHWM: the most resident memory the process ever had."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def stopped(proc: Proc):
    """Context manager: SIGSTOP a node so that files stay in its inbox; SIGCONT on exit."""
    class _Stopped:
        def __enter__(self):
            os.kill(proc.pid, signal.SIGSTOP)
            wait_for(lambda: _proc_state(proc.pid) == "T", 5, f"{proc.name} to stop")

        def __exit__(self, *exc):
            os.kill(proc.pid, signal.SIGCONT)
    return _Stopped()


def error_line(r: subprocess.CompletedProcess) -> str:
    """The one-shot commands' "ERROR CODE message" line (diagnostic JSON lines may precede it)."""
    return next((line for line in r.stderr.splitlines() if line.startswith("ERROR ")), "")


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def python_runtime():
    import speed_runtime
    return speed_runtime


def journal_records(env: Env, name: str) -> list[dict]:
    path = os.path.join(env.root, "speed_traces", f"{name}.jsonl")
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def journal_rejection(env: Env, name: str, *, peer: str | None = None, reason: str | None = None,
                       seq: int | None = None, timeout: float = 10.0) -> dict:
    def match():
        for r in journal_records(env, name):
            if r.get("kind", "envelope") == "envelope" and r.get("outcome") == "rejected" \
                    and (peer is None or r.get("peer") == peer) \
                    and (reason is None or r.get("reason") == reason) \
                    and (seq is None or r.get("seq") == seq):
                return r
        return None
    return wait_for(match, timeout, f"{name} journal rejection peer={peer} reason={reason} seq={seq}")
