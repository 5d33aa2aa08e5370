"""What a locale tag decides for repair: day-first dates and the decimal separator."""

from __future__ import annotations

# Languages that write 1.234,56. The tag's language part decides; a region can only override it
# where the region writes numbers differently from the language's usual (Swiss German: 1'234.56).
_DECIMAL_COMMA_LANGUAGES = frozenset(
    {"de", "fr", "es", "it", "nl", "pt", "ru", "pl", "tr", "id", "vi", "da", "sv", "nb", "nn", "no",
     "fi", "cs", "sk", "sl", "hr", "sr", "ro", "hu", "bg", "uk", "el", "lt", "lv", "et"}
)  # fmt: skip
_DECIMAL_POINT_REGIONS = frozenset({"CH", "LI", "MX"})
# Regions that write the month first: 03/05/2024 is 5 March there, 3 May nearly everywhere else.
_MONTH_FIRST_REGIONS = frozenset({"US", "PH", "FM", "MH", "PW"})


def _parts(locale: str) -> tuple[str, str]:
    language, _, region = locale.replace("_", "-").partition("-")
    return language.lower(), region.upper()


def decimal_comma(locale: str) -> bool:
    """Whether the locale writes the decimal separator as a comma."""
    language, region = _parts(locale)
    return language in _DECIMAL_COMMA_LANGUAGES and region not in _DECIMAL_POINT_REGIONS


def month_first(locale: str) -> bool:
    """Whether numeric dates put the month before the day (en-US)."""
    return _parts(locale)[1] in _MONTH_FIRST_REGIONS
