"""Fairness under a flood (extension `quota`): one flooding sender and seven steady senders write
to one receiver whose handler takes 2 ms. Measured per variant, in interleaved rounds:

- `no flood`:        the seven steady senders alone (the floor of their latency);
- `flood, quota`:    the flooder honours the receiver's published limits (`features=["quota"]`);
- `flood, v1 sender`: the flooder speaks only v1 and ignores them (the receiver still bounds its
                     own memory with its read-ahead; the inbox grows);
- `a busy core`:     no flood, but a process spinning on one core as the v1 flooder does (it sends
                     as fast as it can): what the flooder's CPU alone costs the others on this
                     machine, which no receiver can win back (a control, not a goal);
- `a busy directory`: no flood, but a process writing 1 KiB files as fast as it can into a directory
                     of the same file system that no node watches (a tmp file, then a rename, as a
                     sender does; none removed, as the v1 flood's are not): the flooder's CPU and
                     file-system traffic without a receiver (a control, not a goal).

Latency: from the steady sender's `time.time()` just before `send` to the receiver's handler start;
the first second of each round is a warm-up and not counted (the seven senders start together,
each with its first, cold send). Its first part, the steady senders' own `send` (until the file is
in the inbox), is reported apart (`sendP99Ms`): what happens before the receiver can see the file.
Reported: the steady senders' p50/p99 (median over rounds), their p99 against `no flood` of the
same run and (median of per-round ratios) of the same round and of the controls, the flood's
handled rate, the receiver's peak RSS (VmHWM), the most files the flood had in the inbox, the load
average.

Then the cost of one send, in interleaved batches (median µs per send): the floor (seal, tmp
file, rename: benchmarks/workers.py FloorEnd), a plain send to a v1-only receiver, a `quota` send
to a receiver whose window never fills (the admission check alone), and one whose window of 8 is
always full (a `stat` of the oldest file per send, and waits for the receiver).

    python benchmarks/bench_quota.py            # 5 rounds of 12 s per variant (about 5 minutes)
    python benchmarks/bench_quota.py --quick    # 1 round of 4 s per variant

Prints one JSON object.
"""
from __future__ import annotations

import argparse
import datetime
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
import timeit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks.scratch import scratch_environment  # noqa: E402  (no runtime imported: --checkout)
CHECKOUT = {"dir": REPO}  # whose runtime the flood rounds run (--checkout)
STEADY = [f"n{i}" for i in range(7)]
WARMUP_SECONDS = 1.0  # not counted: seven senders' first (cold) sends all at once
VARIANTS = ("no flood", "flood, quota", "flood, v1 sender", "a busy core", "a busy directory")
BUSY_DIRECTORY = r'''
import os, sys
work = sys.argv[1]
tmp, into = os.path.join(work, "busy-tmp"), os.path.join(work, "busy-dir")
os.mkdir(tmp)
os.mkdir(into)
pad, i = os.urandom(1100), 0
while True:
    name = f"flood.{i:020d}.env"
    fd = os.open(os.path.join(tmp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, pad)
    os.close(fd)
    os.rename(os.path.join(tmp, name), os.path.join(into, name))
    i += 1
'''

RECEIVER = r'''
import json, os, sys, time
from speed_runtime import Node
root, key, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
latencies, flood = {}, [0]
def on(message):
    now = time.time()
    time.sleep(0.002)  # the handler's work
    if message.sender == "flood":
        flood[0] += 1  # one lane per sender: never two at once
    else:
        latencies.setdefault(message.sender, []).append((now - message.data["t"]) * 1000)
with Node(root, key, "r", allow=["flood"] + [f"n{i}" for i in range(7)], **options) as node:
    node.on_message(on)
    print("ready", flush=True)
    expected = int(sys.stdin.readline().split()[1])
    deadline = time.monotonic() + 60  # the last steady messages may still be on their way (the slowest!)
    while sum(len(v) for v in list(latencies.values())) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    peak = next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"latencies": latencies, "flood": flood[0], "peakMB": peak}), flush=True)
    os._exit(0)  # not the graceful drain of what a v1 flood left behind
'''


def _names_in(directory: str) -> int:
    """How many names `directory` holds. On tmpfs (a directory's size is 20 bytes a name there) one
    stat: a listing of the flood's 200,000-300,000 names took 0.15-0.3 s of CPU each time, taken
    from the processes measured in the flood variants only. Elsewhere, a listing."""
    info = os.stat(directory)
    if info.st_dev not in _SIZE_PER_NAME:  # probed once per file system, beside `directory`
        probe = tempfile.mkdtemp(dir=os.path.dirname(directory))
        empty = os.stat(probe).st_size
        open(os.path.join(probe, "x"), "w").close()
        grown = os.stat(probe).st_size - empty
        shutil.rmtree(probe)
        _SIZE_PER_NAME[info.st_dev] = grown if grown == 20 and empty == 40 else 0
    per_name = _SIZE_PER_NAME[info.st_dev]
    if per_name:
        return info.st_size // per_name - 2  # "." and ".." are counted too
    return len(os.listdir(directory))


