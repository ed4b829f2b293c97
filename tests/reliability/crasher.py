"""Crash helper: a single-threaded zygote that forks senders and kill -9's them at random points.

  python -m tests.reliability.crasher ROOT KEYFILE TARGET MODE MIN_KILLS MAX_KILLS BUDGET_S MAX_DELAY_MS SEED

Kills at least MIN_KILLS children, then goes on until MAX_KILLS or until BUDGET_S seconds have passed.

MODE deliver: the zygote registers the name `crasher` once; each child seals and delivers up to 8
  MESSAGEs {"i": iteration, "k": k, "blob": "x" * size} (sizes from 0 B to 512 KiB) through the
  runtime's transport (TargetDirs + deliver, the code under Node._send), sequence i*16 + k + 1 (2,000 children leave gaps far below the 65,536 a receiver accepts).
MODE node: each child starts a full Node `victim` (registration included) and sends the same
  MESSAGEs with Node.send until it is killed.
The zygote kills each child after a random delay in [0, MAX_DELAY_MS], reaps it, and records the
temporaries it finds in TARGET/tmp/ and speed_registry/. Prints one JSON summary line."""
import json
import os
import random
import signal
import sys
import time
import uuid

from speed_runtime import Node, load_key
from speed_runtime.core import payloads
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.fsutil import BOOT_ID, HOSTNAME, boottime
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.registry import Registry
from speed_runtime.transport import TargetDirs, deliver


def blob_size(rng):
    return rng.randint(0, 200) if rng.random() < 0.7 else rng.randint(64 << 10, 512 << 10)


def deliver_child(root, key, target, target_id, source_id, i, rng):
    dirs = TargetDirs(root, target)
    for k in range(8):
        body = payloads.encode_payload(payloads.message("crasher", target, {"i": i, "k": k,
                                                                         "blob": "x" * blob_size(rng)}))
        seq, nonce = i * 16 + k + 1, os.urandom(12)
        header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(body), source_id, target_id)
        deliver(dirs, envelope_filename("crasher", source_id, seq, nonce), seal(header, body, key, nonce))
    signal.pause()


def node_child(root, key, target, i, rng):
    node = Node(root, key, "victim", allow=[target], linger_seconds=0)
    node.start()
    for k in range(10**6):
        node.send(target, {"i": i, "k": k, "blob": "x" * blob_size(rng)})


def main() -> int:
    root, key_path, target, mode, min_kills, max_kills, budget, max_delay, seed = sys.argv[1:10]
    key, rng = load_key(key_path), random.Random(int(seed))
    registry = Registry(root)
    target_id = uuid.UUID(registry.read(target).id).bytes
    me = RegistryEntry(name="crasher", id=str(uuid.uuid4()), last_heartbeat=time.time(), pid=os.getpid(),
                       host=HOSTNAME, allow=(), lease_seconds=3600, boot_id=BOOT_ID, boot_time_heartbeat=boottime())
    if mode == "deliver":
        registry.register(me, time.time())
    tmp_dir, orphans, registry_tmps = os.path.join(root, target, "tmp"), set(), set()
    started = time.monotonic()
    kills = 0
    for i in range(int(max_kills)):
        if i >= int(min_kills) and time.monotonic() - started > float(budget):
            break
        child_seed = rng.getrandbits(32)
        pid = os.fork()
        if pid == 0:
            try:
                child_rng = random.Random(child_seed)
                if mode == "deliver":
                    deliver_child(root, key, target, target_id, uuid.UUID(me.id).bytes, i, child_rng)
                else:
                    node_child(root, key, target, i, child_rng)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, float(max_delay) / 1000))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        kills += 1
        orphans.update(os.listdir(tmp_dir))
        registry_tmps.update(n for n in os.listdir(registry.dir) if n.endswith(".tmp"))
    if mode == "deliver":
        registry.deregister("crasher", me.id)
    print(json.dumps({"kills": kills, "orphansSeen": len(orphans), "registryTmpsSeen": len(registry_tmps),
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
