"""Search in what the console shows: which words of a filter to highlight, which lines hold
them, and which match ``n`` / ``N`` go to next. Pure: strings in, positions out (the views
highlight with rich's ``Text.highlight_words`` and move their own cursors)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .query import COMPARISON


def search_words(query: str) -> tuple[str, ...]:
    """The words a filter's matches are highlighted by: its free-text words and the values of its
    ``key:value`` words (``node:billing`` highlights ``billing``), lower case, longest first (so a
    longer word is highlighted whole where a shorter one is inside it); comparisons
    (``latency>50ms``) match numbers, not text, and highlight nothing."""
    words: set[str] = set()
    for tok in query.split():
        if COMPARISON.match(tok):
            continue
        key, sep, value = tok.partition(":")
        word = value if sep and value else tok
        if word:
            words.add(word.lower())
    return tuple(sorted(words, key=lambda w: (-len(w), w)))


def matching_lines(lines: Iterable[str], words: Sequence[str]) -> list[int]:
    """The indices of the lines that hold any of ``words`` (case-insensitive)."""
    if not words:
        return []
    return [i for i, line in enumerate(lines) if any(w in line.lower() for w in words)]


def next_match(matches: Sequence[int], current: int | None, forward: bool = True) -> int | None:
    """The match ``n`` (``forward``) or ``N`` goes to from ``current``: the first match after it
    (before it), wrapping around at the end (the start); None when there is no match. ``matches``
    is sorted; ``current`` need not be a match (the cursor may rest between two)."""
    if not matches:
        return None
    if current is None:
        return matches[0] if forward else matches[-1]
    if forward:
        return next((m for m in matches if m > current), matches[0])
    return next((m for m in reversed(matches) if m < current), matches[-1])
