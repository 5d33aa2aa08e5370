"""The receipt/invoice profile: company, date, address, total, tax and invoice number from text and rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from appliance.document import Document, Line
from appliance.fields.model import FieldValue, Span
from appliance.repair.amounts import parse_amount
from appliance.repair.chinese_numerals import has_financial_numerals, parse_financial
from appliance.repair.dates import DateMatch, find_dates
from appliance.repair.ids import find_ids
from appliance.repair.ruleset import Check
from appliance.repair.totals import check_items, check_tax


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


_COMPANY_SUFFIX = re.compile(
    r"\b(SDN\.?\s*BHD|BHD|S/B|SDN|ENTERPRISES?|TRADING|RESTORAN|RESTAURANT|HARDWARE|STATIONERY|MART|"
    r"BAKER(Y|IES)|CO\.|COMPANY|LTD|LIMITED|INC|PLC|GROUP|GROCER|SUPERMARKET|PHARMACY|CAFE|KEDAI|"
    r"PERNIAGAAN|SYARIKAT|MARKETING|STATION)\b|有限公司|公司|商店|超市|酒店",
    re.IGNORECASE,
)
_NOT_COMPANY = re.compile(
    r"^(TAX\s*INVOICE|INVOICE|RECEIPT|OFFICIAL RECEIPT|CASH\s*(BILL|SALES?)|SIMPLIFIED|WELCOME|"
    r"发票|收据)\b",
    re.IGNORECASE,
)
_REGISTRATION = re.compile(
    r"\(?\b(?:CO\.?\s*(?:REG\.?\s*)?NO\.?|COMPANY NO\.?|ROC)?[:\s]*\d{4,}[-\s]?[A-Z]\b\)?|\(\s*\d{4,}[^)]*\)"
)
_ADDRESS_STOP = re.compile(
    # A leading boundary only: the recogniser often drops spaces ("DocumentNo:", "TAXINVOICE").
    r"\b(TEL|FAX|PHONE|H/?P|GST|SST|REG|EMAIL|E-MAIL|WWW|HTTP|DATE|INVOICE|RECEIPT|CASHIER|TABLE|BILL|"
    r"ORDER|TAX|DOC(UMENT)?|TIME|COUNTER|MEMBER|SALES?|SERVER|TERMINAL|NO\s*:\s*\d|OPEN|CO\.?\s*NO|"
    r"COMPANY\s*NO)|电话|日期|发票",
    re.IGNORECASE,
)
_POSTCODE = re.compile(r"\b\d{5}\b")
_AMOUNT = re.compile(
    r"(?:(?:RM|MYR|\$|¥|￥|€|£)\s?)?-?\d{1,3}(?:,\d{3})*\.\d{2}(?!\d)|(?:RM|\$)?-?\d+\.\d{2}(?!\d)"
)
_TOTAL_STRONG = re.compile(
    r"ROUND(ED|ING)?\s*D?\s*TOTAL|TOTAL\s*ROUNDED|NETT?\s*TOTAL|GRAND\s*TOTAL|TOTAL\s*AMOUNT|AMOUNT\s*DUE|"
    r"TOTAL\s*\((RM|MYR)\)|TOTAL\s*(INCL|INCLUSIVE)|TOTAL\s*PAYABLE|TOTAL\s*SALES|合计|总计|价税合计|应收|实收",
    re.IGNORECASE,
)
_TOTAL_WEAK = re.compile(r"\bTOTAL\b|\bJUMLAH\b|\bAMOUNT\b", re.IGNORECASE)
_NOT_TOTAL = re.compile(
    r"SUB\s*-?\s*TOTAL|TOTAL\s*(QTY|QUANTITY|ITEMS?|GST|TAX|SST|EXCL|DISCOUNT|SAVINGS?|NO)|ROUNDING|"
    r"\bQTY\b|TOTAL\s*\d+\s*ITEM|小计",
    re.IGNORECASE,
)
_SUBTOTAL = re.compile(r"SUB\s*-?\s*TOTAL|TOTAL\s*(EXCL|BEFORE)|小计", re.IGNORECASE)
_TAX = re.compile(r"\b(GST|SST|TAX|VAT)\b|税额", re.IGNORECASE)
_NOT_TAX = re.compile(r"\b(ID|REG|NO|INVOICE|SUMMARY|INCL|INCLUSIVE|EXCL|CODE)\b|税号", re.IGNORECASE)
_ROUNDING = re.compile(r"ROUNDING|ROUND\s*ADJ|ADJUSTMENT", re.IGNORECASE)
_NOT_ITEM = re.compile(r"CASH|CHANGE|TENDER|PAID|BALANCE|VISA|MASTER|CARD|DISC", re.IGNORECASE)
_INVOICE_NO = re.compile(
    r"(?:INVOICE|INV|RECEIPT|BILL|DOC(?:UMENT)?|TRANS(?:ACTION)?|RCPT|SLIP|CHECK|CHK)\s*"
    r"(?:NO|NUMBER|#)\.?\s*[:：#]?\s*(?P<value>[A-Z0-9][A-Z0-9\-/]{2,})|发票号码[:：\s]*(?P<cn>\d{8,20})",
    re.IGNORECASE,
)


def _field(spans: list[Span], raw: str, value: str | None, rules: list[str] | None = None) -> FieldValue:
    return FieldValue(raw=raw, value=value, confidence=0.0, spans=spans, rules=list(rules or []))


def _company(rows: list[Row]) -> tuple[FieldValue | None, int]:
    """The shop's name: the first row near the top with a company suffix, else the first name-like row."""
    head = [(index, row) for index, row in enumerate(rows[:15]) if row.page == 0]
    chosen: list[int] = []
    for index, row in head:
        if _COMPANY_SUFFIX.search(row.text) and not _NOT_COMPANY.search(row.text):
            chosen = [index]
            # "MR. D.I.Y. (M)" / "SDN BHD" printed on two rows: the suffix row continues the name above.
            if index > 0 and re.fullmatch(r"\W*(SDN\.?\s*BHD\.?|BHD\.?|S/B)\W*", row.text, re.IGNORECASE):
                chosen = [index - 1, index]
            break
    if not chosen:
        for index, row in head:
            letters = sum(char.isalpha() for char in row.text)
            if letters >= 3 and not _NOT_COMPANY.search(row.text) and not find_dates(row.text, "en"):
                chosen = [index]
                break
    if not chosen:
        return None, -1
    spans = [span for index in chosen for span in rows[index].spans()]
    raw = " ".join(rows[index].text for index in chosen)
    value = _REGISTRATION.sub("", raw).strip(" ,.-")
    value = re.sub(r"\s+", " ", value)
    return _field(spans, raw, value), chosen[-1]


