"""What members write, made fit to show (speed_runtime/core/visible.py): every control character a
terminal would act on is written out, nothing else changes, JSON stays valid and decodes to the
same value."""
from __future__ import annotations

import json

from speed_runtime.core.visible import visible, visible_data, visible_json, visible_lines

# what a member would write to act on the operator's terminal
ATTACKS = ["\x1b]2;PWNED\x07", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J", "\u009b2J", "\u009d0;title\u009c", "a\x7fb",
           "\u202eevil", "lone \ud800 surrogate", "\r\x00\x08\x0b\x0c"]
ACTING = [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7f, 0xa0)] + ["\ud800", "\udfff", "\u202e",
                                                                                 "\u2066", "\u2028"]


def acts(text: str) -> list[str]:
    return [c for c in text if c in ACTING]


def test_every_control_character_is_written_out():
    for attack in ATTACKS:
        shown = visible(attack)
        assert acts(shown) == [], repr(shown)
        assert shown.isprintable()
    assert visible("\x1b]2;PWNED\x07") == "\\x1b]2;PWNED\\x07"
    assert visible("\u009b2J") == "\\x9b2J"
    assert visible("a\u202eb") == "a\\u202eb"
    assert visible("two\nlines\tand a tab") == "two\\x0alines\\x09and a tab"


def test_text_without_control_characters_is_returned_as_it_is():
    for text in ("billing", "fixture-host", "héllo wörld ✓ → ◈", "[a=\"]", "=2+5", "", "emoji 👩‍💻 joined"):
        assert visible(text) == text
        assert visible_lines(text) == text


def test_visible_lines_keeps_newlines_only():
    assert visible_lines("a\nb\x1b[2J\r\n") == "a\nb\\x1b[2J\\x0d\n"
    for attack in ATTACKS:
        assert acts(visible_lines(attack).replace("\n", "")) == []


def test_visible_json_is_valid_json_of_the_same_value_with_nothing_acting():
    value = {attack: [attack, {"k": attack}] for attack in ATTACKS} | {"plain": "héllo ✓", "n": 1}
    text = visible_json(value, indent=2, sort_keys=True)
    assert acts(text.replace("\n", "")) == []
    assert json.loads(text) == value
    assert "héllo ✓" in text  # letters stay readable (not \u escapes)
    assert visible_json("\u009b") == '"\\u009b"'


def test_visible_data_reaches_every_string_keys_included():
    data = {"\x1bkey": ["\u009bx", 3, {"deep": "\x07"}], "n": None, "t": ("\x1b",)}
    shown = visible_data(data)
    assert shown == {"\\x1bkey": ["\\x9bx", 3, {"deep": "\\x07"}], "n": None, "t": ("\\x1b",)}
