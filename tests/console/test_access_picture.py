"""The access picture (lanes and arrows per fabric) as a pure function of the graph and a width."""

from rich.cells import cell_len

from speedtui.models.access import AccessGraph
from speedtui.models.registry import build_row
from speedtui.ui.views.access_picture import access_picture

from .conftest import entry_record, node_id


def entry(name, groups=(), allow=()):
    d = {"name": name, "id": node_id(name), "pid": 1, "host": "elsewhere", "status": "online",
         "startupTimestamp": 1000.0, "lastHeartbeat": 1999.0, "leaseSeconds": 30,
         "groups": list(groups), "allow": list(allow), "services": []}
    return entry_record(name, d)


def graph(*entries):
    return AccessGraph([build_row(e, 2000.0) for e in entries])


def lines(text):
    return text.plain.split("\n")


def sections(text):
    """{title: lines} for each blank-line separated block; the title is the block's first word(s)
    before the node count."""
    out = {}
    for block in text.plain.split("\n\n")[1:]:  # the first block is the legend
        head, *body = block.split("\n")
        out[head.split(" · ")[0]] = body
    return out


def lane(label_line, name):
    start = label_line.index(name)
    return start + (len(name) - 1) // 2


def styles_at(text, offset):
    return " ".join(str(s.style) for s in text.spans if s.start <= offset < s.end)


def row_offset(text, line_no):
    return sum(len(ln) + 1 for ln in lines(text)[:line_no])


def find_line(ls, needle):
    return next(i for i, ln in enumerate(ls) if needle in ln)


def test_mutual_edge_draws_both_arrowheads_between_the_two_lanes():
    g = graph(entry("alpha", ["f"], ["beta"]), entry("beta", ["f"], ["alpha"]))
    pic = access_picture(g, 60)
    ls = lines(pic)
    labels = find_line(ls, "alpha")
    a, b = lane(ls[labels], "alpha"), lane(ls[labels], "beta")
    conn = ls[labels + 1]
    assert conn[a] == "├" and conn[a + 1] == "◀"
    assert conn[b - 1] == "▶" and conn[b] == "┤"
    assert set(conn[a + 2:b - 1]) == {"─"}
    assert "mutual" in conn
    assert "green" in styles_at(pic, row_offset(pic, labels + 1) + a + 1)


def test_one_way_draws_one_arrowhead_pointing_at_the_destination_lane():
    # beta allows alpha: alpha may write beta, not the reverse.
    g = graph(entry("alpha", ["f"]), entry("beta", ["f"], ["alpha"]))
    pic = access_picture(g, 60)
    ls = lines(pic)
    labels = find_line(ls, "alpha")
    a, b = lane(ls[labels], "alpha"), lane(ls[labels], "beta")
    conn = ls[labels + 1]
    assert conn[a] == "├" and conn[b - 1] == "▶" and conn[b] == "┤"
    assert conn.count("▶") == 1 and "◀" not in conn
    assert "beta cannot answer" in conn
    assert "yellow" in styles_at(pic, row_offset(pic, labels + 1) + b - 1)

    # The destination on the left gets the head on the left.
    g = graph(entry("alpha", ["f"], ["beta"]), entry("beta", ["f"]))
    ls = lines(access_picture(g, 60))
    labels = find_line(ls, "alpha")
    a, b = lane(ls[labels], "alpha"), lane(ls[labels], "beta")
    conn = ls[labels + 1]
    assert conn[a] == "├" and conn[a + 1] == "◀" and conn[b] == "┤"
    assert conn.count("◀") == 1 and "▶" not in conn
    assert "alpha cannot answer" in conn


def test_a_node_without_grants_shows_a_cross_on_its_lane():
    g = graph(entry("alpha", ["f"], ["beta"]), entry("beta", ["f"], ["alpha"]), entry("gamma", ["f"]))
    pic = access_picture(g, 60)
    ls = lines(pic)
    labels = find_line(ls, "gamma")
    c = lane(ls[labels], "gamma")
    marks = ls[labels + 1]
    assert marks[c] == "✗" and marks.count("✗") == 2  # the lane's mark and the note's
    assert "no grant" in marks
    assert "red" in styles_at(pic, row_offset(pic, labels + 1) + c)
    assert "red" in styles_at(pic, row_offset(pic, labels) + ls[labels].index("gamma"))
    # Its lane stays visible (dotted) through the grant rows of the others.
    assert ls[labels + 2][c] == "┊"
    for name in ("alpha", "beta"):
        assert marks[lane(ls[labels], name)] == "│"


def test_a_fabric_without_any_grant_says_so():
    g = graph(entry("alpha", ["f"]), entry("beta", ["f"]))
    body = sections(access_picture(g, 60))["f"]
    assert body[1].count("✗") == 2 and "no grants inside this fabric" in body[1]
    assert len(body) == 2  # labels and crosses, no connector rows


