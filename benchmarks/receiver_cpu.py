"""What one receiver costs: N sender processes send M one-way MESSAGEs of a few bytes to one
receiver process, which reports its rate (first to last message handled) and its own CPU time per
message (user and system, `os.times()`); each sender reports its CPU time for its sends. With
`--backlog` the receiver is stopped (SIGSTOP) while the senders fill its inbox and resumed when
they are done: the rate at which it drains a backlog. `--checkout DIR` runs another checkout of
the project (e.g. a worktree of an older commit); run it alternately with and without to compare
in the same window of load.

`--floor` runs the floor beside it, alternately (floor, runtime, runtime, floor per round): the
same processes doing the least a file transport must (benchmarks/workers.py FloorEnd: seal, write
tmp/, rename; raw inotify, read, unlink, open), and prints the one-way budget: what each side may
cost per message for the runtime to reach 60 % of the floor's rate (1/0.6 times the floor's).

    python benchmarks/receiver_cpu.py --senders 8 --messages 24000
    python benchmarks/receiver_cpu.py --senders 1 --messages 20000 --floor --rounds 2
    python benchmarks/receiver_cpu.py --senders 1 --messages 20000 --backlog --checkout ../old

`--trace` gives the runtime's nodes journals (`trace=True`): against the same command without it,
what the journals cost per message (in instructions with `--callgrind`, which no load moves).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import callgrind  # noqa: E402  (run as a script: the benchmarks package beside it)

# under --callgrind each process marks the start and the end of its work (benchmarks/callgrind.py)
MARKS = """
import ctypes, os
mark = ctypes.CDLL(os.environ["SPEED_BENCH_CALLGRIND_MARKS"]).speed_mark if os.environ.get(
    "SPEED_BENCH_CALLGRIND_MARKS") else (lambda name: None)
"""

RECEIVER = MARKS + """
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, count, senders = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
trace = sys.argv[6] == "trace"
got, first, done = [0], [0.0], threading.Event()
def handler(_message):
    if got[0] == 0:
        first[0] = time.perf_counter()
    got[0] += 1
    if got[0] == count:
        done.set()
with Node(root, key, "r", allow=[f"s{i}" for i in range(senders)], trace=trace) as node:
    node.on_message(handler)
    cpu = os.times()
    mark(b'start')
    print("ready", flush=True)
    finished = done.wait(600)
    took = time.perf_counter() - first[0]
    mark(b'end')
    now = os.times()
    print(f"{got[0]} {took:.6f} {now.user - cpu.user:.6f} {now.system - cpu.system:.6f} {int(finished)}", flush=True)
"""

SENDER = MARKS + """
import os, sys
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, name, count = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
with Node(root, key, name, allow=["r"], linger_seconds=60, trace=sys.argv[6] == "trace") as node:
    print("ready", flush=True)
    sys.stdin.readline()
    cpu = os.times()
    mark(b'start')
    for i in range(count):
        node.send("r", i)
    mark(b'end')
    now = os.times()
    print(f"sent {now.user - cpu.user:.6f} {now.system - cpu.system:.6f}", flush=True)
    sys.stdin.readline()
"""

FLOOR_RECEIVER = MARKS + """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.workers import FloorEnd
from speed_runtime.keyfile import load_key
root, key, count = sys.argv[2], load_key(sys.argv[3]).raw, int(sys.argv[4])
end = FloorEnd(root, "r", "s0", key)
cpu = os.times()
mark(b'start')
print("ready", flush=True)
got, first = 0, 0.0
while got < count:
    n = len(end.receive(60.0))
    if n and not got:
        first = time.perf_counter()
    got += n
took = time.perf_counter() - first
mark(b'end')
now = os.times()
print(f"{got} {took:.6f} {now.user - cpu.user:.6f} {now.system - cpu.system:.6f} 1", flush=True)
"""

FLOOR_SENDER = MARKS + """
import os, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.workers import FloorEnd
from speed_runtime.keyfile import load_key
root, key, name, count = sys.argv[2], load_key(sys.argv[3]).raw, sys.argv[4], int(sys.argv[5])
end = FloorEnd(root, name, "r", key)
payload = b'{"from":"%s","to":"r","data":1}' % name.encode()
print("ready", flush=True)
sys.stdin.readline()
cpu = os.times()
mark(b'start')
for i in range(count):
    end.send(payload)
