"""An environment written by a hostile member: the fixture's environment (real registry files,
journals, outboxes in a real ROOT) plus, in every field a member can write, strings that would
act on the operator's terminal (ESC, OSC title and clipboard, CSI, C1, DEL) and on the console
(markup that fails to parse, markup that makes a link running an action of the app), in file
names too, and in the console's own files that quote members (call history, audit log, the
analytics report)."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path

from speed_runtime.core.durable import seal_outbox_entry
from speed_runtime.core.keys import Key
from speed_runtime.fsutil import REGISTRY_DIR, TRACES_DIR

from speedtui.environments.fixture import FIXED_KEY, build
from speedtui.paths import Paths
from speedtui.services import runtime as rt

TITLE = "\x1b]2;PWNED\x07"  # OSC 2: sets the terminal's title
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: writes "pwned" to the clipboard
CLEAR = "\x1b[2J"  # CSI: clears the screen
C1 = "\u009b31m\u009d0;c1\u009c"  # the 8-bit CSI and OSC ... ST of C1
SURROGATE = "\ud800"  # valid in JSON ("\\ud800"), and no terminal driver can encode it
CONTROLS = TITLE + CLIPBOARD + CLEAR + C1 + "\x7f" + SURROGATE
BROKEN_MARKUP = '[a="]x[/]'  # a MarkupError where it is parsed
FORMULA = "=2+5+cmd|' -c calc'!A0"
SHOT = "pwned.svg"


def link(shots: Path) -> str:
    """Markup that, where parsed, is a link to the app's screenshot action writing into ``shots``."""
    return f"[@click=app.screenshot('{SHOT}','{shots}')]CLICK[/]"


def values(shots: Path) -> dict[str, str]:
    """The two hostile values: every member-written field holds one or the other (two nodes, two
    sets of records), so each place that shows a field meets both."""
    return {"hlink": link(shots) + CONTROLS, "herror": BROKEN_MARKUP + CONTROLS}


# file and directory names cannot hold "/": these stand for the values there
FILE_NAMES = ['[a="]' + TITLE + C1, "[@click=app.bell]CLICK" + CLEAR, FORMULA]

# the visible forms the console must show instead (core.visible)
SHOWN = ("\\x1b]2;PWNED\\x07", "\\x1b]52;c;cHduZWQ=\\x07", "\\x1b[2J", "\\x9b31m", "\\ud800")

IDS = {"hlink": "77777777-7777-4777-8777-777777777777", "herror": "88888888-8888-4888-8888-888888888888"}


def _seal(etype: int, seq: int, ts: float, src: str, dst: str, payload: bytes) -> str:
    data = rt.seal_envelope(FIXED_KEY, etype, seq, int(ts * 1000), IDS[src], IDS[dst], payload,
                            nonce=bytes([seq, etype]) * 6)
    return base64.b64encode(data).decode()


def entry(name: str, v: str, now: float) -> dict:
    return {"name": name, "id": IDS[name], "pid": 4242, "host": v, "status": "online", "startupTimestamp": now - 60,
            "lastHeartbeat": now - 1, "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1,
            "groups": [v], "allow": [v, "gateway"], "services": [v, "echo"], "runtime": v, "bootId": v,
            "features": [v, "quota", "durable"], "note": v,
            "counters": {"sent": 3, v: 7, "threat": {v: {"score": 150.0, "state": "quarantined", "last": [v, v],
                                                         "rejections": 4, "recent": [1, 2, 1]}}}}


