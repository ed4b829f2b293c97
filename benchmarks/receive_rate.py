"""One process, two Nodes: time N one-way MESSAGEs of 64 B (or with a string of `--size` bytes)
from sending the first to the handler seeing the last, and the sending alone. `--checkout DIR` measures another checkout of the project
(for before/after comparisons, e.g. a worktree of an older commit); run it alternately with and
without to compare in the same window of load.

    python benchmarks/receive_rate.py --count 20000
    python benchmarks/receive_rate.py --count 20000 --checkout ../old
    python benchmarks/receive_rate.py --count 10000 --size 16384
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--size", type=int, default=0, help="a string of this many bytes in each message")
    p.add_argument("--checkout", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.checkout))
    from speed_runtime import Node, generate_key_file

    root = tempfile.mkdtemp(prefix="speed-receive-rate-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        key = generate_key_file(os.path.join(root, "speed.key"))
        env = os.path.join(root, "env")
        got, done = [0], threading.Event()

        def handler(_msg) -> None:
            got[0] += 1
            if got[0] == args.count:
                done.set()
        with Node(env, key, "r", allow=["s"]) as receiver, Node(env, key, "s", allow=["r"]) as sender:
            receiver.on_message(handler)
            blob = "x" * args.size
            started = time.perf_counter()
            for i in range(args.count):
                sender.send("r", {"i": i, "s": blob} if blob else i)
            sent = time.perf_counter() - started
            handled = done.wait(600)
            total = time.perf_counter() - started
            rejected = receiver.counters()["rejected"]
        print(f"{args.checkout}: sent {args.count} in {sent:.2f} s ({args.count / sent:,.0f}/s); "
              + (f"all handled after {total:.2f} s ({args.count / total:,.0f}/s)" if handled else
                 f"only {got[0]} handled after {total:.0f} s") + f"; rejected {rejected or 'none'}")
        return 0 if handled and not rejected else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
