"""What a table cell's text is as a terminal measures it (the table and the dialog that shows a
row's cells whole draw the same glyphs)."""

from __future__ import annotations

import re

from rich.text import Text

# code points a terminal measures one by one while rich measures the cluster they make: a joiner
# (ZWJ) and the emoji it joins, the variation selectors, the skin-tone modifiers. A name holding
# "👨‍👩‍👧" is 2 cells to rich and 6 to tmux: the rest of its row slid 4 columns off its headers.
CLUSTER_MARKS = re.compile("[\u200d\ufe0e\ufe0f\U0001f3fb-\U0001f3ff]")


def terminal_cells(value: "str | Text") -> Text:
    """A cell's text without the marks that make terminals and rich disagree on its width (the
    glyphs stay, each as wide as it is alone); a copy, the row's own Text is left as it was."""
    t = value.copy() if isinstance(value, Text) else Text(str(value))
    plain = t.plain
    if CLUSTER_MARKS.search(plain) is None:
        return t
    kept = [t[i] for i, ch in enumerate(plain) if not CLUSTER_MARKS.match(ch)]
    return Text("").join(kept) if kept else Text("")
