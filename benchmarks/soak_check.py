"""The soak's verdict (benchmarks/soak.py): from every node's log of what it sent, accepted,
rejected, handled, called and revoked, count what was lost, duplicated, out of order, mismatched,
phantom (received but never sent) or rejected without an explanation (a revoke in force)."""
from __future__ import annotations

from collections import Counter, defaultdict


def check(logs: dict[str, dict], sent_k: dict) -> dict:
    lost, duplicated, out_of_order, unexplained, mismatched = [], [], [], [], []
    in_records: dict[tuple[str, str, int], list] = defaultdict(list)  # (sender, receiver, seq) -> outcomes
    for receiver, log in logs.items():
        last: dict[str, int] = {}
        for sender, etype, seq in log["accepted"]:
            in_records[(sender, receiver, seq)].append(("accepted", etype))
            if seq <= last.get(sender, 0):
                out_of_order.append((sender, receiver, seq))
            last[sender] = seq
        for sender, seq, reason, explained in log["rejected"]:
            in_records[(sender, receiver, seq)].append(("rejected", reason))
            if not explained:
                unexplained.append((sender, receiver, seq, reason))
        last_handled: dict[str, int] = {}
        seen_handled = set()
        for sender, seq, k in log["handled"]:
            if (sender, seq) in seen_handled:
                duplicated.append(("handler", sender, receiver, seq))
            seen_handled.add((sender, seq))
            if seq <= last_handled.get(sender, 0):
                out_of_order.append(("handler", sender, receiver, seq))
            last_handled[sender] = seq
            if sent_k.get((sender, receiver, seq)) != k:
                mismatched.append((sender, receiver, seq, k))
        accepted_messages = {(s, q) for s, t, q in log["accepted"] if t == "MESSAGE"}
        for missing in accepted_messages - seen_handled:
            lost.append(("handler", missing[0], receiver, missing[1]))
    sent_total = Counter()
    rejected_messages = 0
    for sender, log in logs.items():
        for receiver, etype, seq, _ in log["sent"]:
            sent_total[etype] += 1
            outcomes = in_records.get((sender, receiver, seq), [])
            rejected_messages += etype == "MESSAGE" and len(outcomes) == 1 and outcomes[0][0] == "rejected"
            if not outcomes:
                lost.append((sender, receiver, etype, seq))
            elif len(outcomes) > 1:
                duplicated.append((sender, receiver, etype, seq, outcomes))
    sent_keys = {(s, r, q) for s, log in logs.items() for r, _, q, _ in log["sent"]}
    phantom = [k for k in in_records if k not in sent_keys]  # accepted or rejected but never sent
    windows = defaultdict(list)
    for name, log in logs.items():
        for peer, t0, t1 in log["revokes"]:
            windows[frozenset((name, peer))].append((t0, t1 or float("inf")))
    calls = Counter()
    for caller, log in logs.items():
        for target, k, outcome, t0, t1 in log["calls"]:
            calls[outcome.split(":")[0]] += 1
            if outcome == "mismatch":
                mismatched.append(("call", caller, target, k))
            elif outcome.startswith("error"):
                calls[outcome] += 1
                if not any(a <= t1 and t0 <= b for a, b in windows[frozenset((caller, target))]):
                    unexplained.append(("call", caller, target, k, outcome))
    reasons = Counter(r[2] for log in logs.values() for r in log["rejected"])
    errors = [e for log in logs.values() for e in log["errors"] if e[0] != "denied-send"]
    denied_sends = sum(1 for log in logs.values() for e in log["errors"] if e[0] == "denied-send")
    return {
        "sent": dict(sent_total), "envelopes": sum(sent_total.values()),
        "accepted": sum(1 for v in in_records.values() for o in v if o[0] == "accepted"),
        "rejected": dict(reasons), "handled": sum(len(log["handled"]) for log in logs.values()),
        "rejectedMessages": rejected_messages, "messagesDeniedBeforeWriting": denied_sends, "calls": dict(calls),
        "revokes": sum(len(log["revokes"]) for log in logs.values()),
        "lost": len(lost), "duplicated": len(duplicated), "outOfOrder": len(out_of_order),
        "unexplained": len(unexplained), "mismatched": len(mismatched), "phantom": len(phantom),
        "unexpectedErrors": len(errors),
        "examples": {"lost": lost[:5], "duplicated": duplicated[:5], "outOfOrder": out_of_order[:5],
                     "unexplained": unexplained[:5], "mismatched": mismatched[:5], "phantom": phantom[:5],
                     "errors": errors[:5]},
    }


def message_keys(logs: dict[str, dict]) -> dict:
    """(sender, receiver, seq) -> k of every MESSAGE sent: the k-th message of a sender carries k."""
    keys = {}
    for sender, log in logs.items():
        k = 0
        for receiver, etype, seq, _ in log["sent"]:
            if etype == "MESSAGE":
                keys[(sender, receiver, seq)] = k
                k += 1
    return keys
