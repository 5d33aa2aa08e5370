"""The receipt/invoice profile: company, date, address, total, tax and invoice number from text and rows."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from decimal import Decimal

from appliance.document import Document, Line
from appliance.fields.header import address_rows, address_value, company_rows, company_value
from appliance.fields.model import FieldValue, Span
from appliance.fields.money import Amount, first_of, item_amounts, labelled_amounts
from appliance.repair.chinese_numerals import has_financial_numerals, parse_financial
from appliance.repair.dates import DateMatch, find_dates
from appliance.repair.ids import find_ids
from appliance.repair.locale import month_first
from appliance.repair.ruleset import Check
from appliance.repair.totals import check_cash_change, check_items, check_tax


@dataclass(frozen=True)
class Row:
    """One visual row (a layout block): its lines in reading order and their joined text."""

    lines: list[tuple[str, Line]]  # (ref, line)
    page: int

    @property
    def text(self) -> str:
        return " ".join(line.text for _, line in self.lines)

    def spans(self) -> list[Span]:
        return [Span(line, ref, 0, len(line.text)) for ref, line in self.lines]

    def span_of(self, start: int, end: int) -> list[Span]:
        """The spans of the row's lines covering characters start..end of the row's text."""
        spans: list[Span] = []
        offset = 0
        for ref, line in self.lines:
            line_end = offset + len(line.text)
            if start < line_end and offset < end:
                spans.append(Span(line, ref, max(start - offset, 0), min(end - offset, len(line.text))))
            offset = line_end + 1
        return spans


def rows_of(document: Document) -> list[Row]:
    return [
        Row([(f"pages[{p}].blocks[{b}].lines[{n}]", line) for n, line in enumerate(block.lines)], p)
        for p, page in enumerate(document.pages)
        for b, block in enumerate(page.blocks)
    ]


_NOT_ITEM = re.compile(r"CASH|CHANGE|TENDER|PAID|BALANCE|VISA|MASTER|CARD|DISC", re.IGNORECASE)
_INVOICE_NO = re.compile(
    r"(?:INVOICE|INV|RECEIPT|BILL|DOC(?:UMENT)?|TRANS(?:ACTION)?|RCPT|SLIP|CHECK|CHK)\s*"
    r"(?:NO|NUMBER|#)\.?\s*[:：#]?\s*(?P<value>[A-Z0-9][A-Z0-9\-/]{2,})|发票号码[:：\s]*(?P<cn>\d{8,20})",
    re.IGNORECASE,
)


def _field(spans: list[Span], raw: str, value: str | None, rules: list[str] | None = None) -> FieldValue:
    return FieldValue(raw=raw, value=value, confidence=0.0, spans=spans, rules=list(rules or []))


def _company(rows: list[Row]) -> tuple[FieldValue | None, int]:
    """The shop's name and the index of its last row (-1 when none was found)."""
    chosen = company_rows(rows)
    if not chosen:
        return None, -1
    spans = [span for index in chosen for span in rows[index].spans()]
    raw = " ".join(rows[index].text for index in chosen)
    return _field(spans, raw, company_value(raw)), chosen[-1]


def _address(rows: list[Row], after: int) -> FieldValue | None:
    picked = address_rows(rows, after)
    if not picked:
        return None
    parts = [rows[index].text for index in picked]
    return _field(
        [span for index in picked for span in rows[index].spans()], " ".join(parts), address_value(parts)
    )


def _date(rows: list[Row], locale: str) -> FieldValue | None:
    """The receipt's date: a labelled one first, then one read in the locale's order with a full year.

    A date after next year is an item code or a misread (XE11-22-30), never a receipt's date.
    """
    best: tuple[tuple[int, int, int, int], Row, DateMatch] | None = None
    latest = dt.date.today().year + 1
    for position, row in enumerate(rows):
        for date in find_dates(row.text, locale):
            if not 1990 <= int(date.iso[:4]) <= latest:
                continue
            labelled = 1 if re.search(r"DATE|TARIKH|日期|\bDT\b|DD:", row.text, re.IGNORECASE) else 0
            in_order = 0 if date.rules[0] in {"date.mdy", "date.dmy"} and _against_locale(date, locale) else 1
            full_year = 0 if "date.two_digit_year" in date.rules else 1
            rank = (labelled, in_order, full_year, -position)
            if best is None or rank > best[0]:
                best = (rank, row, date)
    if best is None:
        return None
    _, row, found = best
    field = _field(row.span_of(found.start, found.end), found.raw, found.iso, list(found.rules))
    # Many receipts print the date twice (head and foot, or sale and print time): a second
    # reading of the same day from other pixels confirms the first.
    again = [
        other
        for other in rows
        if other is not row and any(d.iso == found.iso for d in find_dates(other.text, locale))
    ]
    if again:
        field.checks.append(Check("date.repeated", True, f"also in {len(again)} other row(s)"))
    else:
        field.checks.extend(_date_conflicts(rows, row, found, locale))
    if found.ambiguous:
        field.reasons.append("date.ambiguous: day and month order decided by the locale")
    return field