_SIZE_PER_NAME: dict[int, int] = {}  # per file system (st_dev): 20 on tmpfs, 0 where the size says nothing


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _run_env() -> dict:
    return {**os.environ, "PYTHONPATH": CHECKOUT["dir"]}


def _peer(root: str, key: str, name: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.ext.quota_peer", root, key, name, "r", "--wait-go", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=CHECKOUT["dir"], env=_run_env())
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        raise RuntimeError(f"sender {name} did not start: {line!r}")
    return proc


def one_round(variant: str, seconds: float, rate: float, flood_size: int, pending: int) -> dict:
    work, root, key = scratch_environment("speed-bench-quota-", CHECKOUT["dir"])
    procs: list[subprocess.Popen] = []
    try:
        options = {"features": ["quota"], "quota": {"pending": pending}}
        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, root, key, json.dumps(options)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=CHECKOUT["dir"],
                                    env=_run_env())
        procs.append(receiver)
        assert receiver.stdout.readline().strip() == "ready"
        count = int(seconds * rate)
        steady = [_peer(root, key, name, "--count", str(count), "--interval", str(1 / rate), "--feature", "quota")
                  for name in STEADY]
        procs += steady
        flooder = None
        if variant in ("a busy core", "a busy directory"):
            program = "while True: pass" if variant == "a busy core" else BUSY_DIRECTORY
            procs.append(subprocess.Popen([sys.executable, "-c", program, work]))
            time.sleep(1.0)
        elif variant != "no flood":
            features = ["--feature", "quota"] if variant == "flood, quota" else []
            flooder = _peer(root, key, "flood", "--count", str(10**9), "--size", str(flood_size), "--timeout", "60",
                            *features)
            procs.append(flooder)
        most, sampling = [0], threading.Event()

        def sample() -> None:  # once a second
            inbox = os.path.join(root, "r", "inbox")
            while not sampling.wait(1.0):
                most[0] = max(most[0], _names_in(inbox))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if flooder is not None:
            flooder.stdin.write("go\n")
            flooder.stdin.flush()
            time.sleep(1.0)  # the flood is under way before the steady senders start (the experiment)
        started = time.monotonic()
        for proc in steady:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        took: list[float] = []  # ms each steady send took (the warm-up second left out, as below)
        warm = int(rate * min(WARMUP_SECONDS, seconds / 4))  # each sender's messages of the first second
        for proc in steady:
            took += json.loads(proc.stdout.readline()).get("sendMs", [])[warm:]  # (older checkouts: none)
        receiver.stdin.write(f"stats {count * len(STEADY)}\n")
        receiver.stdin.flush()
        stats = json.loads(receiver.stdout.readline())
        elapsed = time.monotonic() - started
        sampling.set()
        sampler.join()
        handled = sum(len(stats["latencies"].get(name, [])) for name in STEADY)
        latencies = [v for name in STEADY for v in stats["latencies"].get(name, [])[warm:]]
        return {"variant": variant, "steadyHandled": handled, "steadySent": count * len(STEADY),
                "p50": _percentile(latencies, 0.50), "p99": _percentile(latencies, 0.99),
                "sendP99": _percentile(took, 0.99),
                "floodPerSecond": stats["flood"] / elapsed if flooder else 0.0, "receiverPeakMB": stats["peakMB"],
                "floodFilesMost": most[0], "load": os.getloadavg()[0]}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


SINK = r'''
import sys
from speed_runtime import Node
root, key, name, options = sys.argv[1], sys.argv[2], sys.argv[3], __import__("json").loads(sys.argv[4])
with Node(root, key, name, allow=["s", "q"], **options) as node:
    node.on_message(lambda message: None)
    print("ready", flush=True)
    sys.stdin.readline()
'''


