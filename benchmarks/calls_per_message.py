"""How many Python and C-function calls one-way MESSAGEs cost on each side, by function: counts,
so the same figures on a busy machine as on a quiet one (what a message costs in time is in
benchmarks/receiver_cpu.py and rtt_stages.py). For the work on the node's send and receive paths:
which layers a message goes through, and how often each is entered.

    python -m benchmarks.calls_per_message [--messages 5000] [--top 25]
    python -m benchmarks.calls_per_message --spc [--messages 2000]     # per SPC round trip

One receiver process and one sender process (`Node.send` of a small int, as receiver_cpu.py);
the sender counts the calls of its sending thread during the sends, the receiver the calls of all
its threads from its first message to its last (its background threads' few calls included).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks import callgrind

COUNTER = """
import collections, sys, threading
counts = collections.Counter()
def count(frame, event, arg):
    if event == "call":
        code = frame.f_code
        counts[f"{code.co_filename.rsplit('/speed_runtime/', 1)[-1]}:{code.co_name}"] += 1
    elif event == "c_call":
        counts["(C) " + getattr(arg, "__qualname__", getattr(arg, "__name__", "?"))] += 1
"""

RECEIVER = COUNTER + """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, count_n = sys.argv[2], sys.argv[3], int(sys.argv[4])
got, done = [0], threading.Event()
def handler(_message):
    got[0] += 1
    if got[0] == 1:
        counts.clear()  # from the first message on
    if got[0] == count_n:
        sys.setprofile(None)
        done.set()
threading.setprofile(count)  # every thread the node starts
with Node(root, key, "r", allow=["s"]) as node:
    node.on_message(handler)
    print("ready", flush=True)
    done.wait(600)
    threading.setprofile(None)
    print(json.dumps(dict(counts)), flush=True)
"""

SENDER = COUNTER + """
import json, sys
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, count_n = sys.argv[2], sys.argv[3], int(sys.argv[4])
with Node(root, key, "s", allow=["r"], linger_seconds=60) as node:
    node.send("r", 0)
    sys.setprofile(count)
    for i in range(count_n):
        node.send("r", i)
    sys.setprofile(None)
    print(json.dumps(dict(counts)), flush=True)
"""


CALLEE = COUNTER + """
import json, sys
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key = sys.argv[2], sys.argv[3]
threading.setprofile(count)
with Node(root, key, "r", allow=["s"]) as node:
    node.register("echo", lambda args: args)
    print("ready", flush=True)
    sys.stdin.readline()  # the caller warmed up
    counts.clear()
    sys.stdin.readline()  # the caller is done
    threading.setprofile(None)
    print(json.dumps(dict(counts)), flush=True)
"""

CALLER = COUNTER + """
import json, sys
sys.path.insert(0, sys.argv[1])
from speed_runtime import Node
root, key, count_n = sys.argv[2], sys.argv[3], int(sys.argv[4])
threading.setprofile(count)
with Node(root, key, "s", allow=["r"]) as node:
    for i in range(100):
        node.call("r", "echo", {"i": i})
    print("warm", flush=True)
    counts.clear()
    sys.setprofile(count)
    for i in range(count_n):
        node.call("r", "echo", {"i": i})
    sys.setprofile(None)
    threading.setprofile(None)
    print(json.dumps(dict(counts)), flush=True)
"""


@contextlib.contextmanager
def environment():
    """(root, key path) of a new environment in memory, removed afterwards."""
    from speed_runtime import generate_key_file

    base = tempfile.mkdtemp(prefix="speed-calls-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        key = os.path.join(base, "speed.key")
        generate_key_file(key)
        yield os.path.join(base, "env"), key
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_calls(calls: int) -> tuple[dict, dict]:
    """SPC round trips: (the caller's counts, all its threads; the callee's, all its threads)."""
    with environment() as (root, key):
        callee = subprocess.Popen([sys.executable, "-c", CALLEE, callgrind.REPO, root, key], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert callee.stdout.readline().strip() == "ready"
        caller = subprocess.Popen([sys.executable, "-c", CALLER, callgrind.REPO, root, key, str(calls)],
                                  stdout=subprocess.PIPE, text=True)
        assert caller.stdout.readline().strip() == "warm"
        callee.stdin.write("go\n")
        callee.stdin.flush()
        made = json.loads(caller.stdout.readline())
        callee.stdin.write("done\n")
        callee.stdin.flush()
        served = json.loads(callee.stdout.readline())
        caller.wait(60)
        callee.wait(60)
        return made, served


def run(messages: int) -> tuple[dict, dict]:
    with environment() as (root, key):
        rx = subprocess.Popen([sys.executable, "-c", RECEIVER, callgrind.REPO, root, key, str(messages + 1)],
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        tx = subprocess.run([sys.executable, "-c", SENDER, callgrind.REPO, root, key, str(messages)],
                            capture_output=True, text=True, check=True, timeout=600)
        received = json.loads(rx.stdout.readline())
        rx.wait(60)
        return json.loads(tx.stdout), received


def table(side: str, counts: dict, messages: int, top: int) -> str:
    python = sum(n for f, n in counts.items() if not f.startswith("(C)"))
    c_calls = sum(n for f, n in counts.items() if f.startswith("(C)"))
    lines = [f"{side}: {python / messages:.1f} Python calls and {c_calls / messages:.1f} C-function calls each",
             "| function | calls each |", "| --- | --- |"]
    for name, n in collections.Counter(counts).most_common(top):
        lines.append(f"| {name} | {n / messages:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--spc", action="store_true", help="SPC round trips (`call` of an echo) instead")
    args = parser.parse_args(argv)
    from speed_runtime.core import accel

    if args.spc:
        made, served = run_calls(args.messages)
        print(f"per-envelope work {accel.FORM}; {args.messages} round trips\n")
        print(table("caller (all threads)", made, args.messages, args.top) + "\n")
        print(table("callee (all threads)", served, args.messages, args.top))
        return 0
    sent, received = run(args.messages)
    print(f"per-envelope work {accel.FORM}; {args.messages} messages\n")
    print(table("sender (the sending thread)", sent, args.messages, args.top) + "\n")
    print(table("receiver (all threads, first message to last)", received, args.messages, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
