"""A receiver's memory under a flood: one sender pushes COUNT messages of SIZE bytes at a receiver
whose handler takes DELAY ms; the receiver's peak resident memory (VmHWM) is read from /proc.
Contract 1.1 §5.5: the inbox is the queue, so memory must not follow the backlog.

    python benchmarks/flood_memory.py --count 4000 --size 262144 --delay-ms 10
    python benchmarks/flood_memory.py --checkout /path/to/an/older/checkout   # the same, before

Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


SENDER = """
import sys, time
from speed_runtime import Node
root, key, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
blob = "x" * (size - 64)
with Node(root, key, "s", allow=["r"], max_payload=max(1 << 20, size + 1024), linger_seconds=0) as s:
    t = time.monotonic()
    for n in range(count):
        s.send("r", {"n": n, "blob": blob})
    print(time.monotonic() - t, flush=True)
"""

RECEIVER = """
import sys, time, signal, threading
from speed_runtime import Node
root, key, delay, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
stop = threading.Event()
handled = [0]
def on(m):
    time.sleep(delay / 1000)
    handled[0] += 1
with Node(root, key, "r", allow=["s"], max_payload=max(1 << 20, size + 1024)) as node:
    node.on_message(on)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.wait(0.2):
        print(handled[0], flush=True)
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--size", type=int, default=256 * 1024)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--watch-seconds", type=float, default=20.0, help="how long to watch after the sends")
    parser.add_argument("--checkout", default=REPO)
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.checkout)}
    work = tempfile.mkdtemp(prefix="speed-flood-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    receiver = None
    try:
        root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
        subprocess.run([sys.executable, "-m", "speed_runtime", "keygen", key], env=env, check=True, cwd=work,
                       capture_output=True)
        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, root, key, str(args.delay_ms), str(args.size)],
                                    stdout=subprocess.PIPE, text=True, env=env, cwd=work)
        assert receiver.stdout.readline().strip() == "ready"
        start = _rss(receiver.pid, "VmRSS")
        sender = subprocess.run([sys.executable, "-c", SENDER, root, key, str(args.count), str(args.size)],
                                capture_output=True, text=True, env=env, timeout=3600, cwd=work)
        if sender.returncode:
            raise RuntimeError(sender.stderr[-2000:])
        deadline = time.monotonic() + args.watch_seconds
        while time.monotonic() < deadline:
            receiver.stdout.readline()
        handled = int(receiver.stdout.readline())
        report = {"checkout": args.checkout, "count": args.count, "sizeBytes": args.size, "delayMs": args.delay_ms,
                  "sendSeconds": round(float(sender.stdout), 2), "receiverStartMB": round(start, 1),
                  "receiverPeakMB": round(_rss(receiver.pid, "VmHWM"), 1), "handledAfterWatch": handled,
                  "loadAverage": os.getloadavg()[0]}
        print(json.dumps(report))
    finally:
        if receiver is not None:
            receiver.kill()
            receiver.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
