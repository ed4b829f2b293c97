"""The durable extension attacked as a member of the environment (holding the key) would, and at the
limits of its process (docs/RELIABILITY.md, "Red team: durable (issue 26)"). Each attack is run
against real `speed node --durable` processes of the runtime on the Python path and prints its
figures as JSON; run it in a checkout of an older commit to get that commit's figures.

    python benchmarks/durable_red_team.py                   # every attack
    python benchmarks/durable_red_team.py forged_floor fds  # some
    python benchmarks/durable_red_team.py --dir /path/on/disk

Attacks:
- forged_floor: one durable MESSAGE with id = base = 2^63-1 and the victim's stream, from a random
  source ID (the finding); forged_floor_lineage1/2: one or two such copies from an instance the
  sender really had (its lineage); how many of the sender's next 20 messages are handled, and of 3
  more after both nodes restarted.
- torn_ledger: the receiver under `ulimit -f 16` (SIGXFSZ ignored), 100 durable messages: what its
  stderr says, torn records in its ledger, `speed receipts`, and after a restart without the limit
  what was lost or handled twice.
- fds: the receiver under `ulimit -n 64`, 60 durable senders one after another (fds_320: 320, ten
  times the default durable_open_ledgers).
- fifo_ledger: a FIFO in place of the receiver's ledger of a sender.
- streams_flood: 10,000 copies from the sender's lineage, each of a new stream.
- ids_flood: 10,000 copies on the sender's stream, each a new isolated id far ahead.
- targets: a sender with 2,000 targets that never come online (its descriptors).
- memory_limit: the receiver under `ulimit -v` (12 MiB above its idle reservation) meets a 12 MiB
  ledger to read.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPEED = [sys.executable, "-m", "speed_runtime"]
TOP = 2**63 - 1


class Env:
    """A communication directory on disk with a key, and the receiver `rx` as a real process."""

    def __init__(self, parent: str):
        from speed_runtime import generate_key_file
        self.base = tempfile.mkdtemp(prefix="speed-red-", dir=parent)
        os.chmod(self.base, 0o700)
        self.root = os.path.join(self.base, "env")
        self.key = os.path.join(self.base, "speed.key")
        generate_key_file(self.key)
        self.procs: list[subprocess.Popen] = []

    def receiver(self, *, allow=("tx",), limit: tuple[int, int] | None = None, tag: str = "rx") -> subprocess.Popen:
        def preexec() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            if limit is not None:
                resource.setrlimit(limit[0], (limit[1], limit[1]))
        cmd = SPEED + ["node", "--dir", self.root, "--key", self.key, "--name", "rx", "--durable", "--echo-messages"]
        for name in allow:
            cmd += ["--allow", name]
        out = open(os.path.join(self.base, f"{tag}.out"), "w")
        err = open(os.path.join(self.base, f"{tag}.err"), "w")
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=preexec, cwd=REPO)
        out.close()
        err.close()
        self.procs.append(proc)
        proc.tag = tag  # type: ignore[attr-defined]
        wait(lambda: "ready rx" in self.text(tag, "out") or proc.poll() is not None, 60)
        return proc

    def text(self, tag: str, kind: str) -> str:
        try:
            with open(os.path.join(self.base, f"{tag}.{kind}"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def handled(self, tag: str) -> list[dict]:
        out = []
        for line in self.text(tag, "out").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "durableId" in value:
                out.append(value)
        return out

    def instance(self, name: str) -> bytes:
        with open(os.path.join(self.root, "speed_registry", f"{name}.node")) as f:
            return uuid.UUID(json.load(f)["id"]).bytes

    def stream(self, sender: str, target: str) -> str:
        with open(os.path.join(self.root, sender, "durable", "outbox", target, "stream")) as f:
            return f.read().strip()

    def forge(self, *, source: bytes, stream: str, msg_id: int, base: int, seq: int, sender: str = "tx") -> None:
        from speed_runtime import load_key
        from speed_runtime.core import payloads
        from speed_runtime.core.durable import FLAG_DURABLE, DurableFields, add_fields
        from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
        from speed_runtime.transport import inject
        body = add_fields(payloads.encode_payload(payloads.message(sender, "rx", "forged")),
                          DurableFields(stream, msg_id, base, int(time.time() * 1000) + 3_600_000))
        nonce = os.urandom(12)
        header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(body), source, self.instance("rx"),
                        FLAG_DURABLE)
        inject(self.root, "rx", envelope_filename(sender, source, seq, nonce), seal(header, body, load_key(self.key),
                                                                                   nonce))

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)
        shutil.rmtree(self.base, ignore_errors=True)


def wait(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def ledger_descriptors(pid: int) -> list[str]:
    """What the descriptors of process `pid` open in durable/ledger/ directories."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return [link for link in links if "/durable/ledger/" in link]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def node(env: Env, name: str, **options):
    from speed_runtime import Node
    return Node(env.root, env.key, name, allow=["rx"], durable=True, **options)


def pending(tx) -> int:
    return len(tx.extension("durable").outbox_items())


