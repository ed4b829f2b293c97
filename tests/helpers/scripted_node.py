"""A node process for multi-process tests whose behaviour the test sets: a message handler that
takes DELAY ms, a `slow` service that reports when it starts, node options as JSON.

Usage: python -m tests.helpers.scripted_node ROOT KEYFILE NAME [--allow N]... [--delay-ms MS]
       [--options JSON]
Prints `ready NAME id=ID pid=PID` once registered, then one JSON line per handled MESSAGE
({"from", "seq", "data"} and "messageId" when the message has one; raw bytes as {"sha256", "size"}) and one per service start ({"started": service, "args": ...}); on
SIGTERM it closes gracefully and prints `closed`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time

from speed_runtime import Node


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("key")
    p.add_argument("name")
    p.add_argument("--allow", action="append", default=[])
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--options", default="{}")
    args = p.parse_args()
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Event()  # `ready` is the first line

    def say(obj) -> None:
        ready.wait()
        with lock:
            print(json.dumps(obj), flush=True)

    def on_message(msg) -> None:
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)
        data = msg.data if not isinstance(msg.data, bytes) else \
            {"sha256": hashlib.sha256(msg.data).hexdigest(), "size": len(msg.data)}  # bytes: by digest
        said = {"from": msg.sender, "seq": msg.seq, "data": data}
        if msg.message_id is not None:  # a chunked or reliable message's id (extensions chunks, reliable)
            said["messageId"] = msg.message_id
        if msg.durable_id is not None:  # the durable extension's message id and redelivery mark
            said.update(durableId=msg.durable_id, redelivered=msg.redelivered)
        say(said)

    def slow(arguments: dict) -> dict:
        say({"started": "slow", "args": arguments})
        time.sleep(float(arguments.get("seconds", 1)))
        return {"slept": arguments.get("seconds", 1)}

    node = Node(args.root, args.key, args.name, allow=args.allow, **json.loads(args.options))
    node.on_message(on_message)
    node.register("slow", slow)
    node.register("echo", lambda a: a)
    with node:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print(f"ready {node.name} id={node.id} pid={os.getpid()}", flush=True)
        ready.set()
        while not stop.wait(0.2):
            pass
    say("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