def records(name: str, v: str, now: float) -> list[dict]:
    """Every kind of journal record, every string field ``v`` (dir and kind excepted where the
    console needs them to place the record)."""
    other = "herror" if name == "hlink" else "hlink"
    request = json.dumps({"from": name, "to": other, "requestId": v, "service": v, "arguments": {v: v, "n": 1},
                          "callerNode": v, "timeoutMs": 5000}).encode()
    answer = json.dumps({"from": other, "to": name, "requestId": v, "status": "ERROR", "errorCode": v,
                         "errorMessage": v}).encode()
    text = v.encode("utf-8", "surrogatepass") + b" \xff not json"
    t = now - 5.0
    return [
        {"kind": "envelope", "ts": t, "node": v, "dir": "out", "peer": v, "type": "SPC_REQUEST", "seq": 1,
         "size": len(request), "outcome": "sent", "requestId": v, "service": v, "status": v, "errorCode": v,
         "messageId": v, "envelope": _seal(2, 1, t, name, other, request)},
        {"kind": "envelope", "ts": t + 0.01, "node": v, "dir": "in", "peer": v, "type": "SPC_RESPONSE", "seq": 1,
         "size": len(answer), "outcome": "accepted", "requestId": v, "service": v, "status": "ERROR",
         "errorCode": v, "latencyMs": 1.5, "envelope": _seal(3, 1, t + 0.01, other, name, answer)},
        {"kind": "envelope", "ts": t + 0.02, "node": name, "dir": "in", "peer": v, "type": v, "seq": 2,
         "size": len(text), "outcome": "rejected", "reason": v, "envelope": _seal(1, 2, t + 0.02, other, name, text)},
        {"kind": "envelope", "ts": t + 0.03, "node": name, "dir": v, "peer": v, "type": "MESSAGE", "seq": 3,
         "size": 10, "outcome": v},
        {"kind": "lease", "ts": t + 0.04, "node": v, "subject": name, "event": v},
        {"kind": "lease", "ts": t + 0.05, "node": name, "subject": v, "event": v},
        {"kind": "health", "ts": t + 0.06, "node": name, "event": v, "detail": v},
        {"kind": "message", "ts": t + 0.07, "node": v, "dir": "out", "peer": v, "messageId": v, "event": v,
         "type": "MESSAGE", "size": 900_000, "chunks": 3, "attempt": 2, "reliable": True, "seq": 4, "reason": v,
         "detail": v},
        {"kind": "threat", "ts": t + 0.08, "node": name, "peer": v, "event": "quarantined", "score": 120.0,
         "instance": v, "reason": v},
        {"kind": "durable", "ts": t + 0.09, "node": name, "peer": v, "event": v, "stream": v, "id": 1, "status": v,
         "detail": v},
    ]


def summary(vals: list[str], now: float) -> dict:
    """An analytics report whose every name, reason and message is a member's."""
    a, b = vals
    return {
        "generated_at": a, "message": b, "time_range": {"start": now - 60, "end": now, "start_iso": a, "end_iso": b},
        "totals": {"records": 10, a: 3, "spc_success_rate": 0.5},
        "spc": [{"target": a, "service": b, "calls": 2, "successes": 1, "errors": 1, "no_response": 0,
                 "success_rate": 0.5, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "error_codes": {a: 1, b: 2}}],
        "top_talkers": [{"source": a, "target": b, "envelopes": 5, "bytes": 500}],
        "rejections": {"total": a, "by_reason": {a: 3, b: 1}, "bursts": [{"node": a, "reason": b, "rejections": 3}]},
        "availability": [{"node": b, "availability": 0.9, "sessions": 1, "restarts": 0, "crashes": 0,
                          "graceful_departures": 0, "lost_leases": 0, "late_renewals": 0, "online_at_end": True}],
        "messages": {"totals": {"sent": a}, "links": [{"source": a, "target": b, "sent": 1, "reliable": 1, "chunks": 3,
                                                       "retransmissions": 1, "acknowledged": 1, "send_errors": 0,
                                                       "delivered": 1, "duplicates": 0, "voided": 0}]},
        "threats": {"totals": {"quarantined_now": b}, "pairs": [{"receiver": a, "sender": b, "raised": 1,
                                                                   "quarantined": 1, "released": 0, "lifted": 0,
                                                                   "max_score": 120.0, "quarantined_rejections": 2,
                                                                   "quarantined_now": True}]},
        "durable": {"links": [{"sender": a, "receiver": b, "stored": 1, "delivered": 1, "handled": 0, "failed": 0,
                               "expired": 0, "duplicates": 0, "receipts": 0, "send_errors": 0}]},
        "traffic_over_time": {"bucket_seconds": 60, "buckets": [{"t": now - 60, "envelopes": 3}]},
    }


