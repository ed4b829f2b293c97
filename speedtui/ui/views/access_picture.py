"""The access graph drawn as lanes and arrows, one diagram per fabric.

Each fabric's nodes are labelled lanes across the top; every grant inside the fabric gets its own
row, a connector from one lane to the other whose arrowheads point at the node(s) that may be
written to.  Pure layout (graph + width in, rich Text out) so it can be tested without an app and
never has to guess the terminal's size.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from ...models.access import MUTUAL, AccessGraph, Edge

MUTUAL_STYLE, ONE_WAY_STYLE, NONE_STYLE = "bold green", "yellow", "dim red"
TITLE_STYLE, NOTE_STYLE, LANE_STYLE = "bold magenta", "dim", "dim"

INDENT = 1
MAX_LABEL = 12  # longer names are shortened in the middle; the list fallback still has them whole
MIN_PITCH = 6  # below 5-character labels the lanes can no longer be told apart: use the list
NOTE_GAP = 2
LIST_MAX = 200  # lines of one list (a fabric's grants, the grants across fabrics, ...): E exports them all

# Longest first: each row keeps the longest variant that still fits the width.
MUTUAL_NOTES = ("mutual", "")
UNLINKED_NOTES = ("✗ no grant in fabric", "✗ no grant", "")
NO_EDGE_NOTES = ("no grants inside this fabric", "no grants inside", "")

LEGEND = (
    (("◀──▶", MUTUAL_STYLE), (" mutual", NOTE_STYLE)),
    (("──▶", ONE_WAY_STYLE), (" one-way (reverse ✗)", NOTE_STYLE)),
    (("✗", NONE_STYLE), (" no grant", NOTE_STYLE)),
)


def access_picture(g: AccessGraph, width: int, fabric: str | None = None) -> Text:
    """Every fabric's diagram (only ``fabric``'s when filtered), grants across fabrics and grants
    naming absent nodes, no line wider than ``width`` cells."""
    width = max(width, 1)
    out = Text(no_wrap=True, overflow="crop")
    _legend(out, width)
    fabrics = [(fab, names) for fab, names in g.by_fabric().items() if fabric is None or fab == fabric]
    for fab, names in fabrics[:LIST_MAX]:
        out.append("\n")
        _line(out, width, (fab or "(ungrouped)", TITLE_STYLE),
              (f" · {len(names)} node{'s' if len(names) != 1 else ''}", NOTE_STYLE))
        edges = g.edges(names)
        if not _diagram(out, width, names, edges):
            _compact(out, width, names, edges)
    if len(fabrics) > LIST_MAX:
        out.append("\n")
        _line(out, width, (f"… and {len(fabrics) - LIST_MAX:,} more fabrics (pick one in 2 Fabrics)", NOTE_STYLE))
    if fabric is None:
        def fabrics(name: str) -> set[str]:  # two ungrouped nodes share the ungrouped picture
            return set(g.nodes[name].groups or ("",))
        cross = [e for e in g.edges() if not fabrics(e.src) & fabrics(e.dst)]
        if cross:
            out.append("\n")
            _line(out, width, ("across fabrics", TITLE_STYLE))
            for e in cross[:LIST_MAX]:
                arrow, style = ("◀──▶", MUTUAL_STYLE) if e.kind == MUTUAL else ("──▶", ONE_WAY_STYLE)
                where = f"{_fabric_label(g, e.src)} · {_fabric_label(g, e.dst)}"
                _line(out, width, (f"  {e.src} ", "bold"), (arrow, style), (f" {e.dst}", "bold"),
                      (f"   {where}", NOTE_STYLE))
            _more(out, width, len(cross))
    dangling = g.dangling()
    if dangling:
        out.append("\n")
        _line(out, width, ("grants naming absent nodes", "bold"))
        for n, a in dangling[:LIST_MAX]:
            _line(out, width, (f"  {n} allows {a} (not registered)", NOTE_STYLE))
        _more(out, width, len(dangling))
    out.rstrip()
    return out


def _fabric_label(g: AccessGraph, name: str) -> str:
    return "/".join(g.nodes[name].groups) or "(ungrouped)"


def _more(out: Text, width: int, count: int) -> None:
    if count > LIST_MAX:
        _line(out, width, (f"  … and {count - LIST_MAX:,} more (E exports them all)", NOTE_STYLE))


def _line(out: Text, width: int, *parts: tuple[str, str]) -> None:
    t = Text(no_wrap=True)
    for s, style in parts:
        t.append(s, style=style)
    t.truncate(width, overflow="ellipsis")
    out.append_text(t)
    out.append("\n")


def _legend(out: Text, width: int) -> None:
    # Items wrap whole so a narrow pane gets two or three short legend lines, not a cut-off one.
    line: list[tuple[str, str]] = []
    used = 0
    for item in LEGEND:
        w = sum(cell_len(s) for s, _ in item)
        sep = 3 if line else 0
        if line and used + sep + w > width:
            _line(out, width, *line)
            line, used, sep = [], 0, 0
        if sep:
            line.append(("   ", ""))
        line.extend(item)
        used += sep + w
    if line:
        _line(out, width, *line)


def _shorten(name: str, room: int) -> str:
    # Cut the middle: node names tend to differ at the end (gateway-1, gateway-2).
    if cell_len(name) <= room:
        return name
    head = room // 2
    tail = room - 1 - head
    return name[:head] + "…" + (name[-tail:] if tail else "")


def _pick_note(notes: tuple[str, ...], room: int) -> str:
    return next((n for n in notes if cell_len(n) <= room), "")


class _Row:
    """One line of cells; styles kept per cell so connectors can overwrite lanes."""

    def __init__(self, width: int) -> None:
        self.chars = [" "] * width
        self.styles = [""] * width

    def put(self, x: int, s: str, style: str) -> None:
        for i, ch in enumerate(s):
            self.chars[x + i] = ch
            self.styles[x + i] = style

    def text(self) -> Text:
        t = Text(no_wrap=True)
        start = 0
        for i in range(1, len(self.chars) + 1):
            if i == len(self.chars) or self.styles[i] != self.styles[start]:
                t.append("".join(self.chars[start:i]), style=self.styles[start])
                start = i
        t.rstrip()
        return t


def _diagram(out: Text, width: int, names: list[str], edges: list[Edge]) -> bool:
    """Draw the lanes; False (nothing drawn) when they cannot fit legibly in ``width``."""
    n = len(names)
    if any(cell_len(x) != len(x) for x in names):  # lanes are placed one character per cell
        return False
    want = max(min(max(cell_len(x) for x in names), MAX_LABEL) + 2, MIN_PITCH)
    pitch = min(want, (width - INDENT) // n)
    if pitch < MIN_PITCH:
        return False
    labels = [_shorten(x, pitch - 1) for x in names]
    if len(set(labels)) != n:  # shortened names would be ambiguous
        return False
    lanes = [INDENT + i * pitch + pitch // 2 for i in range(n)]
    col = {x: i for i, x in enumerate(names)}
    linked = {e.src for e in edges} | {e.dst for e in edges}
    body = INDENT + n * pitch
    note_x = body + NOTE_GAP
    room = width - note_x

    def row(note: str = "", note_style: str = NOTE_STYLE) -> _Row:
        r = _Row(body + (NOTE_GAP + cell_len(note) if note else 0))
        if note:
            r.put(note_x, note, note_style)
        return r

    r = row()
    for x, label, lane in zip(names, labels, lanes):
        r.put(lane - (cell_len(label) - 1) // 2, label, "bold" if x in linked else NONE_STYLE)
    _emit(out, r)

    # The ✗ row is only worth its line when some lane has no grant; otherwise the connectors
    # start right under the labels (a pane is short and every fabric competes for it).
    if linked != set(names):
        notes = NO_EDGE_NOTES if not edges else UNLINKED_NOTES
        r = row(_pick_note(notes, room), NONE_STYLE)
        for x, lane in zip(names, lanes):
            r.put(lane, "│" if x in linked else "✗", LANE_STYLE if x in linked else NONE_STYLE)
        _emit(out, r)

    for e in edges:
        mutual = e.kind == MUTUAL
        style = MUTUAL_STYLE if mutual else ONE_WAY_STYLE
        notes = MUTUAL_NOTES if mutual else (f"one-way: {e.dst} cannot answer", "one-way, reverse ✗",
                                             "reverse ✗", "")
        r = row(_pick_note(notes, room), NOTE_STYLE)
        for x, lane in zip(names, lanes):
            r.put(lane, "│" if x in linked else "┊", LANE_STYLE if x in linked else NONE_STYLE)
        s, d = lanes[col[e.src]], lanes[col[e.dst]]
        left, right = min(s, d), max(s, d)
        # Heads sit just inside the lanes of the nodes that may be written to, so the lane itself
        # stays visible as ├ or ┤ at both ends.
        r.put(left, "├" + "─" * (right - left - 1) + "┤", style)
        if mutual or d == right:
            r.put(right - 1, "▶", style)
        if mutual or d == left:
            r.put(left + 1, "◀", style)
        _emit(out, r)
    return True


def _emit(out: Text, r: _Row) -> None:
    out.append_text(r.text())
    out.append("\n")


def _compact(out: Text, width: int, names: list[str], edges: list[Edge]) -> None:
    """The fabric as a list, for when its lanes do not fit: full names, one grant per line."""
    _line(out, width, ("  as a list: its lanes do not fit this width", NOTE_STYLE))
    linked = {e.src for e in edges} | {e.dst for e in edges}
    for e in edges[:LIST_MAX]:
        if e.kind == MUTUAL:
            _line(out, width, (f"  {e.src} ", "bold"), ("◀──▶", MUTUAL_STYLE), (f" {e.dst}", "bold"),
                  ("  mutual", NOTE_STYLE))
        else:
            _line(out, width, (f"  {e.src} ", "bold"), ("──▶", ONE_WAY_STYLE), (f" {e.dst}", "bold"),
                  (f"  {e.dst} cannot answer", NOTE_STYLE))
    _more(out, width, len(edges))
    unlinked = [x for x in names if x not in linked]
    for x in unlinked[:LIST_MAX]:
        _line(out, width, (f"  {x} ", NONE_STYLE), ("✗", NONE_STYLE), ("  no grant in fabric", NOTE_STYLE))
    if len(unlinked) > LIST_MAX:
        _line(out, width, (f"  … and {len(unlinked) - LIST_MAX:,} more with no grant in fabric", NOTE_STYLE))
