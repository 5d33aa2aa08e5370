"""Dates whose separators the reader lost, and the formats receipts print, on invented text."""

from __future__ import annotations

import pytest

from appliance.repair.dates import find_dates, parse_date


@pytest.mark.parametrize(
    ("text", "locale", "iso", "rules"),
    [
        # The till prints time, then date; the reader ran day and month together.
        ("09:12AM 771203 1107-19", "en-MY", "2019-07-11", ("date.dmy", "date.lost_separator")),
        ("1107-19 09:12", "en-MY", "2019-07-11", ("date.dmy", "date.lost_separator")),
        ("21:40 2806/2021", "en-GB", "2021-06-28", ("date.dmy", "date.lost_separator")),
        ("09:12AM 771203 1107-19", "en-US", "2019-11-07", ("date.mdy", "date.lost_separator")),
        ("10/09/2019-17:05", "en-MY", "2019-09-10", ("date.dmy",)),  # the time joined by a dash
        ("2019-09-10-17:05", "en-MY", "2019-09-10", ("date.iso",)),
        ("14-Sep-19", "en-MY", "2019-09-14", ("date.month_name", "date.two_digit_year")),
        ("2019/09/14", "en-MY", "2019-09-14", ("date.iso",)),
    ],
)
def test_dates_as_tills_print_them(text: str, locale: str, iso: str, rules: tuple[str, ...]) -> None:
    date = parse_date(text, locale)
    assert date is not None
    assert date.iso == iso
    assert date.rules[: len(rules)] == rules


@pytest.mark.parametrize(
    ("text", "locale"),
    [
        ("ITEM 771203 1107-19", "en-MY"),  # no time on the row: an item or batch code
        ("REF 4471-22 10:15", "en-MY"),  # 44/71 is no day and month either way
        ("TEL 0123-45 10:15", "en-MY"),  # only month first (23 Jan) would read: against the locale
        ("10:15 551107-19", "en-MY"),  # a longer number, not a date
        ("10/09/2019-17", "en-MY"),  # a dash and a number that is no time
    ],
)
def test_a_lost_separator_is_not_guessed_into_a_code(text: str, locale: str) -> None:
    assert find_dates(text, locale) == []
