"""Search: which words a filter highlights, which lines hold them, where n / N go."""

from speedtui.models.search import matching_lines, next_match, search_words


def test_search_words_take_free_text_and_values_not_comparisons():
    assert search_words("node:Billing echo latency>50ms  type:") == ("billing", "type:", "echo")


def test_search_words_put_longer_words_first():
    assert search_words("bill billing") == ("billing", "bill")


def test_matching_lines_ignore_case_and_need_a_word():
    lines = ["alpha", "Billing up", "beta", "BILLING down"]
    assert matching_lines(lines, ("billing",)) == [1, 3]
    assert matching_lines(lines, ()) == []


def test_next_match_moves_and_wraps_both_ways():
    matches = [2, 5, 9]
    assert next_match(matches, None) == 2
    assert next_match(matches, None, forward=False) == 9
    assert next_match(matches, 2) == 5
    assert next_match(matches, 6) == 9
    assert next_match(matches, 9) == 2
    assert next_match(matches, 5, forward=False) == 2
    assert next_match(matches, 2, forward=False) == 9
    assert next_match([], 3) is None
