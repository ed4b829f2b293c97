"""Cases 1–5: tampered, copied, replayed, resurrected and mistimed envelopes delivered into the
inboxes of live nodes. tests/runtime/test_envelope.py checks the codec alone (random bit flips);
here every single-bit flip, every truncation and appended bytes go through a running node."""
import os
import sys
import time
import types
from collections import Counter

import pytest

from speed_runtime import EnvelopeTrace, Node, NodeUnavailableError
from speed_runtime.core import payloads
from speed_runtime.core.envelope import DEFAULT_MAX_PAYLOAD, EnvelopeType, Header, envelope_filename, seal
from speed_runtime.fsutil import BOOT_ID, HOSTNAME, boottime
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.registry import Registry
from speed_runtime.transport import inject, prepare_home

from ..helpers.wait import wait_until


class Inbound:
    """Observer collecting a node's inbound trace events by file name."""

    def __init__(self, node):
        self.accepted, self.rejected = {}, {}
        node.add_observer(self)

    def __call__(self, event):
        if isinstance(event, EnvelopeTrace) and event.dir == "in":
            (self.accepted if event.outcome == "accepted" else self.rejected)[event.file] = event


def craft(sender, receiver, key, data, *, seq=1, ts_ms=None, etype=EnvelopeType.MESSAGE, nonce=None):
    """Seal an envelope exactly as `sender` would for `receiver`; returns (file name, bytes)."""
    body = payloads.encode_payload(payloads.message(sender.name, receiver.name, data)) \
        if etype == EnvelopeType.MESSAGE else data
    nonce = nonce or os.urandom(12)
    ts_ms = int(time.time() * 1000) if ts_ms is None else ts_ms
    header = Header(etype, seq, ts_ms, len(body), sender.id_bytes, receiver.id_bytes)
    return envelope_filename(sender.name, sender.id_bytes, seq, nonce), seal(header, body, key, nonce)


def expected_reason(offset, bit, original):
    """The reason docs/PROTOCOL.md's check order gives a flip of `bit` in byte `offset`."""
    if offset == 0 or 4 <= offset < 8:
        return "bad_version"
    if 24 <= offset < 32:
        size = bytearray(original[24:32])
        size[offset - 24] ^= 1 << bit
        return "too_large" if int.from_bytes(size, "big") > DEFAULT_MAX_PAYLOAD else "bad_size"
    return "bad_tag"  # type, flags, sequence, timestamp, IDs, nonce, ciphertext, tag


def test_every_bit_flip_truncation_and_extension_is_rejected_by_a_live_node(root, key):
    with Node(root, key, "r", allow=["s", "s2"]) as r, Node(root, key, "s", allow=["r"]) as s, \
            Node(root, key, "s2", allow=["r"]) as s2:
        seen = Inbound(r)
        handled = []
        r.on_message(handled.append)
        name, original = craft(s, r, key, {"k": "v", "pad": "x" * 20})
        prefix = name.rsplit(".", 2)[0]  # s.<id8>.<seq>; the last field before .env is ours to vary
        variants = {}
        for offset in range(len(original)):
            for bit in range(8):
                data = bytearray(original)
                data[offset] ^= 1 << bit
                variants[f"{prefix}.{len(variants):08x}.env"] = (bytes(data), expected_reason(offset, bit, original))
        for cut in range(len(original)):
            variants[f"{prefix}.{len(variants):08x}.env"] = (original[:cut], "bad_size")
        for extra in (b"\0", os.urandom(16), os.urandom(1000)):
            variants[f"{prefix}.{len(variants):08x}.env"] = (original + extra, "bad_size")
        variants[f"{prefix}.{len(variants):08x}.env"] = (original + bytes(2 * DEFAULT_MAX_PAYLOAD), "too_large")
        assert len(variants) == len(original) * 9 + 4
        for fname, (data, _) in variants.items():
            inject(root, "r", fname, data)
        wait_until(lambda: len(seen.rejected) >= len(variants), timeout=120, interval=0.05,
                   what=f"{len(variants)} rejections")
        wrong = {f: (seen.rejected[f].reason, want) for f, (_, want) in variants.items()
                 if seen.rejected[f].reason != want}
        assert wrong == {}, list(wrong.items())[:10]
        assert seen.accepted == {} and handled == [] and os.listdir(os.path.join(root, "r", "inbox")) == []
        assert r.counters()["rejected"]["bad_tag"] == sum(1 for _, w in variants.values() if w == "bad_tag")
        # the untouched original is accepted: every rejection above was the tampering's doing
        inject(root, "r", name, original)
        wait_until(lambda: handled, timeout=20, what="the original")
        assert handled[0].data == {"k": "v", "pad": "x" * 20}
        s2.send("r", "still running", confirm=True, timeout=20)
        assert [m.data for m in handled] == [{"k": "v", "pad": "x" * 20}, "still running"]
        print({"envelopeBytes": len(original), "variants": len(variants),
               "reasons": dict(sorted(Counter(w for _, w in variants.values()).items()))})


