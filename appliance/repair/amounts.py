"""Money amounts: currency symbols, thousands separators and decimal comma or point by locale."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from appliance.repair.chinese_numerals import has_financial_numerals, parse_financial
from appliance.repair.locale import decimal_comma
from appliance.repair.numeric import fix_digits

_CURRENCY = re.compile(
    r"^(?P<pre>RM|MYR|USD|US\$|S\$|SGD|EUR|GBP|CNY|RMB|HK\$|[$¥￥€£])?\s*(?P<body>.*?)\s*"
    r"(?P<post>RM|MYR|USD|EUR|GBP|CNY|RMB|元|[$¥￥€£])?$",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^[+-]?\d[\d.,' \u00a0]*$")


@dataclass(frozen=True)
class Amount:
    """A parsed amount: its value, the digits-and-point text of it, the currency seen, the rules used."""

    value: Decimal
    text: str
    currency: str
    rules: tuple[str, ...]


def _decimal_separator(body: str, locale: str) -> str | None:
    """Which of ',' and '.' separates decimals in `body`, or None when it has no decimals."""
    commas, points = body.count(","), body.count(".")
    if commas and points:
        return "," if body.rfind(",") > body.rfind(".") else "."
    mark = "," if commas else "." if points else None
    if mark is None or body.count(mark) > 1:
        return None  # 1,234,567 or 1.234.567: only thousands
    decimals = len(body) - body.rfind(mark) - 1
    if decimals != 3:
        return mark  # 12,50 or 12.5: two or one digits after the mark are decimals anywhere
    # 1,000 / 1.000 is the ambiguous case: the locale's own decimal mark decides.
    return mark if (mark == ",") == decimal_comma(locale) else None


def parse_amount(raw: str, locale: str, *, fix_confusions: bool = True) -> Amount | None:
    """Read an amount as printed ("RM 1,007.50", "12,50 €", "壹佰元整"); None if it is not one."""
    text = raw.strip()
    if has_financial_numerals(text):
        value = parse_financial(text)
        if value is None:
            return None
        return Amount(value, _plain(value), "CNY", ("amount.cn_financial",))
    match = _CURRENCY.match(text)
    if match is None:  # pragma: no cover - the pattern matches any string
        return None
    rules: list[str] = []
    currency = (match.group("pre") or match.group("post") or "").upper()
    body = match.group("body")
    if currency:
        rules.append("amount.currency")
    if fix_confusions:
        body, fixed = fix_digits(body, allowed=".,' -+")
        if fixed:
            rules.append("numeric.confusion")
    if not _NUMBER.match(body):
        return None
    separator = _decimal_separator(body, locale)
    thousands = {",", ".", " ", "'", "\u00a0"} - {separator or ""}
    if any(mark in body for mark in thousands):
        rules.append("amount.thousands")
    digits = "".join(char for char in body if char not in thousands)
    if separator == ",":
        digits = digits.replace(",", ".")
        rules.append("amount.decimal_comma")
    elif separator == ".":
        rules.append("amount.decimal_point")
    try:
        value = Decimal(digits)
    except InvalidOperation:
        return None
    return Amount(value, digits.lstrip("+"), currency, tuple(rules))


def _plain(value: Decimal) -> str:
    return f"{value:f}"
