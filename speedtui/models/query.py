"""The traces view's filter language: ``node:NAME type:TYPE outcome:OUTCOME reason:REASON
service:NAME`` words, comparisons ``latency>50ms seq>=100 size>4k``, and free text."""

from __future__ import annotations

import re

from .traces import Comparison, TraceFilter

TYPES = ["MESSAGE", "SPC_REQUEST", "SPC_RESPONSE", "EVENT", "DISCOVERY", "HEARTBEAT", "ERROR", "ACK"]
OUTCOMES = ["sent", "accepted", "rejected", "error"]
_FIELDS = {"latency": "latency_ms", "lat": "latency_ms", "seq": "seq", "size": "size"}
COMPARISON = re.compile(r"^(latency|lat|seq|size)(>=|<=|>|<|=)([0-9]*\.?[0-9]+)([a-z]*)$", re.IGNORECASE)
_UNITS = {"latency_ms": {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 0.001},
          "size": {"": 1.0, "b": 1.0, "k": 1024.0, "kb": 1024.0, "kib": 1024.0, "m": 1048576.0, "mb": 1048576.0,
                   "mib": 1048576.0},
          "seq": {"": 1.0}}
_TYPE_ALIASES = {"req": "SPC_REQUEST", "request": "SPC_REQUEST", "resp": "SPC_RESPONSE",
                 "response": "SPC_RESPONSE", "msg": "MESSAGE", "hb": "HEARTBEAT"}


def parse_query(q: str, nodes: frozenset[str] | None = None) -> TraceFilter:
    f = TraceFilter(nodes=nodes)
    words = []
    comparisons = []
    for tok in q.split():
        m = COMPARISON.match(tok)
        if m is not None:
            field = _FIELDS[m.group(1).lower()]
            scale = _UNITS[field].get(m.group(4).lower())
            if scale is not None:
                comparisons.append(Comparison(field, m.group(2), float(m.group(3)) * scale))
                continue
        key, sep, val = tok.partition(":")
        key = key.lower()
        if sep and val and key in ("node", "n"):
            f.node = val
        elif sep and val and key in ("type", "t"):
            v = _TYPE_ALIASES.get(val.lower(), val.upper())
            f.type = next((t for t in TYPES if t == v), next((t for t in TYPES if t.startswith(v)), v))
        elif sep and val and key in ("outcome", "o", "is"):
            v = val.lower()
            f.outcome = next((o for o in OUTCOMES if o.startswith(v)), v)
        elif sep and val and key in ("reason", "r"):
            f.reason = val.lower()
        elif sep and val and key in ("service", "svc", "s"):
            f.service = val
        else:
            words.append(tok)
    f.text = " ".join(words)
    f.comparisons = tuple(comparisons)
    return f
