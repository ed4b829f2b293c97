"""What one receiver costs: N sender processes send M one-way MESSAGEs of a few bytes to one
receiver process, which reports its rate (first to last message handled) and its own CPU time per
message (user and system, `os.times()`). With `--backlog` the receiver is stopped (SIGSTOP) while
the senders fill its inbox and resumed when they are done: the rate at which it drains a backlog.
`--checkout DIR` runs another checkout of the project (e.g. a worktree of an older commit); run
it alternately with and without to compare in the same window of load.

    python benchmarks/receiver_cpu.py --senders 8 --messages 24000
    python benchmarks/receiver_cpu.py --senders 1 --messages 20000 --backlog --checkout ../old
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RECEIVER = """
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, count, senders = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
got, first, done = [0], [0.0], threading.Event()
def handler(_message):
    if got[0] == 0:
        first[0] = time.perf_counter()
    got[0] += 1
    if got[0] == count:
        done.set()
with Node(root, key, "r", allow=[f"s{i}" for i in range(senders)]) as node:
    node.on_message(handler)
    cpu = os.times()
    print("ready", flush=True)
    finished = done.wait(600)
    took = time.perf_counter() - first[0]
    now = os.times()
    print(f"{got[0]} {took:.6f} {now.user - cpu.user:.6f} {now.system - cpu.system:.6f} {int(finished)}", flush=True)
"""

SENDER = """
import sys
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, name, count = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
with Node(root, key, name, allow=["r"], linger_seconds=60) as node:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        node.send("r", i)
    print("sent", flush=True)
    sys.stdin.readline()
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--messages", type=int, default=24000, help="in all, shared by the senders")
    p.add_argument("--backlog", action="store_true", help="stop the receiver while the senders fill its inbox")
    p.add_argument("--checkout", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = p.parse_args(argv)
    if args.senders < 1 or args.messages < args.senders:
        p.error("give at least one sender and at least one message per sender")
    checkout = os.path.abspath(args.checkout)
    sys.path.insert(0, checkout)
    from speed_runtime import generate_key_file

    share = args.messages // args.senders
    count = share * args.senders
    base = tempfile.mkdtemp(prefix="speed-receiver-cpu-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    procs: list[subprocess.Popen] = []
    try:
        key = os.path.join(base, "speed.key")
        generate_key_file(key)
        root = os.path.join(base, "env")
        rx = subprocess.Popen([sys.executable, "-c", RECEIVER, checkout, root, key, str(count), str(args.senders)],
                              stdout=subprocess.PIPE, text=True)
        procs.append(rx)
        if rx.stdout.readline().strip() != "ready":
            raise SystemExit("the receiver did not start")
        senders = [subprocess.Popen([sys.executable, "-c", SENDER, checkout, root, key, f"s{i}", str(share)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                   for i in range(args.senders)]
        procs += senders
        for s in senders:
            if s.stdout.readline().strip() != "ready":
                raise SystemExit("a sender did not start")
        if args.backlog:
            os.kill(rx.pid, signal.SIGSTOP)
        started = time.perf_counter()
        for s in senders:
            s.stdin.write("go\n")
            s.stdin.flush()
        for s in senders:
            s.stdout.readline()
        resumed = time.perf_counter()
        if args.backlog:
            os.kill(rx.pid, signal.SIGCONT)
        handled, took, user, system, finished = rx.stdout.readline().split()
        overall = time.perf_counter() - started
        drained = time.perf_counter() - resumed
        for s in senders:
            s.stdin.write("stop\n")
            s.stdin.flush()
        handled_n = int(handled)
        print(f"{checkout}: {args.senders} sender(s), {count} messages{' (backlog)' if args.backlog else ''}: "
              + (f"drained at {handled_n / drained:,.0f}/s; " if args.backlog else
                 f"receiver {handled_n / float(took):,.0f}/s first to last, {count / overall:,.0f}/s overall; ")
              + f"receiver CPU {float(user) * 1e6 / handled_n:.0f} µs user + {float(system) * 1e6 / handled_n:.0f} µs "
              f"system per message" + ("" if finished == "1" else f"; only {handled_n} handled"))
        return 0 if finished == "1" else 1
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


if __name__ == "__main__":
    sys.exit(main())
