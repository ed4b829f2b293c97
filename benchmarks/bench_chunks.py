"""The chunks and reliable extensions measured against the floor, in one run (docs/BENCHMARKS.md
"## chunks and reliable", docs/RELIABILITY.md).

    python -m benchmarks.bench_chunks            # full run (several minutes on 2 cores)
    python -m benchmarks.bench_chunks --quick    # a few minutes: rough figures
    python -m benchmarks.bench_chunks --tiny     # seconds, small sizes only: proves it works (CI)

Prints one JSON object:
- `oneWay`: per size (64 KiB, 1 MiB, 16 MiB, 64 MiB) the median throughput (MiB/s) of the floor
  (one envelope of the whole size: seal, tmp file, rename, inotify, read, open — no registry, no
  checks), of `send()` and of `send(..., reliable=True)` between two processes, with their ratios;
  variants interleave in shuffled order each round. `peakRss` at 64 MiB: VmHWM of the runtime's
  sender and receiver processes (fresh processes for that size), and their RSS when idle.
- `spc4MiB`: median round trip of an SPC echo with a 4 MiB argument against the floor's echo.
- `loss`: a receiver killed (kill -9) and restarted mid-stream under reliable sends, `--kills`
  times: messages sent, handled, handled twice within one instance (must be 0), handled again by
  the next instance, never handled (must be 0), retransmissions, send-errors.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import workers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
FEATURES = ["chunks", "reliable"]
WINDOW = 256  # unacknowledged reliable messages of the loss test's sender
_DIR = os.O_RDONLY | os.O_DIRECTORY


# ------------------------------------------------------------------ children (spawned)
class BigFloorEnd(workers.FloorEnd):
    """The floor, for envelopes of any size (the floor's own limit is 2 MiB)."""

    def receive(self, timeout: float = 5.0) -> list[bytes]:
        from speed_runtime.core.envelope import open_envelope

        events, overflow = self.watch.wait(timeout)
        names = os.listdir(self.inbox) if overflow else [name for _, name in events if name]
        out = []
        for name in sorted(names):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.inbox_fd)
            except FileNotFoundError:
                continue
            data = os.read(fd, os.fstat(fd).st_size)
            os.close(fd)
            os.unlink(name, dir_fd=self.inbox_fd)
            out.append(open_envelope(data, self.key, 1 << 30).payload)
        return out


def floor_receiver(ctl, root: str, key: bytes) -> None:
    end = BigFloorEnd(root, "srv", "cli", key)
    ctl.send("ready")
    while True:
        cmd = ctl.recv()
        if cmd == "stop":
            return
        if cmd[0] == "echo":  # answer every payload until "stop" arrives in the inbox
            ctl.send("armed")
            while True:
                for payload in end.receive(0.5):
                    if payload == b"stop":
                        break
                    end.send(payload)
                else:
                    continue
                break
            continue
        got, want = 0, cmd[1]
        ctl.send("armed")
        while got < want:
            got += len(end.receive(5.0))
        ctl.send(time.perf_counter())


def floor_sender(ctl, root: str, key: bytes) -> None:
    end = BigFloorEnd(root, "cli", "srv", key)
    ctl.send("ready")
    while True:
        cmd = ctl.recv()
        if cmd == "stop":
            return
        _, size, count = cmd
        payload = _payload(size)
        ctl.send("primed")
        ctl.recv()
        for _ in range(count):
            end.send(payload)
        ctl.send("sent")


def runtime_receiver(ctl, root: str, key_path: str) -> None:
    from speed_runtime import Node

    lock, done = threading.Lock(), threading.Event()
    state = {"got": 0, "want": 0}

    def on_message(msg) -> None:
        with lock:
            state["got"] += 1
            if state["got"] == state["want"]:
                done.set()

    with Node(root, key_path, "srv", allow=["cli"], features=FEATURES) as node:
        node.register("echo", lambda args: args)
        node.on_message(on_message)
        ctl.send(("ready", _rss()))
        while True:
            cmd = ctl.recv()
            if cmd == "stop":
                break
            if cmd == "rss":
                ctl.send(_rss())
                continue
            with lock:
                state["got"], state["want"] = 0, cmd[1]
                done.clear()
            ctl.send("armed")
            done.wait()
            ctl.send(time.perf_counter())


def runtime_sender(ctl, root: str, key_path: str) -> None:
    from speed_runtime import Node

    with Node(root, key_path, "cli", allow=["srv"], features=FEATURES) as node:
        node.sender.live_entry("srv")
        ctl.send(("ready", _rss()))
        while True:
            cmd = ctl.recv()
            if cmd == "stop":
                break
            if cmd == "rss":
                ctl.send(_rss())
                continue
            _, size, count, reliable = cmd
            payload = _payload(size)
            ctl.send("primed")
            ctl.recv()
            handles = [node.send("srv", payload, reliable=reliable, timeout=120) for _ in range(count)]
            for handle in handles if reliable else ():
                handle.result(300)
            ctl.send("sent")


