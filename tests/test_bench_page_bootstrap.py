"""bench.page_bootstrap: two readings of the same pages compared with a paired bootstrap over pages."""

from __future__ import annotations

import pytest

from bench.page_bootstrap import against_best_other, compare, page_counts, scores_difference
from bench.scoring import PageScore


def test_a_reading_better_on_every_page_is_better_beyond_the_luck_of_the_pages() -> None:
    result = compare(page_counts([3] * 20, [0] * 20, [30] * 20), resamples=999)
    assert result.cer_a == pytest.approx(0.1)
    assert result.cer_b == 0.0
    assert result.high < 0  # the whole interval says B reads better
    assert result.b_better_share == 1.0
    assert (result.pages, result.resamples) == (20, 999)


def test_a_difference_carried_by_one_page_is_within_the_luck_of_the_pages() -> None:
    # The same edits on 19 pages; on one page B makes 30 more. Its CER is higher, but a resample
    # that does not draw that page (about a third of them) shows no difference at all.
    result = compare(page_counts([0] * 20, [30] + [0] * 19, [30] * 20), resamples=999)
    assert result.difference == pytest.approx(30 / 600)
    assert result.low <= 0 < result.high
    assert result.b_better_share == 0.0  # never better: only level or worse


def test_pages_of_more_characters_weigh_more() -> None:
    # B is one edit better on a 100-character page and one worse on a 10-character one: level in
    # edits, so level in CER, which counts characters over the whole set, not a mean of pages' CER.
    result = compare(page_counts([1, 0], [0, 1], [100, 10]), resamples=99)
    assert result.difference == 0.0


def test_one_page_has_nothing_to_resample() -> None:
    result = compare(page_counts([0], [4], [20]))
    assert result.low == result.difference == result.high == pytest.approx(0.2)
    assert result.resamples == 0


def test_counts_are_given_for_the_same_pages() -> None:
    with pytest.raises(ValueError, match="same pages"):
        page_counts([1, 2], [1], [10, 10])


def test_a_difference_is_described_in_points_with_its_interval() -> None:
    described = compare(page_counts([3] * 4, [0] * 4, [30] * 4), resamples=99).described()
    assert described == (
        "-10.00 points, 95% interval -10.00 to -10.00 (4 pages resampled 99 times); "
        "B better in 100.0% of them"
    )
    assert described.replace("B better", "ours better") == compare(
        page_counts([3] * 4, [0] * 4, [30] * 4), resamples=99
    ).described(b="ours")


def _scores(errors: list[int], chars: int = 50) -> list[PageScore]:
    return [PageScore(chars, geo, geo, geo, chars + 10, geo + 1) for geo in errors]


def test_each_of_ours_is_set_against_the_other_engine_with_the_lowest_cer() -> None:
    scores = {
        "appliance": _scores([0] * 12),
        "appliance:fast": _scores([2] * 12),
        "tesseract": _scores([5] * 12),
        "ppocrv6_small": _scores([1] * 12),
    }
    rows = against_best_other(scores, ["appliance", "appliance:fast"])
    assert [(row.engine, row.against) for row in rows] == [
        ("appliance", "ppocrv6_small"),
        ("appliance:fast", "ppocrv6_small"),
    ]
    assert rows[0].differences["whitespace-free"].difference == pytest.approx(-1 / 50)  # ours reads better
    assert rows[1].differences["whitespace-free"].difference == pytest.approx(1 / 50)
    assert rows[0].differences["spaced"].difference == pytest.approx(
        -1 / 60
    )  # spaced edits over spaced length
    assert against_best_other({"appliance": _scores([0])}, ["appliance"]) == []  # nothing else ran


def test_readings_of_different_page_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="same pages"):
        scores_difference(_scores([1, 2]), _scores([1]))