# ============================================================================ the attacks
def forged_floor(env: Env, copies: str = "anySource") -> dict:
    """`copies`: anySource (one copy, a random source ID), lineage1 / lineage2 (one or two copies
    from an instance the sender had): the honest sender's next 20 messages, then 3 after both
    nodes restarted."""
    rx = env.receiver()
    with node(env, "tx") as tx:
        for n in range(2):
            tx.send("rx", n, durable=True, confirm=True, timeout=20)
        earlier = tx.id_bytes
    stream = env.stream("tx", "rx")
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        forged = 1 if copies == "anySource" else int(copies[-1])
        for k in range(forged):
            env.forge(source=os.urandom(16) if copies == "anySource" else earlier, stream=stream, msg_id=TOP - k,
                      base=TOP - k, seq=1000 + k)
        wait(lambda: len(env.handled("rx")) >= 2 + (0 if copies == "anySource" else forged) or
             "unknown_sender" in env.text("rx", "out"), 5)
        for n in range(20):
            tx.send("rx", {"after": n}, durable=True)
        wait(lambda: not pending(tx), 20)
        handled = sum(1 for m in env.handled("rx") if isinstance(m["data"], dict))
    env.stop(rx)
    env.receiver(tag="rx2")
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        for n in range(3):
            tx.send("rx", {"restarted": n}, durable=True)
        wait(lambda: not pending(tx), 20)
    return {"forgedCopies": forged, "handledOf20": handled,
            "afterRestartHandledOf3": sum(1 for m in env.handled("rx2") if isinstance(m["data"], dict))}


def torn_ledger(env: Env) -> dict:
    rx = env.receiver(limit=(resource.RLIMIT_FSIZE, 16 << 10))
    ledger = os.path.join(env.root, "rx", "durable", "ledger", "tx.log")
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        for n in range(100):
            tx.send("rx", n, durable=True)
        wait(lambda: "ledger" in env.text("rx", "err") and "tx" in env.text("rx", "err"), 30)
        wait(lambda: False, 3)  # let it try (a silent wedge shows as nothing more happening)
        waiting = pending(tx)
        env.stop(rx)
        torn = 0
        with open(ledger, "rb") as f:
            for line in f.read().splitlines():
                try:
                    json.loads(line)
                except ValueError:
                    torn += 1
        receipts = subprocess.run(SPEED + ["receipts", "rx", "--dir", env.root, "--key", env.key], capture_output=True,
                                  text=True, cwd=REPO)
        env.receiver(tag="rx2")
        wait(lambda: not pending(tx), 60)
        left = pending(tx)
    again = subprocess.run(SPEED + ["receipts", "rx", "--dir", env.root, "--key", env.key], capture_output=True,
                           text=True, cwd=REPO)
    runs: dict = {}
    for m in env.handled("rx") + env.handled("rx2"):
        runs.setdefault(m["data"], []).append(m["redelivered"])
    return {"stderrLinesAboutTheLedger": sum("ledger" in line for line in env.text("rx", "err").splitlines()),
            "unacknowledgedUnderTheLimit": waiting, "tornRecords": torn,
            "speedReceiptsExit": receipts.returncode,
            "speedReceiptsBroken": [line.strip() for line in receipts.stdout.splitlines() if "BROKEN" in line][:2],
            "lostAfterRestart": 100 - len(runs), "stillWaitingAfterRestart": left,
            "speedReceiptsAfterRestartExit": again.returncode,
            "brokenAfterRestart": [line.strip() for line in again.stdout.splitlines() if "BROKEN" in line][:2],
            "handledTwiceUnmarked": sum(1 for flags in runs.values() if len(flags) > 1 and not all(flags[1:]))}


def fds(env: Env, senders: int = 60) -> dict:
    names = [f"s{i:03d}" for i in range(senders)]
    rx = env.receiver(allow=names, limit=(resource.RLIMIT_NOFILE, 64))
    confirmed, ledger_fds = 0, 0
    for name in names:
        if rx.poll() is not None:
            break
        try:
            with node(env, name) as tx:
                tx.send("rx", name, durable=True, confirm=True, timeout=10)
                confirmed += 1
        except Exception:
            pass
        if rx.poll() is None:
            ledger_fds = max(ledger_fds, len(ledger_descriptors(rx.pid)))
    err = env.text("rx", "err")
    return {"senders": senders, "confirmed": confirmed, "receiverAlive": rx.poll() is None,
            "tooManyOpenFilesLines": err.count("Too many open files"), "mostLedgerDescriptors": ledger_fds}


def fifo_ledger(env: Env) -> dict:
    rx = env.receiver()
    os.mkfifo(os.path.join(env.root, "rx", "durable", "ledger", "tx.log"))
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        tx.send("rx", "x", durable=True)
        wait(lambda: "tx.log" in env.text("rx", "err"), 10)
        waiting = pending(tx)
    return {"receiverAlive": rx.poll() is None, "stderrSaysSo": "tx.log" in env.text("rx", "err"),
            "acknowledged": 1 - waiting, "handled": len(env.handled("rx"))}


