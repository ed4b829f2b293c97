"""Processes for the benchmarks: each function runs in a child started with the 'spawn' method
and talks to the parent through a multiprocessing Pipe (`ctl`)."""
from __future__ import annotations

import os
import socket
import struct
import threading
import time

from speed_runtime.core.envelope import Header, open_envelope, seal
from speed_runtime.inotify import INBOX_EVENTS, Watch
from speed_runtime.keyfile import Key
from speed_runtime.transport import TargetDirs, _move_noreplace

SRC, DST = b"\x01" * 16, b"\x02" * 16
_DIR = os.O_RDONLY | os.O_DIRECTORY


# ------------------------------------------------------------------ the floor: files + raw inotify
class FloorEnd:
    """The least a file transport must do: seal, write tmp, rename into the peer's inbox; wake on
    raw inotify, read, unlink, open. No registry, no checks beyond the tag."""

    def __init__(self, root: str, me: str, peer: str, key: bytes):
        self.key = Key(key)
        self.inbox = os.path.join(root, me, "inbox")
        self.inbox_fd = os.open(self.inbox, _DIR)
        self.watch = Watch()
        self.watch.add(self.inbox, INBOX_EVENTS, "inbox")
        self.peer = TargetDirs(root, peer)
        self.seq = 0

    def send(self, payload: bytes) -> None:
        self.seq += 1
        nonce = os.urandom(12)
        data = seal(Header(1, self.seq, int(time.time() * 1000), len(payload), SRC, DST), payload, self.key, nonce)
        name = f"f.{self.seq:020d}.{nonce.hex()[:8]}.env"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self.peer.tmp_fd)
        os.write(fd, data)
        os.close(fd)
        _move_noreplace(name, self.peer.tmp_fd, self.peer.inbox_fd)

    def receive(self, timeout: float = 5.0) -> list[bytes]:
        events, overflow = self.watch.wait(timeout)
        names = os.listdir(self.inbox) if overflow else [name for _, name in events if name]
        out = []
        for name in sorted(names):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.inbox_fd)
            data = os.read(fd, os.fstat(fd).st_size)
            os.close(fd)
            os.unlink(name, dir_fd=self.inbox_fd)
            out.append(open_envelope(data, self.key, 1 << 21).payload)
        return out


def floor_echo(ctl, root: str, key: bytes) -> None:
    end = FloorEnd(root, "srv", "cli", key)
    ctl.send("ready")
    while True:
        for payload in end.receive(0.5):
            if payload == b"stop":
                return
            end.send(payload)


def floor_sink(ctl, root: str, key: bytes, count: int) -> None:
    end = FloorEnd(root, "srv", "cli", key)
    ctl.send("ready")
    got = 0
    while got < count:
        got += len(end.receive(5.0))
    ctl.send(time.perf_counter())


# ------------------------------------------------------------------ peers
def zmq_echo(ctl, address: str) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.bind(address)
    ctl.send("ready")
    while True:
        msg = sock.recv()
        sock.send(msg)
        if msg == b"stop":
            break
    sock.close(0)
    ctx.term()


def mp_echo(ctl, address: str) -> None:
    from multiprocessing.connection import Listener

    with Listener(address, family="AF_UNIX") as listener:
        ctl.send("ready")
        with listener.accept() as conn:
            while True:
                msg = conn.recv_bytes()
                conn.send_bytes(msg)
                if msg == b"stop":
                    return


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def unix_echo(ctl, path: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    ctl.send("ready")
    conn, _ = srv.accept()
    while True:
        (n,) = struct.unpack(">I", recv_exact(conn, 4))
        msg = recv_exact(conn, n)
        conn.sendall(struct.pack(">I", n) + msg)
        if msg == b"stop":
            break
    conn.close()
    srv.close()


# ------------------------------------------------------------------ the runtime
def runtime_server(ctl, root: str, key_path: str, name: str, allow: list[str], trace: bool) -> None:
    """A Node offering `echo`; counts MESSAGEs and reports when the expected number arrived."""
    from speed_runtime import Node

    expected = [0]
    got = [0]
    done = threading.Event()
    lock = threading.Lock()

    def on_message(msg) -> None:
        with lock:
            got[0] += 1
            if got[0] == expected[0]:
                done.set()

    with Node(root, key_path, name, allow=allow, trace=trace) as node:
        node.register("echo", lambda args: args)
        node.on_message(on_message)
        ctl.send("ready")
        while True:
            cmd = ctl.recv()
            if cmd == "stop":
                break
            with lock:  # ("expect", n): report the time the n-th message was handled
                got[0], expected[0] = 0, cmd[1]
                done.clear()
            ctl.send("armed")
            done.wait()
            ctl.send(time.perf_counter())


def runtime_sender(ctl, root: str, key_path: str, name: str, target: str, count: int, payload: bytes,
                   trace: bool) -> None:
    from speed_runtime import Node

    data = payload.decode("latin-1")
    with Node(root, key_path, name, allow=[target], trace=trace) as node:
        node.sender.live_entry(target)  # warm the registry cache
        ctl.send("ready")
        ctl.recv()
        for _ in range(count):
            node.send(target, data)
        ctl.send("sent")
        ctl.recv()
