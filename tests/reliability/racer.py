"""Race helper: `python -m tests.reliability.racer ROOT KEYFILE`.

For each `arm NAME` line on stdin it builds a Node (not yet started) and prints `armed`; on `go`
it starts it and prints `won NAME ID` or `lost NAME <error>`. Winners keep their node until stdin
closes, then close it and exit 0."""
import sys

from speed_runtime import NameInUseError, Node


def main() -> int:
    root, key = sys.argv[1:3]
    kept, armed = [], None
    for line in sys.stdin:
        word, _, arg = line.strip().partition(" ")
        if word == "arm":
            armed = Node(root, key, arg, lease_seconds=30, heartbeat_seconds=1)
            print("armed", flush=True)
        elif word == "go":
            try:
                armed.start()
            except NameInUseError as exc:
                print(f"lost {armed.name} {exc}", flush=True)
            else:
                kept.append(armed)
                print(f"won {armed.name} {armed.id}", flush=True)
    for node in kept:
        node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