def flood(env: Env, kind: str, count: int = 10_000) -> dict:
    rx = env.receiver()
    with node(env, "tx") as tx:
        tx.send("rx", "first", durable=True, confirm=True, timeout=20)
        earlier = tx.id_bytes
    stream = env.stream("tx", "rx")
    rss_before = rss_kib(rx.pid)
    started = time.monotonic()
    for i in range(count):
        s = uuid.uuid4().hex if kind == "streams" else stream
        env.forge(source=earlier, stream=s, msg_id=(1 if kind == "streams" else 1_000_000 + 3 * i), base=1,
                  seq=100 + i)
    inbox = os.path.join(env.root, "rx", "inbox")
    wait(lambda: not [n for n in os.listdir(inbox) if n.endswith(".env")], 600)
    took = time.monotonic() - started
    ledger = os.path.join(env.root, "rx", "durable", "ledger", "tx.log")
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        for n in range(10):
            tx.send("rx", {"after": n}, durable=True)
        wait(lambda: not pending(tx), 30)
        honest = 10 - pending(tx)
    streams = set()
    with open(ledger, "rb") as f:
        for line in f.read().splitlines():
            try:
                streams.add(next(iter(json.loads(line).values()))["stream"])
            except (ValueError, KeyError, TypeError, StopIteration):
                pass
    return {"copies": count, "seconds": round(took, 1), "handled": len(env.handled("rx")) - 1 - honest,
            "rssGrowthMiB": round((rss_kib(rx.pid) - rss_before) / 1024, 1),
            "ledgerMiB": round(os.path.getsize(ledger) / 2**20, 2), "streamsInLedger": len(streams),
            "honestHandledOf10After": honest}


def memory_limit(env: Env) -> dict:
    """The receiver under `ulimit -v` 12 MiB above what it reserves idle, and a 12 MiB ledger of the
    sender to read when its next copy comes."""
    from speed_runtime.core import durable as d
    rx = env.receiver()
    with node(env, "tx") as tx:
        tx.send("rx", "first", durable=True, confirm=True, timeout=20)
    env.stop(rx)
    ledger = d.StreamLedger(env.stream("tx", "rx"))
    rkey = d.receipt_key(bytes(32))
    path = os.path.join(env.root, "rx", "durable", "ledger", "tx.log")
    with open(path, "ab") as f:
        size, i = os.path.getsize(path), 0
        while size < 12 << 20:
            r = ledger.issue(rkey, "rx", "tx", 10 + i, "handled", 1)
            ledger.record(r)
            line = d.ledger_line("receipt", {**r.to_json(), "base": 1})
            f.write(line)
            size, i = size + len(line), i + 1
    probe = env.receiver(tag="probe")
    with open(f"/proc/{probe.pid}/status") as f:
        vm_kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    env.stop(probe)
    rx = env.receiver(tag="rxv", limit=(resource.RLIMIT_AS, (vm_kib + 12 * 1024) * 1024))
    with node(env, "tx", durable_retry_seconds=0.2) as tx:
        tx.send("rx", "second", durable=True)
        wait(lambda: "ledger" in env.text("rxv", "err") or not pending(tx), 30)
        wait(lambda: False, 3)
        waiting = pending(tx)
    return {"receiverAlive": rx.poll() is None, "stderrSaysSo": "out of memory" in env.text("rxv", "err"),
            "acknowledged": 1 - waiting, "handled": len(env.handled("rxv"))}


def targets(env: Env, count: int = 2000) -> dict:
    """A sender stores one durable message for each of `count` targets that never come online:
    its open descriptors, then again after a restart (its outbox loaded)."""
    names = [f"t{i:05d}" for i in range(count)]

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))
    before = open_fds()
    from speed_runtime import Node
    started = time.monotonic()
    with Node(env.root, env.key, "tx", allow=names, durable=True) as tx:
        for name in names:
            tx.send(name, 1, durable=True)
        stored = open_fds() - before
    took = time.monotonic() - started
    with Node(env.root, env.key, "tx", allow=names, durable=True) as tx:
        loaded = open_fds() - before
        waiting = len(tx.extension("durable").outbox_items())
    return {"targets": count, "storeSeconds": round(took, 1), "descriptorsAfterStoring": stored,
            "descriptorsAfterRestart": loaded, "waiting": waiting}


ATTACKS = {"forged_floor": forged_floor, "forged_floor_lineage1": lambda env: forged_floor(env, "lineage1"),
           "forged_floor_lineage2": lambda env: forged_floor(env, "lineage2"),
           "fds_320": lambda env: fds(env, 320), "torn_ledger": torn_ledger, "fds": fds, "fifo_ledger": fifo_ledger,
           "streams_flood": lambda env: flood(env, "streams"), "ids_flood": lambda env: flood(env, "ids"),
           "memory_limit": memory_limit, "targets": targets}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("attacks", nargs="*", default=list(ATTACKS))
    p.add_argument("--dir", default=os.path.join(REPO, ".durable-tests"), help="a directory on disk")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    results = {}
    for name in args.attacks:
        env = Env(args.dir)
        try:
            results[name] = ATTACKS[name](env)
        except Exception as exc:  # an attack that breaks the runtime is a figure too
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            env.close()
        print(json.dumps({name: results[name]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