# Malaysia's goods and services tax ran from 1 April 2015 to 31 August 2018; its registration
# number has 12 digits ("GST ID: 000123456789"). A receipt printing one was issued after it began.
_MY_GST_ID = re.compile(r"\bGST\b[^\d]{0,20}(?<!\d)(00\d{10})(?!\d)", re.IGNORECASE)
_MY_GST_START = "2015-04-01"


def _date_conflicts(rows: list[Row], row: Row, found: DateMatch, locale: str) -> list[Check]:
    """Failed checks where other print on the receipt contradicts the date read (and none repeats it).

    A second date one glyph away from the first (2018 / 2013) is the same date printed twice and
    misread once: which reading is right is for a person. A Malaysian GST number on a receipt
    dated before the tax began means the date (or its year) was misread.
    """
    checks: list[Check] = []
    for other in rows:
        if other is row:
            continue
        for date in find_dates(other.text, locale):
            differ = sum(a != b for a, b in zip(date.iso, found.iso, strict=True))
            if differ == 1:
                checks.append(Check("date.conflict", False, f"{date.raw} elsewhere reads {date.iso}"))
                break
    malaysian = locale.upper().endswith("-MY")
    if malaysian and found.iso < _MY_GST_START and any(_MY_GST_ID.search(other.text) for other in rows):
        checks.append(Check("date.tax_era", False, f"{found.iso} is before GST began ({_MY_GST_START})"))
    return checks


def _against_locale(date: DateMatch, locale: str) -> bool:
    """Read month first in a day-first locale (or the reverse): only valid that way, so less likely."""
    return (date.rules[0] == "date.mdy") != month_first(locale)


def _amount_field(amount: Amount, rules: tuple[str, ...] = ()) -> FieldValue:
    return _field(
        amount.row.span_of(amount.start, amount.end), amount.raw.strip(), f"{amount.value:f}",
        [*amount.rules, *rules],
    )  # fmt: skip