def _address(rows: list[Row], after: int) -> FieldValue | None:
    """Rows after the company up to the first phone, tax-id or date row."""
    picked: list[Row] = []
    for row in rows[after + 1 : after + 8]:
        text = row.text.strip()
        if _ADDRESS_STOP.search(text) or find_dates(text, "en"):
            if picked:
                break
            continue  # a registration row between the name and the address
        if _REGISTRATION.fullmatch(text) or (re.fullmatch(r"[\W\d]*-?[A-Z]?\W*", text) and len(text) < 14):
            continue
        if picked and _POSTCODE.search(picked[-1].text) and not re.fullmatch(r"[A-Z .,]{3,30}", text):
            break  # after the postcode row only a state or country name belongs to the address
        picked.append(row)
        if len(picked) >= 5:
            break
    if not picked:
        return None
    raw = " ".join(row.text for row in picked)
    return _field([span for row in picked for span in row.spans()], raw, re.sub(r"\s+", " ", raw).strip())


def _date(rows: list[Row], locale: str) -> FieldValue | None:
    best: tuple[int, Row, DateMatch] | None = None
    for row in rows:
        for date in find_dates(row.text, locale):
            labelled = 1 if re.search(r"DATE|TARIKH|日期", row.text, re.IGNORECASE) else 0
            if best is None or labelled > best[0]:
                best = (labelled, row, date)
    if best is None:
        return None
    _, row, found = best
    field = _field(row.span_of(found.start, found.end), found.raw, found.iso, list(found.rules))
    if found.ambiguous:
        field.reasons.append("date.ambiguous: day and month order decided by the locale")
    return field


