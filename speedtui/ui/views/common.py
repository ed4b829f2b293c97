"""Shared formatting for views."""

from __future__ import annotations

import time

from rich.text import Text
from speed_runtime.core.visible import visible_json

STATUS_STYLE = {"online": "green", "leaving": "yellow", "stale": "bold red"}
STATUS_ICON = {"online": "●", "leaving": "◐", "stale": "○"}


HEALTH_ICON = "⚠"  # the node reported a problem with itself (a health record) that is not resolved


def status_text(status: str, health: str = "") -> Text:
    if health:  # the word still says the state; the icon says the node reported a problem
        t = Text(HEALTH_ICON, style="bold yellow")
        t.append(f" {status}", style=STATUS_STYLE.get(status, ""))
        return t
    return Text(f"{STATUS_ICON.get(status, '?')} {status}", style=STATUS_STYLE.get(status, ""))


def fmt_ts(ts: float, ms: bool = True) -> str:
    lt = time.localtime(ts)
    base = time.strftime("%H:%M:%S", lt)
    return f"{base}.{int((ts % 1) * 1000):03d}" if ms else base


def fmt_datetime(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def pretty_json(obj: object) -> str:
    """An entry or a payload as the operator reads it: indented, letters as they are, no control
    character (members wrote it: ``visible_json``)."""
    return visible_json(obj, indent=2, sort_keys=True)


MATCH_STYLE = "bold black on yellow"  # a search word where it appears (models/search.search_words)


def highlighted(value: "str | Text", words: tuple[str, ...]) -> "str | Text":
    """``value`` with every one of ``words`` marked (case-insensitive), as a new Text; ``value``
    itself when there is no word."""
    if not words:
        return value
    t = value.copy() if isinstance(value, Text) else Text(value)
    t.highlight_words(words, MATCH_STYLE, case_sensitive=False)
    return t