_PAYLOADS: dict[int, bytes] = {}


def _payload(size: int) -> bytes:
    """The message a sender process sends, made once (its peak memory is then the runtime's plus
    one message the application holds)."""
    if size not in _PAYLOADS:
        _PAYLOADS.clear()
        _PAYLOADS[size] = os.urandom(size)
    return _PAYLOADS[size]


def _rss() -> dict[str, int]:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    return {k: int(v.split()[0]) // 1024 for k, v in fields.items()}  # MiB


# ------------------------------------------------------------------ one-way throughput
def fresh_root(base: str, floor: bool) -> str:
    root = tempfile.mkdtemp(prefix="env-", dir=base)
    os.chmod(root, 0o700)
    if floor:
        for name in ("srv", "cli"):
            for sub in ("inbox", "tmp"):
                os.makedirs(os.path.join(root, name, sub), mode=0o700)
    return root


def one_run(receiver, sender, size: int, count: int, reliable: bool | None) -> float:
    """Bytes per second of `count` messages of `size` from sender to receiver."""
    receiver.send(("expect", count))
    assert receiver.recv() == "armed"
    sender.send(("send", size, count) if reliable is None else ("send", size, count, reliable))
    assert sender.recv() == "primed"
    start = time.perf_counter()
    sender.send("go")
    done = receiver.recv()
    assert sender.recv() == "sent"
    return size * count / (done - start)


def one_way(env, size: int, count: int, rounds: int, reliable_too: bool) -> dict:
    from benchmarks.run import start, stop

    floor_root = fresh_root(env.dir, True)
    frecv, fctl = start(floor_receiver, floor_root, env.key)
    fsend, fsctl = start(floor_sender, floor_root, env.key)
    rt_root = fresh_root(env.dir, False)
    rrecv, rctl, idle = _start_runtime(runtime_receiver, rt_root, env.key_path)
    rsend, rsctl, idle_sender = _start_runtime(runtime_sender, rt_root, env.key_path)
    variants = {"floor": lambda: one_run(fctl, fsctl, size, count, None),
                "send": lambda: one_run(rctl, rsctl, size, count, False)}
    if reliable_too:
        variants["reliable"] = lambda: one_run(rctl, rsctl, size, count, True)
    runs: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            runs[name].append(variants[name]())
    rctl.send("rss")
    rsctl.send("rss")
    peak = {"receiver": rctl.recv(), "sender": rsctl.recv(), "idleReceiver": idle, "idleSender": idle_sender}
    for ctl in (fctl, fsctl, rctl, rsctl):
        ctl.send("stop")
    for proc in (frecv, fsend, rrecv, rsend):
        stop(proc)
    medians = {k: statistics.median(v) / MiB for k, v in runs.items()}
    out = {"messages": count, "rounds": rounds, "MiBps": {k: round(v, 1) for k, v in medians.items()},
           "sendVsFloor": round(medians["send"] / medians["floor"], 3), "peakRssMiB": peak}
    if reliable_too:
        out["reliableVsSend"] = round(medians["reliable"] / medians["send"], 3)
    return out


def _start_runtime(target, root: str, key_path: str):
    from benchmarks.run import CTX

    parent, child = CTX.Pipe()
    proc = CTX.Process(target=target, args=(child, root, key_path), daemon=True)
    proc.start()
    if not parent.poll(120):
        proc.kill()
        raise RuntimeError(f"{target.__name__} did not start")
    ready, rss = parent.recv()
    assert ready == "ready"
    return proc, parent, rss


# ------------------------------------------------------------------ SPC round trip, 4 MiB argument
def spc_round_trip(env, size: int, calls: int, rounds: int) -> dict:
    from benchmarks.run import start, stop
    from speed_runtime import Node

    import base64
    blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()  # `size` characters of JSON-safe text
    floor_root = fresh_root(env.dir, True)
    frecv, fctl = start(floor_receiver, floor_root, env.key)
    fctl.send(("echo",))
    assert fctl.recv() == "armed"
    floor = BigFloorEnd(floor_root, "cli", "srv", env.key)
    payload = blob.encode()
    rt_root = fresh_root(env.dir, False)
    rrecv, rctl, _ = _start_runtime(runtime_receiver, rt_root, env.key_path)
    runs: dict[str, list[float]] = {"floor": [], "call": []}
    with Node(rt_root, env.key_path, "cli", allow=["srv"], features=FEATURES) as node:
        def floor_call() -> None:
            floor.send(payload)
            while not floor.receive(10.0):
                pass

        def runtime_call() -> None:
            assert len(node.call("srv", "echo", {"blob": blob}, timeout=60)["blob"]) == len(blob)
        for _ in range(rounds):
            for name, call in random.sample([("floor", floor_call), ("call", runtime_call)], 2):
                for _ in range(calls):
                    t = time.perf_counter()
                    call()
                    runs[name].append((time.perf_counter() - t) * 1000)
    floor.send(b"stop")
    rctl.send("stop")
    stop(rrecv)
    fctl.send("stop")
    stop(frecv)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {"argumentBytes": len(blob), "calls": calls * rounds, "ms": {k: round(v, 1) for k, v in medians.items()},
            "callVsFloor": round(medians["call"] / medians["floor"], 2)}


# ------------------------------------------------------------------ loss: kill -9 under reliable sends
def loss_test(env, kills: int, per_kill: int) -> dict:
    from speed_runtime import Node, NodeUnavailableError

    root = fresh_root(env.dir, False)
    options = json.dumps({"features": FEATURES})

    def receiver() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.scripted_node", root, env.key_path, "r",
                                 "--allow", "s", "--delay-ms", "2", "--options", options],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
        assert proc.stdout.readline().startswith("ready")
        return proc

    instances: list[list[int]] = []
    readers = []

    def follow(proc) -> None:
        mine: list[int] = []
        instances.append(mine)

        def pump() -> None:
            for line in proc.stdout:
                if line.startswith("{"):
                    mine.append(json.loads(line)["data"]["n"])
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        readers.append(t)

    proc = receiver()
    follow(proc)
    handles, n, rng = [], 0, random.Random(7)
    with Node(root, env.key_path, "s", allow=["r"], features=FEATURES, ack_timeout=0.5, max_retransmissions=20,
              max_retransmission_interval=2.0, reliable_window=WINDOW) as s:
        for k in range(kills + 1):
            kill_at = n + rng.randint(per_kill // 4, per_kill) if k < kills else n + per_kill
            while n < kill_at:
                try:
                    handles.append(s.send("r", {"n": n}, reliable=True, timeout=60))
                    n += 1
                except NodeUnavailableError:
                    time.sleep(0.02)  # the receiver is between a kill and its restart: the application retries
            if k < kills:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc = receiver()
                follow(proc)
        outcomes = []
        for handle in handles:
            try:
                outcomes.append(handle.result(300).transmissions)
            except Exception:
                outcomes.append(0)
        counters = s.counters()
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    for t in readers:
        t.join(10)
    handled = [x for mine in instances for x in mine]
    return {"kills": kills, "sent": len(handles), "acknowledged": sum(1 for o in outcomes if o),
            "sendErrors": sum(1 for o in outcomes if not o), "handled": len(handled),
            "neverHandled": len(set(range(n)) - set(handled)),
            "handledTwiceWithinAnInstance": sum(len(mine) - len(set(mine)) for mine in instances),
            "handledAgainByTheNextInstance": len(handled) - len(set(handled)) -
            sum(len(mine) - len(set(mine)) for mine in instances),
            "retransmissions": counters["retransmissions"], "ackTimeoutSeconds": 0.5, "maxRetransmissions": 20,
            "window": WINDOW}


# ------------------------------------------------------------------ main
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and messages (a few minutes)")
    parser.add_argument("--tiny", action="store_true", help="small sizes, one round, one kill: proves it works")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--only", choices=("oneway", "spc", "loss"), action="append", default=None)
    parser.add_argument("--size", choices=("64 KiB", "1 MiB", "16 MiB", "64 MiB"), action="append", default=None,
                        help="only these sizes of the one-way measurement")
    args = parser.parse_args(argv)
    from benchmarks.run import Env

    quick = args.quick or args.tiny
    rounds = args.rounds or (1 if args.tiny else 2 if quick else 5)
    kills = args.kills if args.kills is not None else (1 if args.tiny else 3 if quick else 20)
    sizes = [("64 KiB", 64 * 1024, 64 if quick else 1024), ("1 MiB", MiB, 16 if quick else 64),
             ("16 MiB", 16 * MiB, 2 if quick else 4), ("64 MiB", 64 * MiB, 1)]
    if args.tiny:
        sizes = [("64 KiB", 64 * 1024, 8), ("1 MiB", MiB, 2)]
    if args.size:
        sizes = [s for s in sizes if s[0] in args.size]
    only = set(args.only or ("oneway", "spc", "loss"))
    env = Env.make()
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                    "loadBefore": [round(x, 2) for x in os.getloadavg()],
                    "mode": "tiny" if args.tiny else "quick" if args.quick else "full", "rounds": rounds}
    try:
        if "oneway" in only:
            report["oneWay"] = {label: one_way(env, size, count, rounds, True) for label, size, count in sizes}
        if "spc" in only:
            report["spc4MiB"] = spc_round_trip(env, 4 * MiB, 1 if args.tiny else 2 if quick else 5, rounds)
        if "loss" in only:
            report["loss"] = loss_test(env, kills, 20 if args.tiny else 40 if quick else 200)
    finally:
        shutil.rmtree(env.dir, ignore_errors=True)
    report["loadAfter"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