@dataclass(frozen=True)
class _Amount:
    row: Row
    start: int
    end: int
    raw: str
    value: Decimal
    rules: tuple[str, ...]


def _amounts(row: Row, locale: str) -> list[_Amount]:
    found: list[_Amount] = []
    for match in _AMOUNT.finditer(row.text):
        amount = parse_amount(match.group(0), locale, fix_confusions=False)
        if amount is not None:
            found.append(_Amount(row, match.start(), match.end(), match.group(0), amount.value, amount.rules))
    return found


def _labelled_amount(rows: list[Row], index: int, locale: str) -> _Amount | None:
    """The last amount on a labelled row, or the first on the next row when the label stands alone."""
    amounts = _amounts(rows[index], locale)
    if amounts:
        return amounts[-1]
    if index + 1 < len(rows):
        following = _amounts(rows[index + 1], locale)
        if following and not re.search(r"[A-Za-z]{3}", rows[index + 1].text):
            return following[0]
    return None


def _amount_field(amount: _Amount) -> FieldValue:
    return _field(
        amount.row.span_of(amount.start, amount.end), amount.raw, f"{amount.value:f}", list(amount.rules)
    )


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

    totals: list[tuple[int, _Amount]] = []
    subtotal: _Amount | None = None
    tax: _Amount | None = None
    rounding: _Amount | None = None
    first_total_row = len(rows)
    for index, row in enumerate(rows):
        text = row.text
        if _SUBTOTAL.search(text):
            subtotal = _labelled_amount(rows, index, locale) or subtotal
            first_total_row = min(first_total_row, index)
        elif _ROUNDING.search(text):
            rounding = _labelled_amount(rows, index, locale) or rounding
        elif not _NOT_TOTAL.search(text) and (_TOTAL_STRONG.search(text) or _TOTAL_WEAK.search(text)):
            amount = _labelled_amount(rows, index, locale)
            if amount is not None:
                totals.append((2 if _TOTAL_STRONG.search(text) else 1, amount))
                first_total_row = min(first_total_row, index)
        elif _TAX.search(text) and not _NOT_TAX.search(text):
            tax = _labelled_amount(rows, index, locale) or tax
    total: _Amount | None = None
    if totals:
        top = max(priority for priority, _ in totals)
        total = max((amount for priority, amount in totals if priority == top), key=lambda a: a.value)
    else:
        # No total label read: the largest amount that is not cash tendered or change is the total.
        candidates = [a for row in rows if not _NOT_ITEM.search(row.text) for a in _amounts(row, locale)]
        if candidates:
            total = max(candidates, key=lambda a: a.value)
    if total is not None:
        field = _amount_field(total)
        items = [
            amounts[-1].value
            for row in rows[:first_total_row]
            if not _NOT_ITEM.search(row.text) and (amounts := _amounts(row, locale))
        ]
        checks = [
            check_tax(
                subtotal.value if subtotal else None,
                tax.value if tax else None,
                total.value,
                rounding.value if rounding else None,
            ),
            check_items(items, subtotal.value if subtotal else None, total.value),
        ]
        field.checks.extend(check for check in checks if check is not None)
        financial = _financial_amount(rows)
        if financial is not None:
            field.checks.append(
                Check(
                    "amount.cn_financial.crosscheck",
                    financial == total.value,
                    f"{financial:f} in Chinese numerals vs {total.value:f}",
                )
            )
        fields["total"] = field
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