mark(b'end')
now = os.times()
print(f"sent {now.user - cpu.user:.6f} {now.system - cpu.system:.6f}", flush=True)
sys.stdin.readline()
"""
HERE = callgrind.REPO  # the floor always comes from this checkout


def measure(variant: str, checkout: str, senders_n: int, share: int, backlog: bool,
            counts: str | None = None, trace: bool = False) -> dict:
    """One run: the receiver's rate and CPU per message, the senders' CPU per message; with
    `counts` (a directory) every process runs under callgrind and the instructions per message
    of the receiver and of the senders are added."""
    from speed_runtime import generate_key_file

    prefix, env = [], None
    if counts:
        # valgrind's own lines go to a file, so stderr carries only what the processes say
        prefix = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-line=no",
                  f"--log-file={counts}/vg.%p", f"--callgrind-out-file={counts}/cg.%p"]
        env = {**os.environ, callgrind.ENV: callgrind.build_helper(counts)}

    count = share * senders_n
    base = tempfile.mkdtemp(prefix="speed-receiver-cpu-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    procs: list[subprocess.Popen] = []
    try:
        key = os.path.join(base, "speed.key")
        generate_key_file(key)
        root = os.path.join(base, "env")
        names = [f"s{i}" for i in range(senders_n)]
        if variant == "floor":
            for name in ["r", *names]:
                for sub in ("inbox", "tmp"):
                    os.makedirs(os.path.join(root, name, sub), mode=0o700)
            rx_argv = [FLOOR_RECEIVER, HERE, root, key, str(count)]
            tx_argv = lambda name: [FLOOR_SENDER, HERE, root, key, name, str(share)]  # noqa: E731
        else:
            journals = "trace" if trace else "-"
            rx_argv = [RECEIVER, checkout, root, key, str(count), str(senders_n), journals]
            tx_argv = lambda name: [SENDER, checkout, root, key, name, str(share), journals]  # noqa: E731
        rx = subprocess.Popen([*prefix, sys.executable, "-c", *rx_argv], stdout=subprocess.PIPE, text=True, env=env)
        procs.append(rx)
        if rx.stdout.readline().strip() != "ready":
            raise SystemExit("the receiver did not start")
        senders = [subprocess.Popen([*prefix, sys.executable, "-c", *tx_argv(name)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=env) for name in names]
        procs += senders
        for s in senders:
            if s.stdout.readline().strip() != "ready":
                raise SystemExit("a sender did not start")
        if backlog:
            os.kill(rx.pid, signal.SIGSTOP)
        started = time.perf_counter()
        for s in senders:
            s.stdin.write("go\n")
            s.stdin.flush()
        sent = [s.stdout.readline().split() for s in senders]
        if any(not line for line in sent):
            raise SystemExit("a sender failed")
        resumed = time.perf_counter()
        if backlog:
            os.kill(rx.pid, signal.SIGCONT)
        handled, took, user, system, finished = rx.stdout.readline().split()
        overall = time.perf_counter() - started
        drained = time.perf_counter() - resumed
        for s in senders:
            s.stdin.write("stop\n")
            s.stdin.flush()
        handled_n = int(handled)
        instructions = {}
        if counts:
            for proc in procs:
                proc.wait(600)
            counted = callgrind.dumps(counts)
            work = {pid: sum(n for name, n in marks if name == "end") for (pid, _), marks in counted.items()}
            instructions = {"rx_instructions": work.get(rx.pid, 0) / handled_n,
                            "tx_instructions": sum(work.get(s.pid, 0) for s in senders) / count}
        return {**instructions, "handled": handled_n, "count": count, "finished": finished == "1",
                "rate": handled_n / float(took), "overall": count / overall, "drained": handled_n / drained,
                "rx_user": float(user) * 1e6 / handled_n, "rx_system": float(system) * 1e6 / handled_n,
                "tx_user": sum(float(x[1]) for x in sent) * 1e6 / count,
                "tx_system": sum(float(x[2]) for x in sent) * 1e6 / count}
    finally:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def describe(where: str, senders_n: int, m: dict, backlog: bool) -> str:
    return (f"{where}: {senders_n} sender(s), {m['count']} messages{' (backlog)' if backlog else ''}: "
            + (f"drained at {m['drained']:,.0f}/s; " if backlog else
               f"receiver {m['rate']:,.0f}/s first to last, {m['overall']:,.0f}/s overall; ")
            + f"receiver CPU {m['rx_user']:.0f} µs user + {m['rx_system']:.0f} µs system per message; senders' CPU "
            f"{m['tx_user']:.0f} µs user + {m['tx_system']:.0f} µs system per message"
            + ("" if m["finished"] else f"; only {m['handled']} handled"))


ONE_WAY_GOAL = 0.6  # of the floor's rate (issue 30)


def budget(floor: dict, runtime: dict) -> str:
    """Per message, each side's CPU beside the floor's and its budget: 1/0.6 of the floor's (a side
    that costs that much more caps the rate at 60 % of the floor's)."""
    lines = ["| per message | floor | runtime | budget (floor ÷ 0.6) | runtime − budget |", "| --- | --- | --- | --- | --- |"]
    for label, key in (("receiver CPU, µs (user + system)", "rx"), ("senders' CPU, µs (user + system)", "tx")):
        f, r = floor[f"{key}_user"] + floor[f"{key}_system"], runtime[f"{key}_user"] + runtime[f"{key}_system"]
        lines.append(f"| {label} | {f:.1f} | {r:.1f} | {f / ONE_WAY_GOAL:.1f} | {r - f / ONE_WAY_GOAL:+.1f} |")
    lines.append(f"| rate, first to last | {floor['rate']:,.0f} /s | {runtime['rate']:,.0f} /s "
                 f"({runtime['rate'] / floor['rate']:.0%}) | {floor['rate'] * ONE_WAY_GOAL:,.0f} /s | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--messages", type=int, default=24000, help="in all, shared by the senders")
    p.add_argument("--backlog", action="store_true", help="stop the receiver while the senders fill its inbox")
    p.add_argument("--checkout", default=HERE)
    p.add_argument("--floor", action="store_true", help="the floor beside it, A B B A, and the one-way budget")
    p.add_argument("--rounds", type=int, default=1, help="with --floor: A B B A rounds")
    p.add_argument("--trace", action="store_true", help="the runtime's nodes keep journals (what journals cost: "
                                                        "against a run without)")
    p.add_argument("--callgrind", action="store_true", help="with --floor: count instructions per message instead "
                                                            "(every process under callgrind, once per variant)")
    args = p.parse_args(argv)
    if args.senders < 1 or args.messages < args.senders:
        p.error("give at least one sender and at least one message per sender")
    checkout = os.path.abspath(args.checkout)
    sys.path.insert(0, checkout)
    share = args.messages // args.senders
    if not args.floor:
        m = measure("runtime", checkout, args.senders, share, args.backlog, trace=args.trace)
        print(describe(checkout, args.senders, m, args.backlog))
        return 0 if m["finished"] else 1
    if args.callgrind:
        callgrind.require()
        counted = {}
        for variant in ("floor", "runtime"):
            directory = tempfile.mkdtemp(prefix="speed-callgrind-")
            try:
                counted[variant] = measure(variant, checkout, args.senders, share, args.backlog, directory, args.trace)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        print(f"instructions per message under callgrind, {args.senders} sender(s), {share * args.senders} messages:")
        print("| per message | floor | runtime | budget (floor ÷ 0.6) | runtime − budget |\n| --- | --- | --- | --- | --- |")
        for label, key in (("receiver, instructions", "rx_instructions"), ("senders, instructions", "tx_instructions")):
            f, r = counted["floor"][key], counted["runtime"][key]
            print(f"| {label} | {f:,.0f} | {r:,.0f} | {f / ONE_WAY_GOAL:,.0f} | {r - f / ONE_WAY_GOAL:+,.0f} |")
        return 0
    runs: dict[str, list[dict]] = {"floor": [], "runtime": []}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for variant in ("floor", "runtime", "runtime", "floor"):
            m = measure(variant, checkout, args.senders, share, args.backlog, trace=args.trace)
            print(describe(variant if variant == "floor" else checkout, args.senders, m, args.backlog))
            runs[variant].append(m)
            if not m["finished"]:
                return 1
    med = {v: {k: statistics.median(m[k] for m in ms) for k in ms[0] if k != "finished"} for v, ms in runs.items()}
    print(f"\nmedians of {2 * args.rounds} runs each, load average {load:.1f} → {os.getloadavg()[0]:.1f}:")
    print(budget(med["floor"], med["runtime"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