def _total(rows: list[Row], labelled: list[Amount]) -> tuple[FieldValue | None, Amount | None]:
    """The payable total with its cross-checks, and the tax amount.

    Several amounts are labelled as totals on most receipts (before and after rounding, with and
    without tax, the tax summary's). What was paid decides first (cash minus change, or a card
    payment), then a rounding line (the total it rounds to), then the strongest label.
    """
    candidates = [a for a in labelled if a.kind == "total" and not a.summary]
    subtotal = first_of(labelled, "subtotal")
    tax = first_of(labelled, "tax")
    service = first_of(labelled, "service")
    rounding = first_of(labelled, "rounding")
    # What was paid is read below the sums (an item called "PUNCH CARD" is no card payment), and the
    # amount tendered is the payment line nearest above the change ("Cash 8.60 / Tendered 9.00").
    sums_from = min((a.index for a in labelled if a.kind in {"total", "subtotal"}), default=len(rows))
    change = next(
        (a for a in labelled if a.kind == "change" and not a.summary and a.index >= sums_from), None
    )
    payments = [a for a in labelled if a.kind == "payment" and not a.summary and a.index >= sums_from]
    if change is not None:
        payments = [a for a in payments if a.index <= change.index][-1:] or payments[:1]
    payment = payments[0] if payments else None
    if payment is not None and payment.value < 0:
        payment = replace(payment, value=-payment.value)  # "CASH -7,840.00": a sign printed on tenders
    paid = payment.value - change.value if payment and change and payment.value >= change.value else None
    if paid is None and payment is not None and change is None:
        paid = payment.value  # a card payment, or exact cash: only an equal total is supported by it
    rules: tuple[str, ...] = ()
    total: Amount | None = None
    if paid is not None:
        matching = [a for a in candidates if a.value == paid]
        if not matching and subtotal is not None and subtotal.value == paid:
            matching = [subtotal]  # the only sum printed before payment, "Total" misread or missing
        total = max(matching, key=lambda a: (a.strong, a.index)) if matching else None
    if total is None and rounding is not None and rounding.value:
        step = abs(rounding.value)
        rounded = [
            a
            for a in candidates
            if a.value % Decimal("0.05") == 0
            and any(abs(abs(a.value - b.value) - step) < Decimal("0.001") for b in candidates if b is not a)
        ]
        if rounded:
            total, rules = max(rounded, key=lambda a: a.index), ("total.rounded",)
    if total is None and candidates:
        top = max(a.strong for a in candidates)
        total = max((a for a in candidates if a.strong == top), key=lambda a: a.value)
    if total is None:
        # No total label read: the largest amount that is not cash tendered or change is the total.
        others = [
            a
            for a in labelled
            if a.kind in {"other", "subtotal"}
            and not (a.summary or a.unit_price or _NOT_ITEM.search(a.row.text))
        ]
        if not others:
            return None, tax
        total = max(others, key=lambda a: a.value)
    field = _amount_field(total, rules)
    value = total.value
    checks = [
        check_cash_change(
            payment.value if payment else None,
            change.value if change else None,
            value,
            rounding.value if rounding else None,
        ),
        check_tax(
            subtotal.value if subtotal and subtotal is not total else None,
            tax.value if tax else None,
            value,
            rounding.value if rounding else None,
            service.value if service else None,
        ),
        check_items(
            item_amounts(labelled),
            subtotal.value if subtotal and subtotal is not total else None,
            value,
            tax.value if tax else None,
        ),
    ]
    if payment is not None and change is None and payment.value == value:
        checks.append(Check("total.cash_change", True, f"paid {payment.value} without change"))
    field.checks.extend(check for check in checks if check is not None)
    financial = _financial_amount(rows)
    if financial is not None:
        field.checks.append(
            Check(
                "amount.cn_financial.crosscheck",
                financial == value,
                f"{financial:f} in Chinese numerals vs {value:f}",
            )
        )
    return field, tax


def extract_receipt(document: Document, locale: str) -> dict[str, FieldValue]:
    """Every receipt field that could be found; checks are attached, confidence is set by the caller."""
    rows = rows_of(document)
    fields: dict[str, FieldValue] = {}
    company, company_index = _company(rows)
    if company is not None:
        fields["company"] = company
        address = _address(rows, company_index)
        if address is not None:
            fields["address"] = address
    date = _date(rows, locale)
    if date is not None:
        fields["date"] = date

    labelled = labelled_amounts(rows, locale)
    total, tax = _total(rows, labelled)
    if total is not None:
        fields["total"] = total
    if tax is not None:
        fields["tax"] = _amount_field(tax)
    for row in rows:
        match = _INVOICE_NO.search(row.text)
        if match:
            group = "value" if match.group("value") else "cn"
            start, end = match.span(group)
            fields["invoice_number"] = _field(row.span_of(start, end), match.group(group), match.group(group))
            break
    counts: dict[str, int] = {}
    for row in rows:
        for found in find_ids(row.text):
            counts[found.kind] = counts.get(found.kind, 0) + 1
            name = f"id_{found.kind}" + (f"_{counts[found.kind]}" if counts[found.kind] > 1 else "")
            field = _field(row.span_of(found.start, found.end), found.raw, found.value, list(found.rules))
            field.checks.append(Check(found.rule_id, found.passed))
            fields[name] = field
    return fields


def _financial_amount(rows: list[Row]) -> Decimal | None:
    """The amount a document writes in Chinese financial numerals (价税合计（大写）...), if any."""
    for row in rows:
        for run in re.findall(r"[零壹贰叁肆伍陆柒捌玖拾佰仟万亿元圆角分整正]{2,}", row.text):
            if has_financial_numerals(run):
                value = parse_financial(run)
                if value is not None:
                    return value
    return None
