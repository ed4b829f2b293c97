"""Journal lines as the reference analysis reads them: the rules of Spark's JSON reader with the
job's schema and options (records.py), down to its bytes (Jackson's UTF-8), its repeated keys and
the text it keeps of a string field that holds no string, so that the reference and the Spark job
keep the same records with the same values and count the same malformed lines; and the journal
files a list of paths names."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from json.decoder import scanstring
from typing import Any, Iterable, Iterator

from .common import PipelineError
from .journals import stage_whole
from .records import FIELDS, KIND_REQUIRED, MAX_TS

_WS = " \t\r\n"
#: the fields a record of an extension kind keeps (message, threat, durable; health, control: a
#: control record's requestId makes it a call's request leg)
_EXT_FIELDS = ("dir", "peer", "type", "outcome", "reason", "event", "size", "chunks", "reliable", "score",
               "stream", "id", "status", "requestId")


def _reject_constant(name: str):
    raise ValueError(f"non-numeric number {name}")


class _Repeated(dict):
    """An object that names a key more than once: the last value of each key (Python's rule), and
    `pairs`, every key and value in order, for Spark's rule (_spark_values)."""
    pairs: list


def _object(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        d = _Repeated(d)
        d.pairs = pairs
    return d


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_object)
_raw_decode = _DECODER.raw_decode
_LMIN, _LMAX = -(1 << 63), 1 << 63


def _as_str(v: Any) -> str | None:
    if v is None or v.__class__ is str:
        return v
    if v.__class__ is _RawText:
        return str(v)
    raise _AsWritten    # a number, true, false, an object or an array: Spark keeps its text as written


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


def parse_values(line: str | None) -> tuple:
    """What Spark's JSON reader makes of one journal line: usually one record (a dict) or None
    (malformed); nothing for a blank line; for a JSON array of objects one entry per object (an
    array holding anything else is one malformed entry)."""
    if line is None:                  # bytes Spark's reader does not decode (open_journal)
        return (None,)
    text = line.lstrip(_WS)
    if not text:
        return ()
    try:
        obj = _raw_decode(text)[0]
    except (ValueError, RecursionError):
        return (None,)
    cls = obj.__class__
    if cls is dict or cls is _Repeated:
        recs = (_record_spark_reads(obj, text, 0),)
    elif cls is list and all(isinstance(v, dict) for v in obj):
        recs = tuple(_record_spark_reads(v, text, start) for v, start in zip(obj, _element_starts(text)))
    else:
        return (None,)
    return tuple(_no_lone_surrogates(r) for r in recs) if _may_hold_surrogates(text) else recs


class _AsWritten(Exception):
    """A string field holds something else than a string: its text is taken from the line (_raw_members)."""


def _record_spark_reads(obj: dict, text: str, start: int) -> dict | None:
    """record_of the object at text[start] as Spark reads it: a repeated key by _spark_values, a
    string field that holds no string as the text the line spells (the fast path never scans)."""
    try:
        return record_of(_spark_values(obj.pairs) if obj.__class__ is _Repeated else obj)
    except _AsWritten:
        return record_of(_raw_members(_members(text, start)))


_STRING_FIELDS = frozenset(name for name, typ in FIELDS if typ == "string")


class _RawText(str):
    """A string field's value that is no string (a number, true, false, an object, an array), as the
    line spells it: Spark keeps its text (spaces, exponents and escapes as written)."""


def _raw_members(members: list) -> dict:
    """The values of an object's (key, value, raw text) members by Spark's rule (_spark_values),
    string fields that hold no string as _RawText."""
    return _spark_values([(k, _RawText(raw) if k in _STRING_FIELDS and v is not None and not isinstance(v, str)
                           else v) for k, v, raw in members])


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _members(text: str, i: int) -> list:
    """(key, value, raw text of the value) of the object at text[i] (which parsed: no checks)."""
    out: list = []
    i = _skip_ws(text, i + 1)
    while text[i] != "}":
        key, i = scanstring(text, i + 1)
        i = _skip_ws(text, _skip_ws(text, i) + 1)       # past the ':'
        value, end = _raw_decode(text, i)
        out.append((key, value, text[i:end]))
        i = _skip_ws(text, end)
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
    return out


def _element_starts(text: str) -> list[int]:
    """Where each element of the array at text[0] (which parsed) begins."""
    starts: list[int] = []
    i = _skip_ws(text, 1)
    while text[i] != "]":
        starts.append(i)
        i = _skip_ws(text, _raw_decode(text, i)[1])
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
    return starts


def _may_hold_surrogates(text: str) -> bool:
    """Whether a string parsed from text can hold a lone surrogate (an escape, or a non-ASCII byte)."""
    return "\\u" in text or not text.isascii()


def _spark_values(pairs: list) -> dict:
    """The values Spark's JSON reader keeps of an object's (key, value) pairs, which may repeat a
    key: it converts every occurrence in order, and one that converts (null included) replaces the
    field's value while one that does not (a string for a number, an overflowing integer) leaves it
    as it was."""
    out: dict = {}
    for key, value in pairs:
        convert = _CONVERT.get(key)
        if convert is None or convert is _as_str:
            out[key] = value          # not a column, or a string one: every value converts
        elif value is None or convert(value) is not None:
            out[key] = value
    return out


def _no_lone_surrogates(rec: dict | None) -> dict | None:
    """rec with each lone surrogate of its strings (a `\\udcff` escape, or what jackson_text made of
    bytes beyond U+10FFFF) as "?", as Spark's strings have it (a Java string's UTF-8 encoding)."""
    if rec is None:
        return None
    for k, v in rec.items():
        if v.__class__ is str and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                rec[k] = "".join("?" if "\ud800" <= c <= "\udfff" else c for c in v)
    return rec


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


def iter_files(inputs: Iterable[str]) -> Iterator[str]:
    """The journals of the inputs as a whole Spark run reads them (journals.stage_whole: links inside
    a directory are not followed, a compressed journal is decompressed, one that does not decompress
    is skipped), copied into a temporary directory that is removed when the iteration ends."""
    paths = []
    for p in inputs:
        p = p[len("file://"):] if p.startswith("file://") else p
        if not os.path.exists(p):
            raise PipelineError(f"trace path {os.path.abspath(p)} does not exist.")
        paths.append(p)
    area = tempfile.mkdtemp(prefix="speed-reference-")
    try:
        yield from stage_whole(paths, area)[0]
    finally:
        shutil.rmtree(area, ignore_errors=True)


@contextmanager
def open_journal(path: str) -> Iterator[Iterator[str | None]]:
    """The lines of a (staged, plain) journal as Spark's reader takes them: split at LF, CR or CRLF
    (Hadoop's line reader, and Python's universal newlines), each decoded as Jackson decodes UTF-8
    (jackson_text): None for a line whose bytes Spark counts malformed."""
    f = open(path, "r", buffering=1 << 20, encoding="utf-8", errors="surrogateescape")  # not UTF-8: U+DC80-U+DCFF
    try:
        yield _decoded(f)
    finally:
        f.close()


def _decoded(f) -> Iterator[str | None]:
    for line in f:
        yield line if line.isascii() or not _ESCAPED.search(line) else _jackson_line(line)


#: what the "surrogateescape" decoding makes of bytes that are not UTF-8: one U+DC80-U+DCFF each
_ESCAPED = re.compile("[\udc80-\udcff]+")


def jackson_text(raw: bytes) -> str | None:
    """raw decoded by the rules of Jackson's UTF-8 reader, which Spark's JSON reader uses for the
    strings it reads: None (the line is malformed) for a byte that cannot start a sequence
    (0x80-0xBF, 0xF8-0xFF), a sequence cut short or a three-byte one that encodes a surrogate; a
    two- or three-byte overlong sequence is taken for its value, a four-byte one for Jackson's pair
    of (value - 0x10000), lone surrogates beyond U+10FFFF (each "?" once in a string field:
    _no_lone_surrogates). The whole line is decoded, where Jackson decodes only inside strings:
    docs/ANALYTICS.md lists the byte-level lines on which the two differ."""
    return _jackson_line(raw.decode("utf-8", "surrogateescape"))


def _jackson_line(text: str) -> str | None:
    """A line decoded with "surrogateescape", as Jackson reads its bytes. Python's decoder takes
    what is valid UTF-8 and escapes the rest byte by byte, and no valid sequence it took can hold a
    byte Jackson would have read as part of an invalid one (a continuation byte never begins a
    sequence): so each run of escaped bytes is Jackson's to read alone, and the valid text between
    them costs no Python loop."""
    out: list[str] = []
    last = 0
    for run in _ESCAPED.finditer(text):
        decoded = _jackson_bytes(run.group().encode("utf-8", "surrogateescape"))
        if decoded is None:
            return None
        out += (text[last:run.start()], decoded)
        last = run.end()
    out.append(text[last:])
    return "".join(out)


def _jackson_bytes(raw: bytes) -> str | None:
    """Bytes Python's decoder refused, as Jackson decodes them (jackson_text's rules)."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c < 0x80:
            out.append(chr(c))
            i += 1
            continue
        if 0xC0 <= c <= 0xDF:
            need, value = 1, c & 0x1F
        elif 0xE0 <= c <= 0xEF:
            need, value = 2, c & 0x0F
        elif 0xF0 <= c <= 0xF7:
            need, value = 3, c & 0x07
        else:
            return None
        if i + need >= n:
            return None
        for d in raw[i + 1:i + 1 + need]:
            if d & 0xC0 != 0x80:
                return None
            value = (value << 6) | (d & 0x3F)
        i += 1 + need
        if need == 2 and 0xD800 <= value <= 0xDFFF:
            return None
        if need == 3:   # Jackson's pair, in Java's ints and chars: a valid pair is the character
            c = value - 0x10000
            high, low = (0xD800 | (c >> 10)) & 0xFFFF, 0xDC00 | (c & 0x3FF)
            if not (0x10000 <= value <= 0x10FFFF):
                out.append(chr(high))
                value = low
        out.append(chr(value))
    return "".join(out)


