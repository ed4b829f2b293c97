"""One command that measures the floor, the peers and the runtime side by side, in one run.

    python -m benchmarks.run            # full run (a few minutes on 2 cores)
    python -m benchmarks.run --tiny     # seconds: proves the benchmark works (used by CI)
    python -m benchmarks.run --write docs/BENCHMARKS.md

Rounds run the variants in a shuffled order and report medians: the machines are shared and
noisy, so only ratios measured in the same run mean anything.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from benchmarks import queue_peers, workers

CTX = mp.get_context("spawn")
SIZES = {"64 B": 64, "4 KiB": 4096, "512 KiB": 512 * 1024}


@dataclass
class Env:
    dir: str
    root: str
    key_path: str
    key: bytes

    @classmethod
    def make(cls) -> "Env":
        from speed_runtime import generate_key_file

        base = tempfile.mkdtemp(prefix="speedbench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.chmod(base, 0o700)
        key_path = os.path.join(base, "bench.key")
        key = generate_key_file(key_path)
        root = os.path.join(base, "env")
        return cls(base, root, key_path, key.raw)

    def fresh_root(self) -> str:
        self.root = tempfile.mkdtemp(prefix="env-", dir=self.dir)
        os.chmod(self.root, 0o700)
        return self.root


def start(target: Callable, *args) -> tuple[mp.Process, object]:
    parent, child = CTX.Pipe()
    proc = CTX.Process(target=target, args=(child, *args), daemon=True)
    proc.start()
    if not parent.poll(60):
        proc.kill()
        raise RuntimeError(f"{target.__name__} did not start")
    assert parent.recv() in ("ready",)
    return proc, parent


def stop(proc: mp.Process, timeout: float = 30) -> None:
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ------------------------------------------------------------------ round trips (µs)
def floor_root(env: Env) -> str:
    """A fresh directory with the two homes the floor's ends write into."""
    root = env.fresh_root()
    for name in ("srv", "cli"):
        for sub in ("inbox", "tmp"):
            os.makedirs(os.path.join(root, name, sub), mode=0o700)
    return root


def rtt_floor(env: Env, size: int, n: int) -> list[float]:
    root = floor_root(env)
    proc, _ = start(workers.floor_echo, root, env.key)
    end = workers.FloorEnd(root, "cli", "srv", env.key)
    payload, out = os.urandom(size), []
    for _ in range(n):
        t = time.perf_counter()
        end.send(payload)
        while not end.receive(5.0):
            pass
        out.append((time.perf_counter() - t) * 1e6)
    end.send(b"stop")
    stop(proc)
    return out


def rtt_zmq(env: Env, size: int, n: int) -> list[float]:
    import zmq

    address = f"ipc://{env.dir}/zmq-{random.getrandbits(32)}"
    proc, _ = start(workers.zmq_echo, address)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.connect(address)
    payload, out = os.urandom(size), []
    for _ in range(n):
        t = time.perf_counter()
        sock.send(payload)
        sock.recv()
        out.append((time.perf_counter() - t) * 1e6)
    sock.send(b"stop")
    sock.recv()
    sock.close(0)
    ctx.term()
    stop(proc)
    return out


def rtt_mp(env: Env, size: int, n: int) -> list[float]:
    from multiprocessing.connection import Client

    address = f"{env.dir}/mp-{random.getrandbits(32)}"
    proc, _ = start(workers.mp_echo, address)
    payload, out = os.urandom(size), []
    with Client(address, family="AF_UNIX") as conn:
        for _ in range(n):
            t = time.perf_counter()
            conn.send_bytes(payload)
            conn.recv_bytes()
            out.append((time.perf_counter() - t) * 1e6)
        conn.send_bytes(b"stop")
        conn.recv_bytes()
    stop(proc)
    return out


