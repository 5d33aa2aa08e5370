"""Identifiers with check digits, checked with python-stdnum (its validators follow the standards)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stdnum import ean, iban, isbn, luhn
from stdnum.cn import ric, uscc

from appliance.repair.numeric import fix_digits


def _isbn10(number: str) -> bool:
    return isbn.is_valid(number) and len(isbn.compact(number)) == 10


def _isbn13(number: str) -> bool:
    return isbn.is_valid(number) and len(isbn.compact(number)) == 13


def _ean13(number: str) -> bool:
    return len(number) == 13 and ean.is_valid(number)


def _luhn(number: str) -> bool:
    return number.isdigit() and luhn.is_valid(number)


# kind → (rule id, validator). stdnum's is_valid checks the format and the check digit together.
VALIDATORS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "iban": ("id.iban.mod97", iban.is_valid),
    "isbn10": ("id.isbn10", _isbn10),
    "isbn13": ("id.isbn13", _isbn13),
    "ean13": ("id.ean13", _ean13),
    "card": ("id.luhn", _luhn),
    "cn_ric": ("id.cn_ric.gb11643", ric.is_valid),
    "cn_uscc": ("id.cn_uscc.gb32100", uscc.is_valid),
}

# Where a kind is recognised in text. Labelled kinds need their label, because a bare 10-19 digit
# number is as likely a phone or document number, and a failing "checksum" there would be noise.
_FINDERS: list[tuple[str, re.Pattern[str]]] = [
    # An IBAN is taken after its label, or when printed in the standard groups of four.
    ("iban", re.compile(r"IBAN[:：\s]*([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)\b")),
    ("iban", re.compile(r"\b([A-Z]{2}\d{2}(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?)\b")),
    ("isbn", re.compile(r"ISBN(?:-1[03])?[:：\s]*([\dX][\d\- X]{8,16}[\dX])", re.IGNORECASE)),
    ("cn_uscc", re.compile(r"(?:统一社会信用代码|信用代码|纳税人识别号|税号)[:：\s]*([0-9A-Z]{18})")),
    ("cn_ric", re.compile(r"(?:身份证(?:号码?)?|公民身份号码)[:：\s]*(\d{17}[\dXx])")),
    ("card", re.compile(r"(?:card|卡号)[^\d]{0,12}((?:\d[ -]?){12,18}\d)", re.IGNORECASE)),
    ("ean13", re.compile(r"(?:EAN(?:-13)?|barcode|条码|条形码)[:：#\s]*(\d{13})(?!\d)", re.IGNORECASE)),
]


@dataclass(frozen=True)
class IdMatch:
    """An identifier found in text and whether its check digits hold."""

    kind: str
    raw: str
    value: str  # compact form: no spaces or dashes, digit confusions repaired
    rule_id: str
    passed: bool
    start: int
    end: int
    rules: tuple[str, ...]


def check_id(kind: str, raw: str) -> IdMatch:
    """Check one identifier of a kind named in VALIDATORS ("iban", "ean13", "cn_ric", ...)."""
    compact = re.sub(r"[\s-]", "", raw).upper()
    rules: list[str] = []
    if kind in {"ean13", "card", "isbn10", "isbn13"}:
        # Only the digit part: a trailing ISBN-10 'X' is a check character, not a confusion.
        head, tail = (compact[:-1], compact[-1]) if kind == "isbn10" else (compact, "")
        fixed, changed = fix_digits(head, allowed="")
        if changed:
            rules.append("numeric.confusion")
            compact = fixed + tail
    rule_id, validator = VALIDATORS[kind]
    return IdMatch(kind, raw, compact, rule_id, bool(validator(compact)), 0, len(raw), tuple(rules))


def find_ids(text: str) -> list[IdMatch]:
    """Identifiers in a line of text, each with its checksum outcome."""
    found: list[IdMatch] = []
    for kind, pattern in _FINDERS:
        for match in pattern.finditer(text):
            if any(match.start(1) < other.end and other.start < match.end(1) for other in found):
                continue
            raw = match.group(1)
            digits = re.sub(r"[\s-]", "", raw)
            actual = kind
            if kind == "isbn":
                actual = "isbn13" if len(digits) == 13 else "isbn10"
            if kind == "iban" and not any(char.isdigit() for char in digits[4:]):
                continue
            result = check_id(actual, raw)
            start, end = match.span(1)
            found.append(
                IdMatch(actual, raw, result.value, result.rule_id, result.passed, start, end, result.rules)
            )
    return sorted(found, key=lambda item: item.start)
