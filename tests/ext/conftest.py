"""Helpers of the extension tests: the journal of a node as records, envelopes read back from an
inbox with the key, and forged chunks sealed as a key holder could."""
from __future__ import annotations

import json
import os
import signal

import pytest

from speed_runtime.core import chunks
from speed_runtime.core.envelope import Header, envelope_filename, open_envelope, seal
from speed_runtime.transport import inject

from ..helpers.wait import wait_until

FEATURES = ["chunks", "reliable"]
MiB = 1 << 20


def journal(root: str, name: str, kind: str | None = None) -> list[dict]:
    out = []
    try:
        with open(os.path.join(root, "speed_traces", f"{name}.jsonl"), encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if kind is None or rec.get("kind", "envelope") == kind:
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out


def wait_record(node, kind: str, timeout: float = 20.0, **match) -> dict:
    """The first journal record of `node` (a started Node with trace=True) matching `match`."""
    def find():
        node.journal.flush()
        return next((r for r in journal(node.root, node.name, kind) if all(r.get(k) == v for k, v in match.items())),
                    None)
    return wait_until(find, timeout, f"{node.name} {kind} record {match}")


def inbox(root: str, name: str) -> list[str]:
    return sorted(os.listdir(os.path.join(root, name, "inbox")))


def read_inbox(root: str, name: str, key) -> list[tuple[Header, bytes]]:
    """Every envelope waiting in `name`'s inbox, opened with the key: (header, plaintext)."""
    out = []
    for f in inbox(root, name):
        with open(os.path.join(root, name, "inbox", f), "rb") as fh:
            opened = open_envelope(fh.read(), key, 2 * MiB)
        out.append((opened.header, opened.payload))
    return out


class Forger:
    """Seals envelopes as `node` (a started Node) would towards `target` (a started Node), with
    sequence numbers that continue after what the test sealed so far; delivers them with inject."""

    def __init__(self, node, target, first_seq: int = 1000):
        self.node, self.target, self.seq = node, target, first_seq

    def envelope(self, etype: int, plaintext: bytes, flags: int, seq: int | None = None) -> tuple[str, bytes]:
        if seq is None:
            self.seq += 1
            seq = self.seq
        nonce = os.urandom(12)
        header = Header(etype, seq, int(__import__("time").time() * 1000), len(plaintext), self.node.id_bytes,
                        self.target.id_bytes, flags)
        return envelope_filename(self.node.name, self.node.id_bytes, seq, nonce), \
            seal(header, plaintext, self.node.key, nonce)

    def deliver(self, etype: int, plaintext: bytes, flags: int) -> str:
        name, data = self.envelope(etype, plaintext, flags)
        inject(self.node.root, self.target.name, name, data)
        return name

    def message(self, body: bytes, mid: str, order: list[int] | None = None, limit: int = 4096,
                forged: dict[int, dict] | None = None) -> list[tuple[str, bytes]]:
        """The sealed chunks of one message, to be delivered in `order` (chunk indexes; repeats and
        omissions allowed; by default all, in order), numbered in that order. Each chunk names the
        tag of the envelope that carried the chunk before (a chunk never delivered is sealed all the
        same, so the chain goes on). `forged` changes header fields of a chunk as a key holder could."""
        cutter = chunks.Chunker({"from": self.node.name, "to": self.target.name, "body": "bytes"}, mid, body, limit,
                                MiB)
        order = list(range(cutter.count)) if order is None else order
        base, self.seq = self.seq, self.seq + len(order) + cutter.count
        out: dict[int, tuple[str, bytes]] = {}
        prev = None
        for index in range(cutter.count):  # in chain order; each position of `order` gets its own number
            plaintext = cutter.plaintext(index, prev)
            if forged and index in forged:
                header, piece = chunks.decode(plaintext, 1, chunks.FLAG_BINARY | chunks.FLAG_CHUNK)
                plaintext = chunks.binary_plaintext({**header, **forged[index]}, piece.data)
            sealed = None
            for pos in [p for p, i in enumerate(order) if i == index] or [len(order) + index]:
                out[pos] = self.envelope(1, plaintext, chunks.FLAG_BINARY | chunks.FLAG_CHUNK, base + pos + 1)
                sealed = sealed or out[pos][1]
            prev = chunks.chain_value(sealed)
        return [out[pos] for pos in range(len(order))]

    def deliver_all(self, sealed: list[tuple[str, bytes]]) -> None:
        for name, data in sealed:
            inject(self.node.root, self.target.name, name, data)


class stopped:
    """SIGSTOP a node process so that what is sent to it stays in its inbox."""

    def __init__(self, proc):
        self.proc = proc

    def __enter__(self):
        self.proc.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(self.proc.proc.pid) == "T", 5, "the process to stop")
        return self

    def __exit__(self, *exc):
        self.proc.proc.send_signal(signal.SIGCONT)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def features():
    return list(FEATURES)
