"""The rule set's version, every rule id with what it does, and the records rules leave behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Bump on any change of behaviour of any rule: results carry the version, so a site can tell which
# documents were repaired by which rules and re-run only those that an update affects.
RULESET_VERSION = "2026.12.2"

RULES: dict[str, str] = {
    "text.fullwidth": "full-width ASCII letters, digits and punctuation to half-width outside CJK runs",
    "text.whitespace": "ideographic and repeated spaces to one space, none at the ends",
    "numeric.confusion": "O/o/D→0, l/I/|→1, S/s→5, B→8, Z→2 inside values of fields typed numeric",
    "amount.currency": "currency symbol or code (RM, $, ¥, €, £, MYR, USD, CNY, RMB, 元) removed",
    "amount.thousands": "thousands separators removed",
    "amount.decimal_comma": "decimal comma read as a decimal point",
    "amount.decimal_point": "decimal point kept; the value normalised to digits and a point",
    "amount.cn_financial": "Chinese financial numerals (壹贰叁...元角分整) read as a number",
    "amount.cn_financial.crosscheck": "a document's Chinese-numeral amount equals its digit amount",
    "date.cjk": "2024年3月5日 → 2024-03-05",
    "date.iso": "2024-03-05, 2024/03/05, 2024.03.05 → ISO 8601",
    "date.dmy": "05/03/2024 read day first (locale or unambiguous)",
    "date.mdy": "03/05/2024 read month first (locale or unambiguous)",
    "date.month_name": "5 Mar 2024, Mar 5, 2024 → ISO 8601",
    "date.two_digit_year": "a two-digit year read as 20YY (70-99: 19YY)",
    "date.lost_separator": "0502-18 read as 05-02-18 on a row with a time, in the locale's order only",
    "id.luhn": "Luhn check digit (payment cards)",
    "id.iban.mod97": "IBAN check digits, ISO 13616 mod 97",
    "id.isbn10": "ISBN-10 check digit (mod 11)",
    "id.isbn13": "ISBN-13 check digit (EAN mod 10)",
    "id.ean13": "EAN-13 check digit",
    "id.cn_ric.gb11643": "Chinese resident identity number, GB 11643 check character",
    "id.cn_uscc.gb32100": "Chinese unified social credit code, GB 32100 check character",
    "total.items_sum": "line item amounts add up to the subtotal or total",
    "total.tax": "subtotal + tax (+ rounding) equals the total",
    "json.repair": "model output that should be JSON repaired with json-repair",
    "json.schema": "repaired JSON validated against its JSON Schema",
    "confidence.low": "field confidence below the review threshold",
    "field.missing": "a field the profile expects was not found",
    "fields.not_receipt": "the text scores below repair.receipt_min_score as a receipt: no receipt fields",
    "date.repeated": "the same date read again from another row of the document",
    "total.cash_change": "cash tendered minus change equals the total",
    "total.rounded": "the payable total rounded to 5 sen is taken over the unrounded one",
}


@dataclass(frozen=True)
class Change:
    """One rule that changed something: where, and the text before and after."""

    rule_id: str
    before: str
    after: str
    ref: str  # "pages[0].blocks[3].lines[1]" or "fields.total"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "before": self.before, "after": self.after, "ref": self.ref}


@dataclass(frozen=True)
class Check:
    """The outcome of a checksum or cross-check."""

    rule_id: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "passed": self.passed, "detail": self.detail}


@dataclass
class RepairLog:
    """Every change the rule set made to one document, under the rule set's version."""

    ruleset_version: str = RULESET_VERSION
    changes: list[Change] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ruleset_version": self.ruleset_version,
            "changes": [change.to_dict() for change in self.changes],
        }
