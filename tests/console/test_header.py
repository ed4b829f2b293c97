"""The header's left part at every width: what gives way first, and that it never overflows."""
import pytest

from speedtui.ui.widgets.header import MIN_DIR_CELLS, HeaderInfo, SpeedHeader, header_text, shorten_path

from .conftest import run_async, wait_for
from .test_snapshots import operator_fixture_app

INFO = HeaderInfo("/dev/shm/speed-demo-k2x9w1q/env", "aa9974689b32b62a",
                  (("leaving", 1), ("online", 12), ("stale", 2)), demo=True)


def test_wide_enough_shows_everything():
    text = header_text(INFO, 120).plain
    assert text.startswith(" SPEED  DEMO  /dev/shm/speed-demo-k2x9w1q/env ")
    assert "● 12 online ◐ 1 leaving ○ 2 stale" in text and text.endswith("key aa9974689b32b62a")


def test_counts_lose_their_words_before_the_directory_is_shortened():
    full = header_text(INFO, 200).cell_len
    text = header_text(INFO, full - 1).plain
    assert "/dev/shm/speed-demo-k2x9w1q/env" in text and "●12 ◐1 ○2" in text and "online" not in text


def test_the_directory_keeps_its_end_and_the_fingerprint_stays():
    text = header_text(INFO, 60).plain
    assert len(text) == 60
    assert "…" in text and "k2x9w1q/env" in text and text.endswith("aa9974689b32b62a")


@pytest.mark.parametrize("width", range(30, 131, 7))
def test_fits_whenever_the_shortest_form_fits(width):
    info = HeaderInfo("/very/long/" + "x" * 80, "aa9974689b32b62a", (("online", 3),), readonly=True,
                      fabric="finance", paused=True)
    shortest = header_text(info, 0).cell_len  # badges, a directory of MIN_DIR_CELLS, bare counts, the key
    assert header_text(info, width).cell_len <= max(width, shortest)
    assert "aa9974689b32b62a" in header_text(info, width).plain


def test_shorten_path():
    assert shorten_path("/dev/shm/speed", 20) == "/dev/shm/speed"
    assert shorten_path("/dev/shm/speed-demo/env", 12) == "…ed-demo/env"
    assert len(shorten_path("/a/b/c/d/e/f/g/h", MIN_DIR_CELLS)) == min(MIN_DIR_CELLS, 16)


def test_the_operator_fingerprint_stays_at_80_columns():
    """80 columns leave the header's info 67 cells (the rate takes 13): both fingerprints fit."""
    info = HeaderInfo("/dev/shm/speed", "aa9974689b32b62a", (("online", 4), ("stale", 2)),
                      operator="16ccdefa0b1e09bb")
    assert header_text(info, 120).plain.endswith("key aa9974689b32b62a  operator 16ccdefa0b1e09bb")
    narrow = header_text(info, 67).plain
    assert len(narrow) <= 67 and narrow.endswith("key aa9974689b32b62a  op 16ccdefa0b1e09bb")



@run_async
async def test_a_fabric_filter_is_read_whole_beside_an_operator_key_at_120_columns(fixture_env):
    """At 120 columns the sparkline and the rate leave the text 83 cells: with an operator key and a
    fabric filter the filter's name was cut (to "fabric: fin…", or nothing with a longer directory).
    The sparkline gives its cells instead, and takes them back when the filter goes."""
    app = operator_fixture_app(fixture_env)
    async with app.run_test(size=(120, 36)) as pilot:
        header, info = app.query_one(SpeedHeader), app.query_one("#hdr-info")
        app.nav.set_fabric("finance")
        await wait_for(pilot, lambda: "fabric" in info.render().plain, what="the filter in the header")
        await wait_for(pilot, lambda: info.render().plain.rstrip().endswith("fabric: finance"),
                       timeout=5, what=f"the filter whole, not {info.render().plain!r}")
        assert info.render().cell_length <= info.size.width  # drawn whole, not cut at the pane's edge
        assert "op 16ccdefa0b1e09bb" in info.render().plain and header.has_class("-narrow")
        app.nav.set_fabric(None)
        await wait_for(pilot, lambda: not header.has_class("-narrow"), timeout=5, what="the sparkline back")


def test_where_even_that_is_short_the_operator_fingerprint_keeps_8_digits_before_the_filter_is_cut():
    info = HeaderInfo("/dev/shm/speed", "aa9974689b32b62a", (("online", 4),), fabric="finance",
                      operator="16ccdefa0b1e09bb")
    text = header_text(info, 77).plain
    assert len(text) <= 77 and text.endswith("key aa9974689b32b62a  op 16ccdefa…  fabric: finance")
