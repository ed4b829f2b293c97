"""Journal lines as the reference analysis reads them: the rules of Spark's from_json with the
job's schema and options (records.py), so that the reference and the Spark job count the same
malformed lines; and the journal files a list of paths names."""
from __future__ import annotations

import gzip
import json
import math
import os
from typing import Any, Iterable

from .common import PipelineError
from .records import FIELDS, KIND_REQUIRED, MAX_TS

_WS = " \t\r\n"
#: the fields a record of an extension kind keeps (message, threat, durable; health, control: a
#: control record's requestId makes it a call's request leg)
_EXT_FIELDS = ("dir", "peer", "type", "outcome", "reason", "event", "size", "chunks", "reliable", "score",
               "stream", "id", "status", "requestId")


def _reject_constant(name: str):
    raise ValueError(f"non-numeric number {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_raw_decode = _DECODER.raw_decode
_LMIN, _LMAX = -(1 << 63), 1 << 63


def _as_str(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return json.dumps(v, separators=(",", ":"))


def _as_long(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63):
        return v
    return None


def _as_double(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _as_bool(v: Any) -> bool | None:
    return v if v is True or v is False else None


_CONVERT = {name: {"string": _as_str, "bigint": _as_long, "double": _as_double, "boolean": _as_bool}[typ]
            for name, typ in FIELDS}


def parse_values(line: str) -> tuple:
    """What Spark's JSON reader makes of one journal line: usually one record (a dict) or None
    (malformed); nothing for a blank line; for a JSON array of objects one entry per object (an
    array holding anything else is one malformed entry)."""
    text = line.lstrip(_WS)
    if not text:
        return ()
    try:
        obj = _raw_decode(text)[0]
    except (ValueError, RecursionError):
        return (None,)
    if obj.__class__ is dict:
        return (record_of(obj),)
    if obj.__class__ is list and all(v.__class__ is dict for v in obj):
        return tuple(record_of(v) for v in obj)
    return (None,)


def parse_line(line: str) -> dict | None:
    """The record of a line holding one JSON object, None if it is malformed."""
    values = parse_values(line)
    return values[0] if len(values) == 1 else None


def record_of(obj: dict) -> dict | None:
    """The record of one JSON object (all known fields, None when absent), or None if it is not
    a valid record. kind defaults to "envelope". (Written for speed: the common types are checked
    inline, anything unusual goes through the _as_* converters.)"""
    g = obj.get
    ts = g("ts")
    if ts.__class__ is not float:
        ts = _as_double(ts)
        if ts is None:
            return None
    node = g("node")
    if node.__class__ is not str:
        node = _as_str(node)
        if node is None:
            return None
    if not (0 <= ts < MAX_TS):
        return None
    kind = g("kind")
    if kind is None or kind == "envelope":
        d, peer, typ, outcome = g("dir"), g("peer"), g("type"), g("outcome")
        if d.__class__ is not str or peer.__class__ is not str or typ.__class__ is not str \
                or outcome.__class__ is not str:
            d, peer, typ, outcome = _as_str(d), _as_str(peer), _as_str(typ), _as_str(outcome)
            if d is None or peer is None or typ is None or outcome is None:
                return None
        seq, size = g("seq"), g("size")
        if seq.__class__ is not int or not (_LMIN <= seq < _LMAX):
            seq = _as_long(seq)
        if size.__class__ is not int or not (_LMIN <= size < _LMAX):
            size = _as_long(size)
        rec = {"kind": "envelope", "ts": ts, "node": node, "dir": d, "peer": peer, "type": typ,
               "outcome": outcome, "seq": seq, "size": size}
        for k in ("reason", "requestId", "service", "status", "errorCode"):
            v = g(k)
            rec[k] = v if v is None or v.__class__ is str else _as_str(v)
        lat = g("latencyMs")
        rec["latencyMs"] = lat if lat is None or lat.__class__ is float else _as_double(lat)
        chunks = g("chunks")
        rec["chunks"] = None if chunks is None else _as_long(chunks)
        return rec
    if kind.__class__ is not str:
        kind = _as_str(kind)
    if kind == "lease":
        subject, event = g("subject"), g("event")
        if subject.__class__ is not str:
            subject = _as_str(subject)
        if event.__class__ is not str:
            event = _as_str(event)
        if subject is None or event is None:
            return None
        return {"kind": "lease", "ts": ts, "node": node, "subject": subject, "event": event}
    required = KIND_REQUIRED.get(kind)
    if required is None:
        return None
    rec = {"kind": kind, "ts": ts, "node": node}
    for name in _EXT_FIELDS:
        rec[name] = _CONVERT[name](g(name))
    for name in required:
        if rec[name] is None:
            return None
    return rec


def iter_files(inputs: Iterable[str]) -> list[str]:
    files = []
    for p in inputs:
        p = p[len("file://"):] if p.startswith("file://") else p
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                full = os.path.join(p, name)
                if not name.startswith((".", "_")) and os.path.isfile(full):
                    files.append(full)
        elif os.path.exists(p):
            files.append(p)
        else:
            raise PipelineError(f"trace path {os.path.abspath(p)} does not exist.")
    return files


def open_journal(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, "r", encoding="utf-8", errors="replace", buffering=1 << 20)


