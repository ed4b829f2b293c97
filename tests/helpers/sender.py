"""A sender process for multi-process tests: sends COUNT messages {"n": i} to TARGET.

Usage: python -m tests.helpers.sender ROOT KEYFILE NAME TARGET COUNT
Prints `ready` once registered and waits for a line on stdin before sending, so that all senders
start together; prints `done N` at the end.
"""
import sys

from speed_runtime import Node


def main() -> int:
    root, key, name, target, count = sys.argv[1:6]
    with Node(root, key, name, allow=[target]) as node:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(int(count)):
            node.send(target, {"n": i})
        print(f"done {count}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