def send_costs(rounds: int, count: int) -> dict:
    """Median µs per send of each variant, batches of `count` interleaved over `rounds`."""
    from benchmarks.workers import FloorEnd
    from speed_runtime import Node
    from speed_runtime.keyfile import load_key

    work, root, key = scratch_environment("speed-bench-quota-", REPO)
    sinks: list[subprocess.Popen] = []
    try:
        for name, options in (("v1", {}), ("roomy", {"features": ["quota"], "quota": {"pending": 65536}}),
                              ("tight", {"features": ["quota"], "quota": {"pending": 8}})):
            sink = subprocess.Popen([sys.executable, "-c", SINK, root, key, name, json.dumps(options)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
            sinks.append(sink)
            assert sink.stdout.readline().strip() == "ready"
        for home in ("floor", "floor-me"):
            for sub in ("inbox", "tmp"):
                os.makedirs(os.path.join(root, home, sub), mode=0o700, exist_ok=True)
        floor = FloorEnd(root, "floor-me", "floor", load_key(key).raw)
        body = {"n": 0, "pad": "x" * 100}
        payload = json.dumps({"from": "s", "to": "floor", "data": body}).encode()
        times: dict[str, list[float]] = {}
        with Node(root, key, "s", allow=["v1"], linger_seconds=0) as plain, \
                Node(root, key, "q", allow=["roomy", "tight"], features=["quota"], linger_seconds=0) as quota:
            variants = {"floor": lambda: floor.send(payload), "plain send": lambda: plain.send("v1", body),
                        "quota send, room": lambda: quota.send("roomy", body),
                        "quota send, window of 8 full": lambda: quota.send("tight", body)}
            order = list(variants)
            for _ in range(rounds):
                random.shuffle(order)
                for variant in order:
                    send = variants[variant]
                    started = time.perf_counter()
                    for _ in range(count):
                        send()
                    times.setdefault(variant, []).append((time.perf_counter() - started) / count * 1e6)
                floor_inbox = os.path.join(root, "floor", "inbox")
                for name in os.listdir(floor_inbox):  # nobody takes the floor's files
                    os.unlink(os.path.join(floor_inbox, name))
            # the admission check alone (a window with room), on the sender's own clock
            gate, entry, lock = quota.extensions["quota"], quota.sender.live_entry("roomy"), threading.Lock()
            with lock:
                checks = [timeit.timeit(lambda: gate.admit_send("roomy", entry, 1, 200, 10.0, lock), number=count * 10)
                          / (count * 10) * 1e6 for _ in range(rounds)]
        floor_us = statistics.median(times["floor"])
        out = {v: {"usPerSend": round(statistics.median(t), 1), "vsFloor": round(statistics.median(t) / floor_us, 2)}
               for v, t in times.items()}
        out["admission check alone"] = {"usPerSend": round(statistics.median(checks), 2),
                                        "vsFloor": round(statistics.median(checks) / floor_us, 3)}
        return out
    finally:
        for sink in sinks:
            sink.kill()
            sink.wait()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round of 4 s per variant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the steady senders send, per round")
    parser.add_argument("--rate", type=float, default=25.0, help="messages per second of each steady sender")
    parser.add_argument("--flood-size", type=int, default=1024, help="padding bytes of each flood message")
    parser.add_argument("--pending", type=int, default=64, help="the receiver's published `pending`")
    parser.add_argument("--sends", type=int, default=2000, help="sends per batch of the send-cost comparison")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="only these flood variants (the ratio needs `no flood`)")
    parser.add_argument("--checkout", default=REPO, help="run the flood rounds with the runtime of this checkout "
                                                         "(an older one, to compare); it needs tests/ext/quota_peer.py")
    parser.add_argument("--no-send-cost", action="store_true", help="skip the send-cost comparison")
    args = parser.parse_args(argv)
    CHECKOUT["dir"] = os.path.abspath(args.checkout)
    if args.quick:  # explicit smaller values still apply (the CI test runs it in seconds)
        args.rounds, args.seconds, args.sends = 1, min(args.seconds, 4.0), min(args.sends, 300)
    rng = random.Random(7)
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        order = list(args.variants)
        rng.shuffle(order)  # interleaved: each round runs every variant, in a new order
        for variant in order:
            results[variant].append(one_round(variant, args.seconds, args.rate, args.flood_size, args.pending))

    def median(variant: str, key: str) -> float:
        return round(statistics.median(r[key] for r in results[variant]), 2)

    costs = None if args.no_send_cost else send_costs(max(3, args.rounds * 2), args.sends)
    floor_p99 = median("no flood", "p99") if "no flood" in results else float("nan")
    def ratio_per_round(variant: str, base: str = "no flood") -> float:  # against `base` of the same round
        if base not in results:
            return float("nan")
        return round(statistics.median(r["p99"] / f["p99"] for r, f in zip(results[variant], results[base])), 2)

    summary = {v: {"p50Ms": median(v, "p50"), "p99Ms": median(v, "p99"),
                   "p99VsNoFlood": round(median(v, "p99") / floor_p99, 2),
                   "p99VsNoFloodSameRound": ratio_per_round(v),
                   "p99VsBusyCoreSameRound": ratio_per_round(v, "a busy core"),
                   "p99VsBusyDirectorySameRound": ratio_per_round(v, "a busy directory"),
                   "sendP99Ms": median(v, "sendP99"),
                   "steadyHandled": sum(r["steadyHandled"] for r in results[v]),
                   "steadySent": sum(r["steadySent"] for r in results[v]),
                   "floodPerSecond": median(v, "floodPerSecond"), "receiverPeakMB": median(v, "receiverPeakMB"),
                   "floodFilesMost": max(r["floodFilesMost"] for r in results[v])} for v in results}
    print(json.dumps({"date": datetime.date.today().isoformat(), "checkout": CHECKOUT["dir"],
                      "rounds": args.rounds, "seconds": args.seconds,
                      "steadySenders": len(STEADY), "ratePerSender": args.rate, "handlerMs": 2,
                      "pending": args.pending, "floodSize": args.flood_size,
                      "loadBefore": [round(x, 2) for x in load_before],
                      "loadAfter": [round(x, 2) for x in os.getloadavg()], "variants": summary, "sendCost": costs,
                      "rounds_raw": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
