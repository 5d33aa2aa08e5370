"""The benchmark's scorer on tiny made-up pages (no dataset access)."""

from __future__ import annotations

import pytest

from bench.scoring import TextLine, bag_distance, geo_order, micro_average, score_page
from bench.text_forms import normalize


def test_normalize_removes_whitespace_and_folds_case_on_request() -> None:
    assert normalize(" To tal\t9.00\n", case_insensitive=False) == "Total9.00"
    assert normalize("To tal", case_insensitive=True) == "total"


def test_cer_counts_edits_over_gt_chars() -> None:
    gt = [TextLine("ABCD", (0, 0, 40, 10))]
    hyp = [TextLine("ABXD E", (0, 0, 40, 10))]  # one substitution, one insertion
    score = score_page(gt, hyp, case_insensitive=False)
    assert score.gt_chars == 4
    assert score.geo_errors == 2
    assert micro_average([score]).cer_geo == pytest.approx(0.5)


def test_case_folding_only_when_asked() -> None:
    gt = [TextLine("TOTAL", (0, 0, 50, 10))]
    hyp = [TextLine("Total", (0, 0, 50, 10))]
    assert score_page(gt, hyp, case_insensitive=True).geo_errors == 0
    assert score_page(gt, hyp, case_insensitive=False).geo_errors == 4


def test_micro_average_weights_pages_by_length() -> None:
    long_page = score_page([TextLine("A" * 9, (0, 0, 90, 10))], [TextLine("A" * 9, (0, 0, 90, 10))], False)
    short_page = score_page([TextLine("B", (0, 0, 10, 10))], [TextLine("C", (0, 0, 10, 10))], False)
    assert micro_average([long_page, short_page]).cer_geo == pytest.approx(0.1)


def test_geo_order_reads_two_columns_row_by_row() -> None:
    # Annotated as a label column, then a value column (as SROIE receipts often are).
    gt = [
        TextLine("TOTAL", (0, 0, 50, 10)),
        TextLine("CASH", (0, 20, 40, 30)),
        TextLine("9.00", (100, 1, 140, 11)),
        TextLine("10.00", (100, 19, 150, 29)),
    ]
    assert [line.text for line in geo_order(gt)] == ["TOTAL", "9.00", "CASH", "10.00"]
    # An engine that reads row by row is perfect under the geometric order, not in annotation order.
    hyp = [
        TextLine("TOTAL", (1, 0, 51, 10)),
        TextLine("9.00", (101, 0, 141, 10)),
        TextLine("CASH", (1, 20, 41, 30)),
        TextLine("10.00", (101, 20, 151, 30)),
    ]
    score = score_page(gt, hyp, case_insensitive=False)
    assert score.geo_errors == 0
    assert score.annotation_errors > 0
    assert score.bag_errors == 0


def test_bag_distance_is_order_free_lower_bound() -> None:
    assert bag_distance("abc", "cba") == 0
    assert bag_distance("abc", "abd") == 1  # one substitution: one missing and one extra
    assert bag_distance("abc", "") == 3


def test_spaced_cer_counts_glued_words_and_ignores_runs_of_spaces() -> None:
    gt = [TextLine("ABC HO TRADING", (0, 0, 140, 10))]
    glued = score_page(gt, [TextLine("ABCHO TRADING", (0, 0, 140, 10))], case_insensitive=True)
    assert glued.geo_errors == 0, "the whitespace-free figure cannot see a missing space"
    assert glued.geo_errors_spaced == 1
    assert glued.gt_chars_spaced == len("ABC HO TRADING")
    doubled = score_page(gt, [TextLine("abc  ho\tTRADING ", (0, 0, 140, 10))], case_insensitive=True)
    assert doubled.geo_errors_spaced == 0
    assert micro_average([glued, doubled]).cer_geo_spaced == pytest.approx(1 / 28)


def test_spaced_cer_separates_lines_by_one_space() -> None:
    gt = [TextLine("TOTAL", (0, 0, 50, 10)), TextLine("9.00", (0, 20, 40, 30))]
    merged = [TextLine("TOTAL9.00", (0, 0, 90, 30))]
    score = score_page(gt, merged, case_insensitive=False)
    assert score.geo_errors == 0
    assert score.geo_errors_spaced == 1