def rtt_unix(env: Env, size: int, n: int) -> list[float]:
    import socket
    import struct

    path = f"{env.dir}/sock-{random.getrandbits(32)}"
    proc, _ = start(workers.unix_echo, path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    payload, out = os.urandom(size), []
    for msg in [payload] * n + [b"stop"]:
        t = time.perf_counter()
        sock.sendall(struct.pack(">I", len(msg)) + msg)
        (k,) = struct.unpack(">I", workers.recv_exact(sock, 4))
        workers.recv_exact(sock, k)
        if msg != b"stop":
            out.append((time.perf_counter() - t) * 1e6)
    sock.close()
    stop(proc)
    return out


def rtt_runtime(env: Env, size: int, n: int, trace: bool = False) -> list[float]:
    from speed_runtime import Node

    root = env.fresh_root()
    proc, ctl = start(workers.runtime_server, root, env.key_path, "srv", ["cli"], trace)
    args, out = {"p": "x" * size}, []
    with Node(root, env.key_path, "cli", allow=["srv"], trace=trace) as node:
        for _ in range(n):
            t = time.perf_counter()
            node.call("srv", "echo", args)
            out.append((time.perf_counter() - t) * 1e6)
    ctl.send("stop")
    stop(proc)
    return out


def rtt_queue(env: Env, size: int, n: int, peer: str) -> list[float]:
    return queue_peers.rtt(peer, env.fresh_root(), os.urandom(size), n, start)


def rate_queue(env: Env, size: int, n: int, peer: str) -> float:
    return queue_peers.rate(peer, env.fresh_root(), os.urandom(size), n, start)


# ------------------------------------------------------------------ one-way rates (envelopes/s)
def rate_floor(env: Env, size: int, n: int) -> float:
    root = floor_root(env)
    proc, ctl = start(workers.floor_sink, root, env.key, n)
    end = workers.FloorEnd(root, "cli", "srv", env.key)
    payload = os.urandom(size)
    t = time.perf_counter()
    for _ in range(n):
        end.send(payload)
    done = ctl.recv()
    stop(proc)
    return n / (done - t)


def rate_runtime(env: Env, size: int, n: int, senders: int = 1, trace: bool = False) -> float:
    root = env.fresh_root()
    names = [f"s{i}" for i in range(senders)]
    srv, ctl = start(workers.runtime_server, root, env.key_path, "srv", names, trace)
    share = n // senders
    started = [start(workers.runtime_sender, root, env.key_path, name, "srv", share, b"x" * size, trace)
               for name in names]
    ctl.send(("expect", share * senders))
    assert ctl.recv() == "armed"
    t = time.perf_counter()
    for _, c in started:
        c.send("go")
    done = ctl.recv()
    for proc, c in started:
        assert c.recv() == "sent"
        c.send("stop")
        stop(proc)
    ctl.send("stop")
    stop(srv)
    return share * senders / (done - t)


# ------------------------------------------------------------------ the run
METHOD = """## Method

All variants run in one process tree on `/dev/shm`, in shuffled order, round after round; each
figure is the median over rounds of the per-round median (round trips) or rate. Ratios compare
figures of the same run only.

- **floor**: two processes; the sender seals (ChaCha20-Poly1305, PyNaCl), writes `tmp/`, moves the
  file into the peer's `inbox/` with `renameat2(RENAME_NOREPLACE)`; the receiver wakes on raw
  inotify, reads, unlinks and opens. No registry, access or replay checks: the least any file
  transport of this contract must do.
- **peers**: pyzmq REQ/REP over `ipc://`, `multiprocessing.connection` (AF_UNIX), a raw AF_UNIX
  stream socket with length prefixes; and the file-system queues that do SPEED's job the same way,
  `dirq` and `persist-queue` (SQLite), as producer/consumer and as request/response over two
  queues (`benchmarks/queue_peers.py`: no encryption, no checks, consumers poll every 100 µs).
- **runtime**: `speed_runtime.Node` in two processes: `call()` of an `echo` service (round trip);
  `send()` one-way MESSAGEs from 1 sender process, and from 8 sender processes into one receiver,
  timed from the start signal to the receiver's handler seeing the last one; "journals" turns
  tracing on in every node."""


@dataclass
class Plan:
    rounds: int
    rtt_n: int
    rate_n: int
    sizes: list[str]
    results: dict[str, list] = field(default_factory=dict)


def variants(plan: Plan) -> list[tuple[str, Callable[[Env], object]]]:
    out: list[tuple[str, Callable[[Env], object]]] = []
    for label in plan.sizes:
        size = SIZES[label]
        big = size >= 65536
        rn = max(20, plan.rtt_n // 10) if big else plan.rtt_n
        wn = max(100, plan.rate_n // 20) if big else plan.rate_n
        out += [
            (f"rtt floor {label}", lambda e, s=size, k=rn: rtt_floor(e, s, k)),
            (f"rtt zmq {label}", lambda e, s=size, k=rn: rtt_zmq(e, s, k)),
            (f"rtt mp.connection {label}", lambda e, s=size, k=rn: rtt_mp(e, s, k)),
            (f"rtt unix socket {label}", lambda e, s=size, k=rn: rtt_unix(e, s, k)),
            (f"rtt dirq {label}", lambda e, s=size, k=rn: rtt_queue(e, s, k, "dirq")),
            (f"rtt persist-queue {label}", lambda e, s=size, k=rn: rtt_queue(e, s, k, "persist-queue")),
            (f"rate dirq {label}", lambda e, s=size, k=wn: rate_queue(e, s, k, "dirq")),
            (f"rate persist-queue {label}", lambda e, s=size, k=wn: rate_queue(e, s, k, "persist-queue")),
            (f"rtt runtime SPC {label}", lambda e, s=size, k=rn: rtt_runtime(e, s, k)),
            (f"rate floor {label}", lambda e, s=size, k=wn: rate_floor(e, s, k)),
            (f"rate runtime 1 sender {label}", lambda e, s=size, k=wn: rate_runtime(e, s, k, 1)),
            (f"rate runtime 8 senders {label}", lambda e, s=size, k=wn: rate_runtime(e, s, k, 8)),
            (f"rate runtime 1 sender, journals {label}", lambda e, s=size, k=wn: rate_runtime(e, s, k, 1, True)),
            (f"rtt runtime SPC, journals {label}", lambda e, s=size, k=rn: rtt_runtime(e, s, k, True)),
        ]
    return out


def run(plan: Plan, progress: Callable[[str], None] = print) -> dict[str, dict[str, float]]:
    env = Env.make()
    try:
        todo = variants(plan)
        for r in range(plan.rounds):
            random.shuffle(todo)
            for name, fn in todo:
                progress(f"round {r + 1}/{plan.rounds}: {name}")
                plan.results.setdefault(name, []).append(fn(env))
    finally:
        shutil.rmtree(env.dir, ignore_errors=True)
    summary: dict[str, dict[str, float]] = {}
    for name, samples in plan.results.items():
        if name.startswith("rtt"):
            medians = [statistics.median(s) for s in samples]
            p99s = [percentile(s, 0.99) for s in samples]
            summary[name] = {"median_us": statistics.median(medians), "p99_us": statistics.median(p99s)}
        else:
            summary[name] = {"rate": statistics.median(samples)}
    return summary


def table(summary: dict[str, dict[str, float]], sizes: list[str]) -> str:
    lines = ["| measurement | median | p99 | vs floor | vs pyzmq | vs mp.connection | vs unix socket |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label in sizes:
        floor = summary[f"rtt floor {label}"]["median_us"]
        peers = {p: summary[f"rtt {p} {label}"]["median_us"] for p in ("zmq", "mp.connection", "unix socket")}
        for name in ("floor", "zmq", "mp.connection", "unix socket", "dirq", "persist-queue", "runtime SPC",
                     "runtime SPC, journals"):
            s = summary[f"rtt {name} {label}"]
            ratio = lambda other: f"{s['median_us'] / other:.2f}×"
            lines.append(f"| round trip, {name}, {label} | {s['median_us']:.0f} µs | {s['p99_us']:.0f} µs | "
                         f"{ratio(floor)} | {ratio(peers['zmq'])} | {ratio(peers['mp.connection'])} | "
                         f"{ratio(peers['unix socket'])} |")
        frate = summary[f"rate floor {label}"]["rate"]
        for name in ("floor", "dirq", "persist-queue", "runtime 1 sender", "runtime 8 senders",
                     "runtime 1 sender, journals"):
            rate = summary[f"rate {name} {label}"]["rate"]
            lines.append(f"| one-way rate, {name}, {label} | {rate:,.0f} /s | | {rate / frate:.0%} of floor | | | |")
    return "\n".join(lines)


def goals(summary: dict[str, dict[str, float]]) -> str:
    """The goals table, on 64 B envelopes (empty when the run left that size out)."""
    label = "64 B"
    if f"rtt runtime SPC {label}" not in summary:
        return "(the goals are measured on 64 B envelopes, which this run left out)"
    rtt = summary[f"rtt runtime SPC {label}"]["median_us"]
    floor = summary[f"rtt floor {label}"]["median_us"]
    zmq = summary[f"rtt zmq {label}"]["median_us"]
    frate = summary[f"rate floor {label}"]["rate"]
    one = summary[f"rate runtime 1 sender {label}"]["rate"]
    eight = summary[f"rate runtime 8 senders {label}"]["rate"]
    journal = summary[f"rate runtime 1 sender, journals {label}"]["rate"]
    queues = {q: (summary[f"rtt {q} {label}"]["median_us"], summary[f"rate {q} {label}"]["rate"])
              for q in ("dirq", "persist-queue")}
    rows = [
        ("SPC round trip ≤ 1.5× floor", rtt / floor, rtt / floor <= 1.5),
        ("SPC round trip ≤ 3× pyzmq REQ/REP", rtt / zmq, rtt / zmq <= 3),
        ("one-way rate, 1 sender ≥ 60% of floor", one / frate, one / frate >= 0.6),
        ("one-way rate, 8 senders ≥ 60% of floor", eight / frate, eight / frate >= 0.6),
        ("journals cost ≤ 15% of throughput", 1 - journal / one, 1 - journal / one <= 0.15),
        *[(f"SPC round trip ÷ {q}'s request/response round trip, ahead below 1 (×)", rtt / q_rtt, rtt < q_rtt)
          for q, (q_rtt, _) in queues.items()],
        *[(f"one-way rate ÷ {q}'s one-way rate, ahead above 1 (×)", one / q_rate, one > q_rate)
          for q, (_, q_rate) in queues.items()],
    ]
    out = ["| goal (64 B) | measured | met |", "| --- | --- | --- |"]
    for name, value, ok in rows:
        shown = f"{value:.2f}×" if "×" in name else f"{value:.0%}"
        out.append(f"| {name} | {shown} | {'yes' if ok else 'no'} |")
    return "\n".join(out)


BEGIN, END = "<!-- results:begin (written by python -m benchmarks.run --write) -->", "<!-- results:end -->"


def write_results(path: str, results: str) -> None:
    """Replace the results block of an existing page (the analysis around it stays), or write a page."""
    try:
        page = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        page = ""
    if BEGIN in page and END in page:
        page = page[:page.index(BEGIN)] + results + page[page.index(END) + len(END):]
    else:
        page = f"# Benchmarks\n\n{METHOD}\n\n## Results (medians over rounds)\n\n{results}\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a few seconds, to prove the benchmark works")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rtt", type=int, default=2000, help="round trips per variant and round")
    parser.add_argument("--messages", type=int, default=20000, help="one-way envelopes per variant and round")
    parser.add_argument("--sizes", default="64 B,4 KiB,512 KiB")
    parser.add_argument("--write", metavar="FILE", help="write the results as Markdown")
    args = parser.parse_args(argv)
    if args.tiny:
        plan = Plan(rounds=1, rtt_n=30, rate_n=160, sizes=["64 B"])
    else:
        plan = Plan(rounds=args.rounds, rtt_n=args.rtt, rate_n=args.messages, sizes=args.sizes.split(","))
    started = time.time()
    summary = run(plan, progress=lambda s: print(s, file=sys.stderr, flush=True))
    report = (f"{table(summary, plan.sizes)}\n\n{goals(summary)}\n")
    print(report)
    if args.write:
        load = os.getloadavg()[0]
        command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
        results = (f"{BEGIN}\n"
                   f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}\n"
                   f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
                   f"{platform.release()}, Python {platform.python_version()}; load average at the end {load:.1f}\n"
                   f"- command: `{command.strip()}` ({plan.rounds} rounds, {plan.rtt_n} round trips and "
                   f"{plan.rate_n} one-way envelopes per variant and round; 512 KiB uses a tenth and a twentieth)\n\n"
                   f"{report}{END}")
        write_results(args.write, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