def test_envelopes_copied_to_other_inboxes_or_back_to_the_sender_are_rejected(root, key):
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a", "c"]) as b, \
            Node(root, key, "c", allow=["a"]) as c:
        sent = []
        a.add_observer(lambda e: sent.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "sent" else None)
        got = {n.name: [] for n in (a, b, c)}
        for n in (a, b, c):
            n.on_message(got[n.name].append)
        seen = {n.name: Inbound(n) for n in (a, b, c)}
        a.send("b", "for b only", confirm=True, timeout=20)
        original = next(e for e in sent if e.type == "MESSAGE")
        inject(root, "c", original.file, original.envelope)        # another node that allows a
        inject(root, "a", original.file, original.envelope)        # back to its sender, which does not allow a
        renamed = original.file.replace("a.", "c.", 1)              # claims to come from c, whom b allows
        inject(root, "b", renamed, original.envelope)
        wait_until(lambda: original.file in seen["c"].rejected and original.file in seen["a"].rejected
                   and renamed in seen["b"].rejected, timeout=20, what="three rejections")
        assert seen["c"].rejected[original.file].reason == "wrong_target"
        assert seen["a"].rejected[original.file].reason == "unauthorized"
        assert seen["b"].rejected[renamed].reason == "unknown_sender"
        a.allow("a")                                                # even if the sender allowed itself
        inject(root, "a", original.file, original.envelope)
        wait_until(lambda: seen["a"].rejected[original.file].reason == "wrong_target", timeout=20,
                   what="the copy in the sender's own inbox to be read and rejected")
        assert [m.data for m in got["b"]] == ["for b only"] and got["a"] == [] and got["c"] == []


def test_replay_before_and_after_the_receiver_restarts(root, key):
    with Node(root, key, "a", allow=["b"]) as a:
        sent = []
        a.add_observer(lambda e: sent.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "sent" else None)
        with Node(root, key, "b", allow=["a"]) as b:
            seen = Inbound(b)
            a.send("b", "one", confirm=True, timeout=20)
            first = sent[-1]
            # before the restart: the same bytes under the same name, then under a fresh name
            inject(root, "b", first.file, first.envelope)
            wait_until(lambda: first.file in seen.rejected, timeout=20, what="the replay")
            assert seen.rejected[first.file].reason == "replayed_nonce"
            other = first.file[:-12] + "ffffffff.env"
            inject(root, "b", other, first.envelope)
            wait_until(lambda: other in seen.rejected, timeout=20, what="the renamed replay")
            assert seen.rejected[other].reason == "replayed_nonce"
            assert b.receive(timeout=10).data == "one"
        with Node(root, key, "b", allow=["a"]) as b2:  # a new instance: fresh replay state, new instance ID
            seen2 = Inbound(b2)
            for env in [e for e in sent if e.type == "MESSAGE"]:
                inject(root, "b", env.file, env.envelope)
            wait_until(lambda: first.file in seen2.rejected, timeout=20, what="the replay after the restart")
            assert seen2.rejected[first.file].reason == "wrong_target"  # docs/PROTOCOL.md reading 7
            assert seen2.accepted == {}
            a.send("b", "two", confirm=True, timeout=20)  # the live sender goes on with the new instance
            assert b2.receive(timeout=10).data == "two"
            # a link's numbering restarts for a new receiver instance (docs/PROTOCOL.md reading 21: with
            # bounded gaps, a restarted receiver must not see a long-lived sender's high sequence first)
            assert b2.replay_state()["senders"][a.id_bytes.hex()]["lastSeq"] == 1


