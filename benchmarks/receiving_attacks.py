"""Attacks on a receiver's chunks, reliable and control paths by an allowed key holder, with the
figures of docs/RELIABILITY.md ("## Red team: memory, chunks, reliable and control (issue 26)").

    python -m benchmarks.receiving_attacks                          # every attack
    python -m benchmarks.receiving_attacks --attack partials        # one (repeatable)
    python -m benchmarks.receiving_attacks --checkout OLD           # the receiver from another checkout

Each attack starts a fresh receiver, `speed node r --feature chunks --feature reliable --feature
quota --operator KEY --trace` (a real process), and in this process an attacker node `m` (allowed
by r) that seals envelopes itself, as any key holder can under its own registered instance, an
honest node `h`, and `g`, whose envelopes stand for an honest reliable sender's. Attacks:
- partials: COUNT first chunks, each declaring a 64 MiB message that never continues;
- chains: COUNT/5 messages of 64 MiB declared, each given two chained chunks, then abandoned;
- disorder: a 64-chunk message with a duplicated chunk, one with two chunks swapped, then a good one;
- nesting: MESSAGE values nested 100,000 deep (1 MiB of `[`), and 900 deep;
- ids: COUNT*12 reliable MESSAGEs with distinct ids from m between an honest reliable message of g
  and a copy of it (the copy must be a duplicate, not delivered again; r remembers 100,000 ids);
- control: COUNT authentic control requests without a signature in r's control/.
Per attack: the receiver's RSS at start and its peak (VmHWM), seconds until it had judged every
file, what its journal says (outcomes and reasons), m's threat score, and the seconds an honest
message sent afterwards took to be handled. Prints one JSON object.
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
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from speed_runtime import Node, generate_key_file, load_key  # noqa: E402
from speed_runtime.core import chunks, payloads  # noqa: E402
from speed_runtime.core.control import FLAG_CONTROL as CONTROL_FLAG, OperatorKey  # noqa: E402
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal  # noqa: E402
from speed_runtime.core.reliable import FLAG_RELIABLE  # noqa: E402
from speed_runtime.transport import inject  # noqa: E402

MiB = 1 << 20
MSG, REQ = EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST
CHUNK = chunks.FLAG_BINARY | chunks.FLAG_CHUNK
ATTACKS = ("partials", "chains", "disorder", "nesting", "ids", "control")


def status(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


class Forger:
    """Seals envelopes as node `m` towards the receiver's instance, numbered in order."""

    def __init__(self, m: Node, target_id: bytes):
        self.m, self.target_id, self.seq = m, target_id, 0

    def seal(self, etype: int, plaintext: bytes, flags: int, seq: int | None = None) -> tuple[str, bytes]:
        if seq is None:
            self.seq += 1
            seq = self.seq
        nonce = os.urandom(12)
        header = Header(etype, seq, int(time.time() * 1000), len(plaintext), self.m.id_bytes, self.target_id, flags)
        return envelope_filename(self.m.name, self.m.id_bytes, seq, nonce), seal(header, plaintext, self.m.key, nonce)

    def deliver(self, etype: int, plaintext: bytes, flags: int, directory: str = "inbox") -> None:
        name, data = self.seal(etype, plaintext, flags)
        if directory == "inbox":
            inject(self.m.root, "r", name, data)
        else:  # control/: written whole in tmp/, then moved in, as writers deliver
            staging = os.path.join(self.m.root, "r", "tmp", name)
            with open(staging, "wb") as f:
                f.write(data)
            os.rename(staging, os.path.join(self.m.root, "r", directory, name))

    def chain(self, mid: str, size: int, pieces: list[bytes]) -> None:
        """The first len(pieces) chunks of a message of `size` bytes declared, chained."""
        prev = None
        for index, piece in enumerate(pieces):
            first = {"from": "m", "to": "r", "body": "bytes"}
            header = chunks.chunk_header(first, mid, index, 65_536, size, prev)
            name, data = self.seal(MSG, chunks.binary_plaintext(header, piece), CHUNK)
            inject(self.m.root, "r", name, data)
            prev = chunks.chain_value(data)


def journal(root: str) -> list[dict]:
    """r's journal, its rotated parts (r.jsonl.N … r.jsonl.1) first."""
    directory = os.path.join(root, "speed_traces")
    parts = sorted((n for n in os.listdir(directory) if n.startswith("r.jsonl.")), key=lambda n: -int(n.rsplit(".", 1)[1]))
    out = []
    for name in parts + ["r.jsonl"]:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def summary(records: list[dict]) -> dict:
    out: dict = {"envelopes": {}, "messages": {}, "control": {}, "health": [], "threat": {}}
    for r in records:
        kind = r.get("kind", "envelope")
        if kind == "envelope" and r.get("dir") == "in":
            key = f"{r['peer']}:{r['outcome']}" + (f":{r['reason']}" if r.get("reason") else "")
            out["envelopes"][key] = out["envelopes"].get(key, 0) + 1
        elif kind == "message" and r.get("dir") == "in":
            key = f"{r['peer']}:{r['event']}" + (f":{r['reason']}" if r.get("reason") else "")
            out["messages"][key] = out["messages"].get(key, 0) + 1
        elif kind == "control":
            key = r.get("outcome", "") + (f":{r['reason']}" if r.get("reason") else "")
            out["control"][key] = out["control"].get(key, 0) + 1
        elif kind == "health":
            out["health"].append(r.get("event"))
        elif kind == "threat":
            out["threat"][r.get("peer")] = r.get("score")
    return out


