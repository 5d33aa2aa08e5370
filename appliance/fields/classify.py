"""Is this page a receipt? A content score from what receipts print, before any receipt field is read.

A receipt (shop, restaurant, petrol station, a Chinese 发票) prints short lines, amounts at line
ends, a handful of money words (TOTAL, CASH, CHANGE, GST/SST/TAX, 合计, 税额) and a date. A manual
page, a letter or a contract has long lines of prose and, at most, a few numbers that look like
amounts (section numbers "1.11", page counters). Each signal adds a share of the score; the money
words weigh most, because amounts and short lines alone also describe a table of contents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.document import Document
from appliance.repair.dates import find_dates

# Each group counts once however often it is printed: a page that says TOTAL ten times is no more
# of a receipt than one that says it once, but TOTAL, CASH and GST together are.
KEYWORD_GROUPS: dict[str, re.Pattern[str]] = {
    "total": re.compile(r"TOTAL|JUMLAH|AMOUNT\s*DUE|NETT|合计|总计|金额", re.IGNORECASE),
    "payment": re.compile(
        r"CASH|TUNAI|CHANGE|BAKI|TENDER|PAID|VISA|MASTER\s*CARD|CREDIT\s*CARD|找零|现金", re.IGNORECASE
    ),
    "tax": re.compile(r"\b(GST|SST|VAT)|TAX|SERVICE\s*(CHARGE|CHG)|ROUNDING|税额|税率", re.IGNORECASE),
    "items": re.compile(
        r"\bQTY\b|QUANTITY|SUB\s*-?\s*TOTAL|\bITEMS?\b|\bPRICE\b|\bDISC|单价|数量", re.IGNORECASE
    ),
    "document": re.compile(
        r"RECEIPT|INVOICE|\bBILL\b|CASHIER|\bPOS\b|TABLE|THANK\s*YOU|发票|收据|小票", re.IGNORECASE
    ),
    "currency": re.compile(r"\bRM\s?\d|\bMYR\b|\bSGD\b|S\$|\$\s?\d|¥|￥|€|£", re.IGNORECASE),
}
_AMOUNT_AT_END = re.compile(r"\d[.,]\d{2}\s*(?:RM|MYR|SR|ZR|[A-Z]{0,2}|[*#])?\s*$", re.IGNORECASE)
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class ReceiptScore:
    """A score from 0 to 1 and the signals it came from (for the result and for people)."""

    score: float
    signals: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        parts = ", ".join(f"{name} {value:.2f}" for name, value in self.signals.items())
        return f"receipt score {self.score:.2f} ({parts})"


def receipt_score(document: Document) -> ReceiptScore:
    """How much the document's text looks like a receipt: 0 (prose) to 1 (a till slip)."""
    lines = [line.text.strip() for page in document.pages for line in page.lines if line.text.strip()]
    if not lines:
        return ReceiptScore(0.0, {})
    text = "\n".join(lines)
    groups = sum(1 for pattern in KEYWORD_GROUPS.values() if pattern.search(text))
    # Rows, not lines: an amount is often a line of its own beside its label.
    rows = [" ".join(line.text for line in block.lines) for page in document.pages for block in page.blocks]
    amounts = sum(1 for row in rows if _AMOUNT_AT_END.search(row)) / max(len(rows), 1)
    widths = sorted(len(_CJK.sub("XX", line)) for line in lines)  # a CJK character is two columns
    median = widths[len(widths) // 2]
    signals = {
        "keywords": min(groups / 3, 1.0),
        "amounts": min(amounts / 0.15, 1.0),
        "short_lines": 1.0 if median <= 40 else max(0.0, 1 - (median - 40) / 40),
        "date": 1.0 if any(find_dates(line, "en") for line in lines) else 0.0,
    }
    weights = {"keywords": 0.5, "amounts": 0.25, "short_lines": 0.1, "date": 0.15}
    score = sum(weights[name] * value for name, value in signals.items())
    if not groups:
        score /= 2  # without a single money word, amounts and short lines are a table or an index
    return ReceiptScore(round(score, 4), signals)
