"""Chinese financial numerals (壹贰叁...元角分整) to decimals and back.

Written by hand: the writing rules (GB/T and the accounting regulation 会计基础工作规范 §52) are a
closed, fifty-line system, and the PyPI converters we looked at either write this form but do not
read 角/分/整 back or pull in dependencies for it; one table used both ways keeps the round trip exact.
"""

from __future__ import annotations

from decimal import Decimal

DIGITS = "零壹贰叁肆伍陆柒捌玖"
# Everyday digits and variants appear next to financial ones on real invoices (两, 〇, 圆, 正).
_DIGIT_VALUES = (
    {char: index for index, char in enumerate(DIGITS)}
    | {char: index for index, char in enumerate("〇一二三四五六七八九")}
    | {"两": 2, "贰": 2, "貳": 2, "參": 3, "陸": 6}
)
_SMALL_UNITS = {"拾": 10, "十": 10, "佰": 100, "百": 100, "仟": 1000, "千": 1000}
_YUAN = "元圆"
_END = "整正"
FINANCIAL_CHARS = frozenset(DIGITS + "拾佰仟万亿元圆角分整正")


def has_financial_numerals(text: str) -> bool:
    """Whether the text carries at least one financial digit (壹..玖) or unit, so it is worth parsing."""
    return any(char in "壹贰叁肆伍陆柒捌玖拾佰仟" for char in text)


def _parse_integer(text: str) -> int | None:
    yi_part = wan_part = section = number = 0
    for char in text:
        if char in _DIGIT_VALUES:
            number = _DIGIT_VALUES[char]
        elif char in _SMALL_UNITS:
            # 拾 alone at the start means 10 (拾元 = 10 元); other units need a digit before them.
            section += (number or (1 if _SMALL_UNITS[char] == 10 else 0)) * _SMALL_UNITS[char]
            number = 0
        elif char in "万萬":
            wan_part = (wan_part + section + number) * 10_000
            section = number = 0
        elif char in "亿億":
            yi_part = (yi_part + wan_part + section + number) * 100_000_000
            wan_part = section = number = 0
        else:
            return None
    return yi_part + wan_part + section + number


def parse_financial(text: str) -> Decimal | None:
    """Read "壹仟零伍元叁角整" as Decimal("1005.30"); None if the text is not such an amount."""
    body = text.strip().removeprefix("人民币").strip("￥¥：: ")
    for end in _END:
        body = body.removesuffix(end)
    if not body:
        return None
    yuan = next((char for char in _YUAN if char in body), None)
    if yuan is not None:
        integer_text, _, fraction_text = body.rpartition(yuan)
    elif "角" in body or "分" in body:
        integer_text, fraction_text = "", body
    else:
        integer_text, fraction_text = body, ""
    integer = _parse_integer(integer_text)
    if integer is None:
        return None
    jiao = fen = 0
    pending: int | None = None
    for char in fraction_text:
        if char in _DIGIT_VALUES:
            pending = _DIGIT_VALUES[char]
        elif char == "角" and pending is not None:
            jiao, pending = pending, None
        elif char == "分" and pending is not None:
            fen, pending = pending, None
        else:
            return None
    if pending:
        return None  # a digit with no unit after 元 is not a financial amount
    return Decimal(integer) + Decimal(jiao) / 10 + Decimal(fen) / 100


def _group(value: int) -> str:
    """Four digits (0 < value < 10000) with 零 for each run of inner zeros: 1005 → 壹仟零伍."""
    out: list[str] = []
    zero = False
    for unit, divisor in (("仟", 1000), ("佰", 100), ("拾", 10), ("", 1)):
        digit = value // divisor % 10
        if digit == 0:
            zero = bool(out)
            continue
        if zero:
            out.append("零")
            zero = False
        out.append(DIGITS[digit] + unit)
    return "".join(out)


def to_financial(value: Decimal) -> str:
    """Write a non-negative amount in financial numerals: Decimal("1005.30") → 壹仟零伍元叁角整."""
    if value < 0:
        raise ValueError("financial numerals are written for non-negative amounts")
    cents = int((value * 100).to_integral_value())
    integer, jiao, fen = cents // 100, cents // 10 % 10, cents % 10
    parts: list[str] = []
    groups: list[int] = []
    while integer:
        groups.append(integer % 10_000)
        integer //= 10_000
    group_units = ["", "万", "亿", "万亿"]
    for position in range(len(groups) - 1, -1, -1):
        group = groups[position]
        if group == 0:
            continue
        # A group below 1000 after a higher non-zero group reads with a leading 零 (壹万零伍).
        if parts and (group < 1000 or groups[position + 1] == 0):
            parts.append("零")
        parts.append(_group(group) + group_units[position])
    text = "".join(parts)
    if text:
        text += "元"
    if jiao == 0 and fen == 0:
        return (text or "零元") + "整"
    if jiao:
        text += DIGITS[jiao] + "角"
    elif text:
        text += "零"
    if fen:
        return text + DIGITS[fen] + "分"
    return text + "整"