def until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def run_attack(attack: str, count: int, checkout: str, work: str) -> dict:
    root, key_path = os.path.join(work, "env"), os.path.join(work, "speed.key")
    generate_key_file(key_path)
    key, operator = load_key(key_path), OperatorKey.new()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    cmd = [sys.executable, "-m", "speed_runtime", "node", "--dir", root, "--key", key_path, "--name", "r", "--trace",
           "--allow", "m", "--allow", "h", "--allow", "g", "--operator", operator.public_text]
    for feature in ("chunks", "reliable", "quota"):
        cmd += ["--feature", feature]
    receiver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=work, text=True)
    try:
        line = receiver.stdout.readline()
        assert line.startswith("ready r id="), line + receiver.stderr.read()[-2000:]
        target_id = uuid.UUID(line.split("id=")[1].split()[0]).bytes
        inbox, control = os.path.join(root, "r", "inbox"), os.path.join(root, "r", "control")
        with Node(root, key, "m", allow=["r"], features=["chunks", "reliable"], linger_seconds=0) as m, \
                Node(root, key, "h", allow=["r"], features=["chunks", "reliable"], linger_seconds=0) as h, \
                Node(root, key, "g", allow=["r"], features=["reliable"], linger_seconds=0) as g:
            forger = Forger(m, target_id)
            start = status(receiver.pid, "VmRSS")
            began = time.monotonic()
            extra = attack_files(attack, count, forger, Forger(g, target_id))
            sent = time.monotonic() - began
            judged = until(lambda: not os.listdir(inbox) and not os.listdir(control), 600)
            cleared = time.monotonic() - began
            peak = status(receiver.pid, "VmHWM")
            t = time.monotonic()
            honest = h.send("r", {"after": attack}, reliable=True).result(120)
            honest_s = time.monotonic() - t
            time.sleep(0.6)  # the journal is flushed every 250 ms
            return {"attack": attack, "count": count, "checkout": checkout, "sendSeconds": round(sent, 2),
                    "judgedAll": judged, "clearSeconds": round(cleared, 2), "receiverStartMB": round(start, 1),
                    "receiverPeakMB": round(peak, 1), "honestAfterSeconds": round(honest_s, 3),
                    "honestTransmissions": honest.transmissions, "receiverAlive": receiver.poll() is None,
                    "journal": summary(journal(root)), **extra}
    finally:
        receiver.kill()
        receiver.wait()


def attack_files(attack: str, count: int, forger: Forger, honest_forger: Forger) -> dict:
    if attack == "partials":
        for i in range(count):
            forger.chain(f"p{i}", 64 * MiB, [os.urandom(1000)])
    elif attack == "chains":
        for i in range(count // 5):
            forger.chain(f"c{i}", 64 * MiB, [os.urandom(1000), os.urandom(1000)])
    elif attack == "disorder":
        body = os.urandom(64 * 3000)
        for mid, order in (("dup", [*range(6), 5, *range(6, 64)]), ("swap", [*range(10), 11, 10, *range(12, 64)]),
                           ("good", list(range(64)))):
            cutter = chunks.Chunker({"from": "m", "to": "r", "body": "bytes"}, mid, body, 3300, MiB)
            base, forger.seq, prev, files = forger.seq, forger.seq + len(order), None, []
            for index in range(cutter.count):  # chained in order; numbered (judged) in `order`
                plaintext = cutter.plaintext(index, prev)
                for pos in [p for p, i in enumerate(order) if i == index]:
                    files.append((pos, forger.seal(MSG, plaintext, CHUNK, base + pos + 1)))
                prev = chunks.chain_value(next(data for p, (_, data) in files if order[p] == index))
            for _, (name, data) in sorted(files):
                inject(forger.m.root, "r", name, data)
    elif attack == "nesting":
        for depth in (100_000, 900):
            value = b"[" * depth + b"]" * depth
            forger.deliver(MSG, b'{"from":"m","to":"r","data":' + value + b"}", 0)
    elif attack == "ids":
        mid = uuid.uuid4().hex
        honest = payloads.encode_payload({"from": "g", "to": "r", "data": {"honest": 1}, "messageId": mid})
        honest_forger.deliver(MSG, honest, FLAG_RELIABLE)  # as a reliable sender would (g sends nothing else to r)
        for i in range(count * 12):  # beyond the 100,000 ids r remembers
            forger.deliver(MSG, payloads.encode_payload({"from": "m", "to": "r", "data": i,
                                                         "messageId": f"f{i}"}), FLAG_RELIABLE)
        inbox = os.path.join(forger.m.root, "r", "inbox")
        until(lambda: not os.listdir(inbox), 600)  # the flood handled (the receiver takes senders in turns)
        honest_forger.deliver(MSG, honest, FLAG_RELIABLE)  # then a retransmission of the honest message
        return {"honestMessageId": mid}
    elif attack == "control":
        for i in range(count):
            forger.deliver(REQ, payloads.encode_payload({"from": "m", "to": "r", "requestId": f"x{i}",
                                                         "request": "{}"}), CONTROL_FLAG, directory="control")
    return {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attack", action="append", choices=ATTACKS)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--checkout", default=REPO, help="the receiver's checkout (the attacker runs this one)")
    args = parser.parse_args(argv)
    report = {"loadAverage": os.getloadavg()[0], "attacks": []}
    for attack in args.attack or ATTACKS:
        work = tempfile.mkdtemp(prefix="speed-attack-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            report["attacks"].append(run_attack(attack, args.count, args.checkout, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    report["loadAverageAfter"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
