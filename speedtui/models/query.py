"""The traces view's filter language: ``node:NAME type:TYPE outcome:OUTCOME free text``."""

from __future__ import annotations

from .traces import TraceFilter

TYPES = ["MESSAGE", "SPC_REQUEST", "SPC_RESPONSE", "EVENT", "DISCOVERY", "HEARTBEAT", "ERROR", "ACK"]
OUTCOMES = ["sent", "accepted", "rejected", "error"]
_TYPE_ALIASES = {"req": "SPC_REQUEST", "request": "SPC_REQUEST", "resp": "SPC_RESPONSE",
                 "response": "SPC_RESPONSE", "msg": "MESSAGE", "hb": "HEARTBEAT"}


def parse_query(q: str, nodes: frozenset[str] | None = None) -> TraceFilter:
    f = TraceFilter(nodes=nodes)
    words = []
    for tok in q.split():
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
        else:
            words.append(tok)
    f.text = " ".join(words)
    return f
