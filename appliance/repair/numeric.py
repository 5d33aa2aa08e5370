"""OCR letter/digit confusions, repaired only inside values that must be numbers."""

from __future__ import annotations

# Glyph pairs the recogniser confuses on receipts and forms. Applied only to a value already typed
# numeric (an amount, an ID's digits, a date's digits), never to free text, where "SOLD" or "Bill"
# are words and must stay words.
CONFUSIONS = {"O": "0", "o": "0", "D": "0", "Q": "0", "l": "1", "I": "1", "|": "1", "i": "1",
              "S": "5", "s": "5", "B": "8", "Z": "2", "z": "2", "G": "6", "g": "9"}  # fmt: skip


def fix_digits(value: str, *, allowed: str = ".,-/ ") -> tuple[str, bool]:
    """Replace confusable letters by digits when the value is mostly digits already.

    A value needs at least as many real digits as confusable letters, and nothing outside digits,
    confusables and `allowed`: "1O.5O" becomes "10.50", while "TOTAL" or "SO" are left alone.
    """
    digits = sum(char.isdigit() for char in value)
    confusable = sum(char in CONFUSIONS for char in value)
    if confusable == 0 or digits == 0 or digits < confusable:
        return value, False
    if any(not (char.isdigit() or char in CONFUSIONS or char in allowed) for char in value):
        return value, False
    return "".join(CONFUSIONS.get(char, char) for char in value), True