def test_a_restarted_sender_is_accepted_and_its_old_instance_replays_are_not(root, key):
    with Node(root, key, "b", allow=["a"]) as b:
        seen = Inbound(b)
        got = []
        b.on_message(got.append)
        old = []
        with Node(root, key, "a", allow=["b"]) as a1:
            a1.add_observer(lambda e: old.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "sent" else None)
            for i in range(3):
                a1.send("b", f"old {i}", confirm=True, timeout=20)
            old_id = a1.id_bytes
        with Node(root, key, "a", allow=["b"]) as a2:
            for i in range(3):
                assert a2.send("b", f"new {i}", confirm=True, timeout=20) == i + 1  # sequence back to 1
            for env in old:
                inject(root, "b", env.file, env.envelope)
            wait_until(lambda: all(e.file in seen.rejected for e in old), timeout=20, what="the old replays")
            assert {seen.rejected[e.file].reason for e in old} == {"unknown_sender"}
            assert [m.data for m in got] == [f"old {i}" for i in range(3)] + [f"new {i}" for i in range(3)]
            senders = b.replay_state()["senders"]
            assert senders[old_id.hex()]["lastSeq"] == len(old) and senders[a2.id_bytes.hex()]["lastSeq"] == 3


def test_timestamps_outside_the_window_are_rejected(root, key):
    with Node(root, key, "r", allow=["s"], replay_window=60.0) as r, Node(root, key, "s", allow=["r"]) as s:
        seen = Inbound(r)
        now = int(time.time() * 1000)
        cases = [(1, now - 61_000, "stale_timestamp"), (2, now + 61_000, "stale_timestamp"),
                 (3, now - 3_600_000, "stale_timestamp"), (4, 0, "stale_timestamp"),
                 (5, 2**64 - 1, "stale_timestamp"), (6, now - 50_000, None), (7, now + 50_000, None)]
        files = {}
        for seq, ts, reason in cases:
            fname, data = craft(s, r, key, f"seq {seq}", seq=seq, ts_ms=ts)
            inject(root, "r", fname, data)
            files[fname] = reason
        wait_until(lambda: len(seen.rejected) + len(seen.accepted) == len(cases), timeout=20, what="all judged")
        assert {f: (seen.rejected[f].reason if f in seen.rejected else None) for f in files} == files


class ShiftedClock(types.SimpleNamespace):
    """The node module's view of `time` with the wall clock stepped by `offset` seconds."""

    def __init__(self, offset):
        super().__init__(offset=offset)

    def time(self):
        return time.time() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.mark.parametrize("offset", [3600.0, -3600.0])
def test_a_wall_clock_step_neither_expires_live_peers_nor_revives_dead_ones(root, key, monkeypatch, offset):
    with Node(root, key, "a", allow=["b"]) as a, Node(root, key, "b", allow=["a"]) as b:
        # a peer that died 100 s ago on this host and boot: stale on both clocks, until the wall clock steps back
        prepare_home(root, "ghost")
        registry = Registry(root)
        with registry.locked():
            registry._write(RegistryEntry(name="ghost", id="00000000-0000-4000-8000-00000000dead",
                                          last_heartbeat=time.time() - 100, pid=2**22 + 1, host=HOSTNAME,
                                          allow=("a",), boot_id=BOOT_ID, boot_time_heartbeat=boottime() - 100))
        shifted = ShiftedClock(offset)  # the host's wall clock steps, as every runtime module sees it
        for name, module in list(sys.modules.items()):
            if name.startswith("speed_runtime") and getattr(module, "time", None) is time:
                monkeypatch.setattr(module, "time", shifted)
        a.send("b", "after the step", confirm=True, timeout=20)  # the live peer is still alive
        assert b.receive(timeout=10).data == "after the step"
        with pytest.raises(NodeUnavailableError):
            a.send("ghost", "into the void")  # the dead peer stays dead
        assert os.listdir(os.path.join(root, "ghost", "inbox")) == []
