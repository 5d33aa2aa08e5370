"""A receipt's amounts by what their labels say: total, subtotal, tax, service, rounding, payment, items.

Labels are read as the recogniser gives them: "Tota1", "Tolal", "TOTALSALES", "Casn", and a
label printed on the row above its amount. An amount right after "1X" or before "*3" is a unit
price, not a line amount, so item sums do not count a line twice. Amounts under a GST/tax
summary or analysis heading repeat the sums above and never stand for the total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from appliance.repair.amounts import parse_amount

if TYPE_CHECKING:
    from appliance.fields.receipt import Row

Kind = Literal["total", "subtotal", "tax", "service", "rounding", "change", "payment", "other"]

AMOUNT = re.compile(
    r"(?:(?:RM|MYR|\$|¥|￥|€|£)\s?)?-?\s?\d{1,3}(?:,\d{3})+\.\d{2}(?!\d)|(?:RM|\$)?-?\s?\d+\.\d{2}(?!\d)"
)
# "TOTAL" as recognisers misread it: Tota1, Totai, Tolal, Tofal, T0TAL, and glued to its neighbours.
_TOTAL = r"T[O0][TLF][A4][L1I|]?"
_SUBTOTAL = re.compile(rf"SUB\s*-?\s*{_TOTAL}|{_TOTAL}\s*\(?EXCL|BEFORE|小计", re.IGNORECASE)
_ROUNDING = re.compile(r"ROUND|\bADJ", re.IGNORECASE)
_SERVICE = re.compile(r"SERVICE|\bSVC|\bSERV\b|S/C\b|服务费", re.IGNORECASE)
_CHANGE = re.compile(r"CHA[NM]GE|CHANGL|\bBAKI\b|KEMBALI|找零", re.IGNORECASE)
_PAYMENT = re.compile(
    r"CAS[HN]|TUNAI|PAYMENT|TENDER|\bPAID|VISA|MASTER|\bCARD|CREDIT|DEBIT|\bEDC|\bNETS\b|AMEX|现金",
    re.IGNORECASE,
)
_TOTAL_INCLUSIVE = re.compile(rf"{_TOTAL}.*(INCL|\bINC\b|INCLUSIVE|WITH)", re.IGNORECASE)
_TOTAL_TAX = re.compile(rf"{_TOTAL}\s*(GST|SST|TAX|VAT)", re.IGNORECASE)
_NOT_TOTAL = re.compile(
    r"QTY|QUANTITY|ITEM|SAVING|DISC|NO\.?\s*OF|POINT|WEIGHT|\bPCS\b|SUPPLIES|EXCL", re.IGNORECASE
)
_TOTAL_STRONG = re.compile(
    r"NETT?\b|NETT?\s*T|GRAND|ROUND|PAYABLE|DUE|AMOUNT|AMT|SALES|INCL|INCLUSIVE|WITH|\(RM\)|合计|总计|价税合计|应收|实收",
    re.IGNORECASE,
)
_TOTAL_OTHER = re.compile(r"\bJUMLAH\b|AMOUNT\s*(DUE|PAYABLE)|合计|总计|应收|实收", re.IGNORECASE)
_TAX = re.compile(r"(GST|SST|TAX|VAT)|税额", re.IGNORECASE)
_NOT_TAX = re.compile(
    r"\b(ID|REG|NO|INVOICE|SUMMARY|INCL|INCLUSIVE|EXCL|CODE)\b|税号|INVO?ICE|REG\s*NO|TAXABLE", re.IGNORECASE
)
_SUMMARY = re.compile(r"SUMMARY|SUMMAR|SUIMMAY|ANALYSIS|GST\s*CODE|TAX\s*CODE", re.IGNORECASE)
_UNIT_BEFORE = re.compile(r"(\d\s*[xX@*]|@|\bX)\s*$")
_UNIT_AFTER = re.compile(r"^\s*[xX*]\s*\d")
_LETTERS = re.compile(r"[A-Za-z\u4e00-\u9fff]{2}")
# A count of items or quantities ("Total Qty: 7", "No. Items: 3") closes the item lines too.
_ENDS_ITEMS = re.compile(rf"{_TOTAL}|Q[T]YS?\b|GTYS?\b|ITEMS?\s*:|ITEM\s*COUNT|ITEN", re.IGNORECASE)
TABLE_COLUMNS = 4  # amounts on one item row that make it a table: a till prints at most 3
_NOT_ITEM = re.compile(r"CASH|CHANGE|TENDER|PAID|BALANCE|VISA|MASTER|CARD|DISC|DEPOSIT", re.IGNORECASE)


@dataclass(frozen=True)
class Amount:
    """One amount on a row: where it stands, as printed, its value and the rules that read it."""

    row: Row
    index: int  # the row's place in the document
    start: int
    end: int
    raw: str
    value: Decimal
    rules: tuple[str, ...]
    label: str = ""
    kind: Kind = "other"
    strong: bool = False  # a total label that names the payable total (NETT, GRAND, ROUNDED, ...)
    unit_price: bool = False
    summary: bool = False  # under a tax summary heading: a repeat of the sums above


def amounts_of(row: Row, index: int, locale: str) -> list[Amount]:
    """Every amount with two decimals on the row, in order (labels not yet read)."""
    found: list[Amount] = []
    for match in AMOUNT.finditer(row.text):
        amount = parse_amount(match.group(0).replace(" ", ""), locale, fix_confusions=False)
        if amount is not None:
            found.append(
                Amount(row, index, match.start(), match.end(), match.group(0), amount.value, amount.rules)
            )
    return found


def _kind(label: str) -> tuple[Kind, bool]:
    if _SUBTOTAL.search(label):
        return "subtotal", False
    if _ROUNDING.search(label) and not re.search(rf"{_TOTAL}", label, re.IGNORECASE):
        return "rounding", False
    if _CHANGE.search(label):
        return "change", False
    if _TOTAL_INCLUSIVE.search(label):
        return "total", True
    if _TOTAL_TAX.search(label):
        return "tax", False
    if re.search(_TOTAL, label, re.IGNORECASE) or _TOTAL_OTHER.search(label):
        if _NOT_TOTAL.search(label):
            return "other", False
        if _PAYMENT.search(label) and not re.search(_TOTAL, label, re.IGNORECASE):
            return "payment", False
        return "total", bool(_TOTAL_STRONG.search(label))
    if _SERVICE.search(label):
        return "service", False
    if _PAYMENT.search(label):
        return "payment", False
    if _TAX.search(label) and not _NOT_TAX.search(label):
        return "tax", False
    return "other", False


def labelled_amounts(rows: list[Row], locale: str) -> list[Amount]:
    """Every amount of the document with the label printed before it (on its row or the row above)."""
    result: list[Amount] = []
    summary = False
    previous: list[Amount] = []
    for index, row in enumerate(rows):
        amounts = amounts_of(row, index, locale)
        if _SUMMARY.search(row.text) and result:
            summary = True
        end = 0
        for position, amount in enumerate(amounts):
            label = row.text[end : amount.start]
            if position == 0 and not _LETTERS.search(label) and index > 0 and not previous:
                label = f"{rows[index - 1].text} {label}"  # the label stands alone on the row above
            unit = bool(
                _UNIT_BEFORE.search(row.text[: amount.start]) or _UNIT_AFTER.match(row.text[amount.end :])
            )
            kind, strong = _kind(label)
            result.append(
                Amount(
                    amount.row,
                    index,
                    amount.start,
                    amount.end,
                    amount.raw,
                    amount.value,
                    amount.rules,
                    label.strip(),
                    kind,
                    strong,
                    unit,
                    summary,
                )
            )
            end = amount.end
        previous = amounts
    return result


def item_amounts(amounts: list[Amount]) -> list[Decimal]:
    """The line amounts above the first labelled sum: one a row, unit prices left out."""
    items: list[Decimal] = []
    first_sum = min(
        (a.index for a in amounts if a.kind != "other" or _ENDS_ITEMS.search(a.label)), default=None
    )
    by_row: dict[int, list[Amount]] = {}
    for amount in amounts:
        if first_sum is not None and amount.index >= first_sum:
            break
        if amount.unit_price or _NOT_ITEM.search(amount.row.text):
            continue
        by_row.setdefault(amount.index, []).append(amount)
    if any(len(row_amounts) >= TABLE_COLUMNS for row_amounts in by_row.values()):
        # An invoice table (price, discount, tax, amount columns, returns): which column is the
        # line amount cannot be told from the text, so the items are not summed at all.
        return []
    for row_amounts in by_row.values():
        items.append(row_amounts[-1].value)
    return items


def first_of(amounts: list[Amount], kind: Kind) -> Amount | None:
    """The first amount of a kind outside the tax summary, or None."""
    return next((a for a in amounts if a.kind == kind and not a.summary), None)
