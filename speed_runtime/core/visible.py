"""What members of an environment write, made fit to show (docs/RELIABILITY.md, principle (f)).

Every member process can write into ROOT: registry entries, journals, file names, payloads, service
answers. On the operator's terminal such a string is data, never a control sequence: an ESC starts
one (`ESC ] 2 ; title BEL` sets the window title, `ESC ] 52 ; c ; …` writes the clipboard,
`ESC [ 2 J` clears the screen), and so do the C1 controls (U+009B is a CSI of its own). `visible`
writes each such character out as an escape (`\\x1b`, `\\x9b`, `\\u202e`), so what it was stays
readable and nothing reaches the terminal. Pure: the `speed` command and the console use these.

Made visible: C0 controls (U+0000-U+001F, newline and tab included: one value is one line), DEL,
C1 controls (U+0080-U+009F), lone surrogates (no terminal can be sent one: writing it fails) and
the controls of text direction and lines (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069,
U+2028, U+2029: a right-to-left override reorders the rest of a line on a terminal that does bidi).
"""
from __future__ import annotations

import json
import re
from typing import Any

# the characters made visible, beyond C0 (which differs: newlines may stay, and json escapes C0 itself)
_BEYOND_C0 = "\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_HIDDEN_CHAR = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_HIDDEN_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_BEYOND_C0}]")
_HIDDEN_IN_JSON = re.compile(f"[{_BEYOND_C0}]")


def _text_escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def visible(text: str) -> str:
    """``text`` with every control character written out (``"\\x1b]2;x\\x07"`` for ESC ] 2 ; x BEL):
    one line that shows what it holds and sends nothing to a terminal. ``text`` itself when it
    holds none (the common case costs one scan)."""
    if text.isascii() and text.isprintable():
        return text
    return _HIDDEN_CHAR.sub(_text_escape, text)


def visible_lines(text: str) -> str:
    """As ``visible``, but newlines stay: for text shown or copied whole (an entry as JSON, a
    notification of several lines)."""
    if text.isascii() and text.replace("\n", "").isprintable():
        return text
    return _HIDDEN_BUT_NEWLINE.sub(_text_escape, text)


def visible_json(value: Any, **dumps: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **dumps)`` that shows no control character: the ones
    json leaves as they are (DEL, C1, lone surrogates, direction controls) are written as JSON
    escapes (``\\u009b``), so the text is still valid JSON that decodes to ``value``, and
    non-ASCII letters stay readable."""
    text = json.dumps(value, ensure_ascii=False, **dumps)
    if text.isascii() and "\x7f" not in text:
        return text
    return _HIDDEN_IN_JSON.sub(_json_escape, text)


def visible_data(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with ``visible`` applied to every string in
    it, keys included: a report or counters built from members' strings, shown field by field."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(k) if isinstance(k, str) else k: visible_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(visible_data(v) for v in value)
    return value
