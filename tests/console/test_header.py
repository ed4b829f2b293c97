"""The header's left part at every width: what gives way first, and that it never overflows."""
import pytest

from speedtui.ui.widgets.header import MIN_DIR_CELLS, HeaderInfo, header_text, shorten_path

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
