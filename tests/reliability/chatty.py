"""Sender helper: `python -m tests.reliability.chatty ROOT KEYFILE NAME TARGET LEASE HEARTBEAT`.

Registers NAME, prints `ready ID`, then sends {"id": ID, "n": i} to TARGET as fast as it can.
Prints `lost N` and exits 5 when it learns that it lost its lease (after N sends)."""
import sys
import time

from speed_runtime import LeaseLostError, Node, SpeedError


def main() -> int:
    root, key, name, target, lease, beat = sys.argv[1:7]
    node = Node(root, key, name, allow=[target], lease_seconds=float(lease), heartbeat_seconds=float(beat),
                linger_seconds=0)
    node.start()
    print(f"ready {node.id}", flush=True)
    n = 0
    try:
        while True:
            try:
                node.send(target, {"id": node.id, "n": n})
                n += 1
                time.sleep(0.002)  # pacing, so the receiver keeps up on a loaded machine
            except LeaseLostError:
                print(f"lost {n}", flush=True)
                return 5
            except SpeedError:
                continue
    finally:
        node.close()


if __name__ == "__main__":
    sys.exit(main())