def build_hostile(base: Path, now: float | None = None, shots: Path | None = None) -> tuple[Path, Path, Paths, Path]:
    """(root, key path, the console's paths, the folder a screenshot link would write into:
    ``shots``, else a new one in ``base``)."""
    now = time.time() if now is None else now
    root, key_path = build(base / "root", now)
    paths = Paths(base / "config", base / "data")
    if shots is None:
        shots = base / "shots"
        shots.mkdir()
    vals = values(shots)
    reg, tr = root / REGISTRY_DIR, root / TRACES_DIR
    for name, v in vals.items():
        (reg / f"{name}.node").write_text(json.dumps(entry(name, v, now)))
        with open(tr / f"{name}.jsonl", "w") as fh:
            for r in records(name, v, now):
                fh.write(json.dumps(r) + "\n")
    for bad in FILE_NAMES:  # entries no node could have made: unreadable, named by their files
        (reg / f"{bad}.node").write_text("{not json")
    # a link in speed_traces/ whose name is markup and escapes: reported (never read), by its name
    os.symlink(root / TRACES_DIR / "hlink.jsonl", tr / f"{FILE_NAMES[0]}.jsonl")
    # outboxes under a hostile node and target (directories any member can make: never listed, as
    # they name no node) and under a node of the environment (listed)
    for node, target in ((FILE_NAMES[0], FILE_NAMES[1]), ("hlink", "herror")):
        box = root / node / "durable" / "outbox" / target
        box.mkdir(parents=True, mode=0o700, exist_ok=True)
        meta = {"target": target, "stream": "ef" * 16, "id": 9, "created": now - 30,
                "expiresAt": int((now + 3600) * 1000), "size": 8, "type": "MESSAGE"}
        (box / f"{9:020d}.msg").write_bytes(seal_outbox_entry(meta, bytes(8), Key(FIXED_KEY), b"\x09" * 12))
    # the console's own files, which quote members: a call history, an audit log, a report
    env = paths.env_dir(root)
    (env / "analytics").mkdir(parents=True, mode=0o700)
    (env / "analytics" / "summary.json").write_text(json.dumps(summary(list(vals.values()), now)))
    with open(paths.call_history(root), "w") as fh:
        for v in vals.values():
            fh.write(json.dumps({"ts": now - 20, "caller": "console-x", "target": "hlink", "service": v,
                                 "arguments": {v: v}, "timeout": 5.0, "status": "ERROR", "result": None,
                                 "error_code": v, "error_message": v, "latency_ms": 2.0}) + "\n")
            fh.write(json.dumps({"ts": now - 19, "caller": "console-x", "target": "herror", "service": "echo",
                                 "arguments": {}, "timeout": 5.0, "status": "SUCCESS", "result": {v: [v]},
                                 "error_code": "", "error_message": "", "latency_ms": 1.0}) + "\n")
    with open(paths.audit_log(root), "w") as fh:
        for v in vals.values():
            fh.write(json.dumps({"ts": now - 18, "action": v, "detail": v, "command": v, "ok": False,
                                 "result": v}) + "\n")
    return root, key_path, paths, shots


# --------------------------------------------------------------------------- what reached the terminal
_OSC = re.compile(r"\x1b\](\d*);(.*?)(?:\x07|\x1b\\)", re.S)
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def terminal_problems(out: str) -> list[str]:
    """What in ``out`` (all a console wrote to its terminal) a member's bytes could have caused:
    a title or hyperlink sequence, a clipboard write holding a control character, a screen clear,
    a C1, DEL or lone surrogate, and any ESC or C0 outside the sequences Textual writes itself."""
    problems = []
    for number, body in _OSC.findall(out):
        if number == "52":
            copied = base64.b64decode(body.split(";", 1)[1]).decode("utf-8")
            if any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in copied):
                problems.append(f"clipboard write with control characters: {copied[:80]!r}")
        elif number != "22":  # 22: the mouse pointer's shape (Textual's own)
            problems.append(f"OSC {number}: {body[:60]!r}")
    if "\x1b[2J" in out:
        problems.append("a screen clear")
    rest = _CSI.sub("", _OSC.sub("", out))
    for c in sorted(set(rest)):
        if (ord(c) < 0x20 and c not in "\r\n") or 0x7f <= ord(c) <= 0x9f or 0xd800 <= ord(c) <= 0xdfff:
            problems.append(f"{c!r} outside Textual's own sequences")
    return problems
