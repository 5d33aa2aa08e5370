"""Dates as printed (2024年3月5日, 05/03/2024, 5 Mar 2024, 2024-03-05) to ISO 8601.

Hand-written rather than dateparser: dateparser brings regex, tzlocal and dozens of language
tables, guesses silently (relative dates, "today"), and does not say which reading it chose; here
each format is one rule id, and a day/month order that only the locale decided is reported as such.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from appliance.repair.locale import month_first
from appliance.repair.numeric import fix_digits

MONTHS = {name: index + 1 for index, name in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}  # fmt: skip
_D = r"[\dOoIlSB]"  # a digit, or a glyph the recogniser confuses with one (fixed before reading)
# A time printed straight after the date, its space lost by the recogniser ("10/03/201817:24:07"),
# or joined to it by a dash ("10/03/2018-17:24").
_GLUED_TIME = r"(?=-?[0-2]?\d[:.][0-5]\d)"
_MONTH = r"(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sept?|[o0]ct|nov|dec)[a-z]*\.?"  # 0CT: O read as 0
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("date.cjk", re.compile(r"(?P<y>\d{4})\s*年\s*(?P<m>\d{1,2})\s*月\s*(?P<d>\d{1,2})\s*[日号]?")),
    ("date.iso", re.compile(
        rf"(?<![\d/.-])(?P<y>(?:19|20|2O){_D}{{2}})[-/.](?P<m>{_D}{{1,2}})[-/.](?P<d>{_D}{{1,2}})"
        rf"(?:{_GLUED_TIME}|(?![\d/.-]))")),
    ("date.numeric", re.compile(
        rf"(?<![\d/.-])(?P<a>{_D}{{1,2}})\s?(?P<sep>[-/.])\s?(?P<b>{_D}{{1,2}})\s?(?P=sep)\s?"
        rf"(?P<y>(?:19|20|2O){_D}{{2}}|{_D}{{2}})(?:{_GLUED_TIME}|(?!\d|[/.-]\d))")),
    # One separator lost by the reader ("05 02-18"): two-digit day and month only, so a phone
    # number or a quantity and a price never read as one.
    ("date.numeric", re.compile(
        rf"(?<![\d/.-])(?P<a>\d{{2}}) (?P<b>\d{{2}})(?P<sep>[-/])(?P<y>(?:19|20)\d{{2}}|\d{{2}})"
        rf"(?:{_GLUED_TIME}|(?!\d|[/.-]\d))")),
    # The separator between day and month lost ("0502-18"): read only on a row that prints a
    # time too (_NEEDS_TIME), the way tills print the date, so a code or a phone number never is.
    ("date.lost_separator", re.compile(
        rf"(?<![\d/.-])(?P<a>\d{{2}})(?P<b>\d{{2}})(?P<sep>[-/])(?P<y>(?:19|20)\d{{2}}|\d{{2}})"
        rf"(?:{_GLUED_TIME}|(?!\d|[/.-]\d))")),
    ("date.month_name", re.compile(
        rf"(?<![\d])(?P<d>\d{{1,2}})(?:st|nd|rd|th)?[\s/-]*{_MONTH}"
        rf"[\s,/-]*(?P<y>(?:19|20)\d{{2}}(?!\d{{3}})|\d{{2}}(?!\d))", re.IGNORECASE)),
    ("date.month_name", re.compile(
        rf"(?<![a-z]){_MONTH}\s*(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?"
        rf"\s*(?P<y>(?:19|20)\d{{2}})(?!\d{{2}})", re.IGNORECASE)),
]  # fmt: skip


_NEEDS_TIME = {"date.lost_separator"}
_TIME = re.compile(r"(?<!\d)[0-2]?\d:[0-5]\d(?!\d)")


@dataclass(frozen=True)
class DateMatch:
    """A date found in text: its ISO form, the text as printed, where it stands, the rules used."""

    iso: str
    raw: str
    start: int
    end: int
    rules: tuple[str, ...]
    ambiguous: bool  # day and month could be swapped and only the locale chose


def _year(text: str) -> tuple[int, bool]:
    if len(text) == 4:
        return int(text), False
    value = int(text)
    # Two-digit years on receipts and forms are this century's; 70-99 are the last one's.
    return (1900 + value if value >= 70 else 2000 + value), True


def _make(year: int, month: int, day: int) -> str | None:
    try:
        return dt.date(year, month, day).isoformat()
    except ValueError:
        return None


def _read(rule: str, match: re.Match[str], locale: str) -> DateMatch | None:
    rules = [rule]
    groups = match.groupdict()
    raw_digits = {key: groups[key] for key in ("y", "m", "d", "a", "b") if groups.get(key)}
    for key, value in raw_digits.items():
        fixed, changed = fix_digits(value)
        if changed:
            rules.append("numeric.confusion")
        if not fixed.isdigit():
            return None
        raw_digits[key] = fixed
    year, two_digit = _year(raw_digits["y"])
    if two_digit:
        rules.append("date.two_digit_year")
    ambiguous = False
    if rule in {"date.numeric", "date.lost_separator"}:
        first, second = int(raw_digits["a"]), int(raw_digits["b"])
        day_first = _make(year, second, first)
        month_first_reading = _make(year, first, second)
        prefer_month = month_first(locale)
        if day_first and month_first_reading and first != second:
            ambiguous = True
        if rule == "date.lost_separator" and not (month_first_reading if prefer_month else day_first):
            return None  # with a separator lost, a reading against the locale is a code, not a date
        if (prefer_month and month_first_reading) or not day_first:
            iso, order = month_first_reading, "date.mdy"
        else:
            iso, order = day_first, "date.dmy"
        # The order first: callers weigh a reading against the locale by rules[0].
        rules = [order, *([rule] if rule != "date.numeric" else []), *rules[1:]]
    elif groups.get("mon"):
        iso = _make(year, MONTHS[groups["mon"].lower().replace("0", "o")[:3]], int(raw_digits["d"]))
    else:
        iso = _make(year, int(raw_digits["m"]), int(raw_digits["d"]))
    if iso is None:
        return None
    return DateMatch(
        iso, match.group(0).strip(), match.start(), match.end(), tuple(dict.fromkeys(rules)), ambiguous
    )


def find_dates(text: str, locale: str) -> list[DateMatch]:
    """Every date in `text`, left to right, overlapping readings dropped (the earlier rule wins)."""
    found: list[DateMatch] = []
    for rule, pattern in _PATTERNS:
        if rule in _NEEDS_TIME and not _TIME.search(text):
            continue
        for match in pattern.finditer(text):
            if any(match.start() < other.end and other.start < match.end() for other in found):
                continue
            date = _read(rule, match, locale)
            if date is not None:
                found.append(date)
    return sorted(found, key=lambda date: date.start)


def parse_date(text: str, locale: str) -> DateMatch | None:
    """The first date in `text`, or None."""
    dates = find_dates(text, locale)
    return dates[0] if dates else None
