"""The console's replays and their verdicts: from a receiver's journal (the envelope rejected or
accepted), from its published rejection counters (a receiver that keeps no journal), or "no
verdict" once the window has passed.  Pure: the time comes from the caller's injected clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .registry import NodeRow
from .traces import TraceRecord

VERDICT_SECONDS = 10.0


@dataclass
class PendingReplay:
    ts: float
    sender: str
    receiver: str
    type: str
    seq: int
    outcome: str = "pending"
    reason: str = ""
    # the receiver's published per-reason rejection counts before the replay, for receivers that
    # keep no journal: a count that rises is their verdict (at their next heartbeat)
    rejected_before: dict | None = None
    deadline: float = 0.0  # when "no verdict" is concluded (set from the receiver's heartbeat)
    # a counter that rose at a receiver that also journals: its journal line is the better
    # verdict (it names the envelope), so this one is only used if that line never comes
    counted: str = ""


@dataclass(frozen=True)
class VerdictNote:
    """What the operator is told when a verdict arrives."""

    text: str
    alarming: bool  # a receiver that accepted a replay


#: the receiver's checks that are replay protection, and what each one found
REPLAY_CHECKS = {
    "replayed_nonce": "its nonce was seen within the replay window",
    "replayed_sequence": "its sequence number is not after the last one accepted",
    "stale_timestamp": "its timestamp is outside the replay window",
    "durable_duplicate": "its durable id was handled already",
}
#: checks that come before replay protection, and why they fire for a replay
EARLIER_CHECKS = {
    "unknown_sender": "the sender is not in the registry (it has left since)",
    "unauthorized": "the receiver does not allow the sender (any more)",
    "wrong_target": "the envelope names another receiver",
}


def replay_verdict(reason: str) -> tuple[str, bool]:
    """What a rejected replay proves: the check that fired, and whether it was replay protection
    (a replay from a sender that has left is refused as unknown_sender: no nonce or sequence
    check was involved, so it proves nothing about them). ``reason`` may name several reasons
    ("a/b", from published counters), followed by a note in parentheses."""
    names = reason.split(" ", 1)[0].split("/")
    fired = [REPLAY_CHECKS[n] for n in names if n in REPLAY_CHECKS]
    if fired:
        return f"rejected ({reason}): {'; '.join(fired)} ✓ replay protection works", True
    why = "; ".join(EARLIER_CHECKS[n] for n in names if n in EARLIER_CHECKS)
    return (f"rejected ({reason}) before any replay check" + (f": {why}" if why else "")
            + " — replay protection was not exercised"), False


def published_rejections(row: NodeRow | None) -> dict | None:
    counts = row.counters.get("rejected") if row is not None and isinstance(row.counters, dict) else None
    return dict(counts) if isinstance(counts, dict) else None


def verdict_window(row: NodeRow | None) -> float:
    """Long enough for a journal line, or for two of the receiver's heartbeats."""
    hb = row.raw.get("heartbeatSeconds") if row is not None and isinstance(row.raw, dict) else None
    hb = hb if isinstance(hb, (int, float)) and not isinstance(hb, bool) and 0 < hb <= 60 else 5.0
    return max(VERDICT_SECONDS, 2 * hb + 1)


class ReplayTracker:
    def __init__(self) -> None:
        self.replays: list[PendingReplay] = []
        self._baselines: dict[str, dict | None] = {}

    def note_baseline(self, receiver: NodeRow | None, name: str) -> None:
        """Before injecting: the receiver's published rejection counts."""
        self._baselines[name] = published_rejections(receiver)

    def start(self, now: float, sender: str, receiver: str, type_: str, seq: int, row: NodeRow | None) -> PendingReplay:
        p = PendingReplay(now, sender, receiver, type_, seq, rejected_before=self._baselines.pop(receiver, None),
                          deadline=now + verdict_window(row))
        self.replays.append(p)
        return p

    def pending(self) -> list[PendingReplay]:
        return [p for p in self.replays if p.outcome == "pending"]

    def match_records(self, records: Iterable[TraceRecord]) -> list[VerdictNote]:
        pending = self.pending()
        if not pending:
            return []
        notes = []
        for r in records:
            if r.dir != "in" or r.outcome not in ("accepted", "rejected"):
                continue
            for p in pending:
                if (p.outcome == "pending" and r.node == p.receiver and r.peer == p.sender and r.seq == p.seq
                        and r.ts >= p.ts - 1.0):
                    p.outcome, p.reason = r.outcome, r.reason
                    notes.append(VerdictNote(f"{p.receiver} rejected the replayed envelope: {r.reason}", False)
                                 if r.outcome == "rejected" else
                                 VerdictNote(f"{p.receiver} ACCEPTED a replayed envelope", True))
        return notes

    def match_counters(self, rows: dict[str, NodeRow], journaling: frozenset[str] | set[str] = frozenset()
                       ) -> list[VerdictNote]:
        """A rise of the receiver's published rejection counts is its verdict when it keeps no
        journal (``journaling``: the nodes whose journals the console reads)."""
        notes = []
        for p in self.replays:
            if p.outcome != "pending" or p.rejected_before is None or p.counted:
                continue
            now_counts = published_rejections(rows.get(p.receiver)) or {}
            risen = sorted(k for k, v in now_counts.items()
                           if isinstance(v, int) and v > p.rejected_before.get(k, 0))
            if not risen:
                continue
            if p.receiver in journaling:
                p.counted = "/".join(risen)  # its journal line should follow; kept in case it does not
                continue
            p.outcome = "rejected"
            p.reason = "/".join(risen) + " (from its published counters: it keeps no journal)"
            notes.append(VerdictNote(f"{p.receiver} rejected the replayed envelope: {'/'.join(risen)}", False))
        return notes

    def expire(self, now: float) -> list[VerdictNote]:
        notes = []
        for p in self.replays:
            if p.outcome == "pending" and now > p.deadline:
                if p.counted:
                    p.outcome = "rejected"
                    p.reason = f"{p.counted} (from its published counters: no journal line came)"
                    notes.append(VerdictNote(f"{p.receiver} rejected the replayed envelope: {p.counted}", False))
                    continue
                p.outcome = "no verdict"
                p.reason = (f"{p.receiver} neither journaled a verdict nor published a new rejection "
                            f"within {now - p.ts:.0f}s")
        return notes
