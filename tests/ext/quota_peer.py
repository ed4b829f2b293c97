"""A sending node process for the `quota` tests and benchmark.

Usage: python -m tests.ext.quota_peer ROOT KEYFILE NAME TARGET [--count N] [--interval S] [--size B]
       [--feature quota] [--options JSON] [--timeout S] [--non-blocking] [--wait-go] [--replay]

Registers NAME (allowing TARGET), prints `ready NAME id=ID pid=PID`, waits for a `go` line on stdin
when --wait-go is given, then sends COUNT messages {"n": i, "t": time.time(), "pad": "..."} (SIZE
bytes of padding) every INTERVAL seconds (0: as fast as it may). It prints one JSON line per failed
send ({"refused": i, "error": type, "limit": ..., "message": ...}) and at the end, or on SIGTERM,
{"done": sent, "refused": n, "waits": quotaWaits, "sendMs": [...]} (with --interval, the ms each send
took until its file was in the target's inbox). A different key file makes every envelope it sends fail
the receiver's tag check (a tampering sender: it authenticates as nobody); --replay delivers a second
copy of every message it sends, under another file name (a replaying sender: the copy authenticates
as this sender and is rejected as `replayed_nonce`).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
import time

from speed_runtime import Node, SpeedError

from tests.helpers.replay import send_and_replay


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("key")
    p.add_argument("name")
    p.add_argument("target")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--feature", action="append", default=[])
    p.add_argument("--options", default="{}")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--non-blocking", action="store_true")
    p.add_argument("--wait-go", action="store_true")
    p.add_argument("--replay", action="store_true")
    args = p.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    pad = "x" * args.size
    sent = refused = 0
    took: list[float] = []  # ms each send took until its file was in the inbox (paced senders: bounded)
    with Node(args.root, args.key, args.name, allow=[args.target], features=args.feature, linger_seconds=0,
              **json.loads(args.options)) as node:
        print(f"ready {node.name} id={node.id} pid={os.getpid()}", flush=True)
        if args.wait_go:
            sys.stdin.readline()
        send = functools.partial(send_and_replay, node) if args.replay else node.send
        start = time.monotonic()
        for i in range(args.count):
            if stop.is_set():
                break
            if args.interval:
                stop.wait(max(0.0, start + i * args.interval - time.monotonic()))
            try:
                began = time.perf_counter()
                send(args.target, {"n": i, "t": time.time(), "pad": pad}, timeout=args.timeout,
                     block=not args.non_blocking)
                if args.interval:
                    took.append(round((time.perf_counter() - began) * 1000, 3))
                sent += 1
            except SpeedError as exc:
                refused += 1
                print(json.dumps({"refused": i, "error": type(exc).__name__, "limit": getattr(exc, "limit", None),
                                  "message": str(exc)}), flush=True)
        print(json.dumps({"done": sent, "refused": refused, "waits": node.counters()["quotaWaits"], "sendMs": took}),
              flush=True)
        if args.wait_go:
            sys.stdin.readline()  # stay registered until told (the receiver may still check our entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