def test_nodes_appear_under_every_fabric_they_belong_to_and_ungrouped_have_their_own():
    g = graph(entry("hub", ["x", "y"], ["a", "b"]), entry("a", ["x"], ["hub"]), entry("b", ["y"], ["hub"]),
              entry("loner"), entry("solo", [], ["hub"]))
    secs = sections(access_picture(g, 80))
    assert list(secs) == ["x", "y", "(ungrouped)", "across fabrics"]
    assert "hub" in secs["x"][0] and "a" in secs["x"][0].split()
    assert "hub" in secs["y"][0] and "b" in secs["y"][0].split()
    assert "◀" in secs["x"][1] and "▶" in secs["x"][1]
    assert secs["(ungrouped)"][0].split() == ["loner", "solo"]
    assert all("loner" not in ln for name in ("x", "y") for ln in secs[name])
    # solo allows hub, so hub may write solo, across fabrics: listed there, with its direction
    assert any("hub ──▶ solo" in ln for ln in secs["across fabrics"])


def test_a_grant_between_two_ungrouped_nodes_is_in_their_picture_not_across_fabrics():
    # (seen on hand-started `speed node`s, which have no fabric unless given one)
    g = graph(entry("a", [], ["b"]), entry("b"), entry("c", ["x"], ["a"]))
    secs = sections(access_picture(g, 80))
    assert list(secs) == ["x", "(ungrouped)", "across fabrics"]
    assert "▶" in secs["(ungrouped)"][1] or "◀" in secs["(ungrouped)"][1]  # b ──▶ a, drawn between the lanes
    assert [ln.split()[:3] for ln in secs["across fabrics"]] == [["a", "──▶", "c"]]


def test_a_fabrics_name_and_its_count_are_apart_by_a_visible_separator():
    """Not by spaces only: in the screenshots "analytics  2 nodes" was read as "analytics2 nodes"."""
    g = graph(entry("hub", ["analytics"], ["a"]), entry("a", ["analytics"], ["hub"]), entry("gw", ["edge"]))
    heads = [block.split("\n")[0] for block in access_picture(g, 80).plain.split("\n\n")[1:]]
    assert heads == ["analytics · 2 nodes", "edge · 1 node"]


def test_fabric_filter_shows_only_that_fabric():
    g = graph(entry("hub", ["x", "y"], ["a"]), entry("a", ["x"], ["hub"]), entry("loner"))
    secs = sections(access_picture(g, 80, fabric="y"))
    assert list(secs) == ["y"]
    secs = sections(access_picture(g, 80, fabric=""))
    assert list(secs) == ["(ungrouped)"]


def test_grants_naming_absent_nodes_are_listed():
    g = graph(entry("alpha", ["f"], ["ghost"]))
    assert "alpha allows ghost (not registered)" in access_picture(g, 80).plain


def twelve():
    names = [f"node-{i:02d}" for i in range(12)]
    allow = {n: [] for n in names}
    allow["node-00"] += ["node-05", "node-11"]
    allow["node-05"] += ["node-00"]
    allow["node-11"] += ["node-03"]
    allow["node-07"] += ["node-08"]
    allow["node-08"] += ["node-07"]
    return names, graph(*[entry(n, ["big"], allow[n]) for n in names] + [entry("other", ["edge"], ["node-00"])])


def test_no_line_is_wider_than_the_width_given():
    names, g = twelve()
    for width in (40, 80, 120):
        pic = access_picture(g, width)
        assert all(cell_len(ln) <= width for ln in lines(pic)), width
        body = sections(pic)["big"]
        if "lanes do not fit" in body[0]:
            assert all(any(n in ln.split() for ln in body) for n in names), width
        else:
            assert len(body[0].split()) == 12 and all(n[-2:] in body[0] for n in names), width
    # wide enough: lanes with whole names; too narrow: the list, still with whole names
    assert all(n in sections(access_picture(g, 120))["big"][0] for n in names)
    narrow = sections(access_picture(g, 40))["big"]
    assert "lanes do not fit" in narrow[0]
    assert any(ln.strip().startswith("node-00 ◀──▶ node-05") for ln in narrow)
    assert any(ln.strip().startswith("node-11 ──▶ node-00") for ln in narrow)
    assert any(ln.strip().startswith("node-01 ✗") for ln in narrow)


def test_shortened_labels_keep_the_part_that_tells_nodes_apart():
    names, g = twelve()
    head = sections(access_picture(g, 80))["big"][0]
    assert "…" in head and head.split() == [f"no…{i:02d}" for i in range(12)]


def test_very_narrow_widths_do_not_break():
    names, g = twelve()
    for width in (1, 5, 12):
        assert all(cell_len(ln) <= width for ln in lines(access_picture(g, width)))


def test_same_input_same_picture():
    names, g = twelve()
    a, b = access_picture(g, 80), access_picture(g, 80)
    assert a.plain == b.plain and a.spans == b.spans
    rows = list(g.nodes.values())
    c = access_picture(AccessGraph(reversed(rows)), 80)
    assert c.plain == a.plain and c.spans == a.spans
