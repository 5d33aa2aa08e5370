"""The repair step run once per document: normalise line text, extract fields, score and flag them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.document import Document, Line
from appliance.fields.model import FieldValue
from appliance.repair.confidence import Aggregate, aggregate, with_checks
from appliance.repair.ruleset import Change, RepairLog
from appliance.repair.text import normalise

if TYPE_CHECKING:
    from appliance.config import RepairConfig

RECEIPT_FIELDS = ("company", "date", "address", "total")
# Checks that tie the value itself to other printed numbers; items summing to the subtotal do not.
CONFIRMING = ("total.cash_change", "total.tax", "amount.cn_financial.crosscheck", "date.repeated")
NOTES = ("date.ambiguous",)  # reasons that inform and do not by themselves ask for review


def normalise_line(line: Line, ref: str, log: RepairLog) -> None:
    """Rewrite a line's text in place, keeping its confidences and words aligned with the text."""
    result = normalise(line.text)
    if not result.rules or not result.text:
        return
    before = line.text
    line.char_confidences = [line.char_confidences[index] for index in result.kept]
    line.text = result.text
    for word in line.words:
        word.text = normalise(word.text).text or word.text
    log.changes.extend(Change(rule, before, result.text, ref) for rule in result.rules)


def score_field(field: FieldValue, threshold: float, method: Aggregate) -> None:
    """Confidence from the field's characters, raised by passing checks; review on failure or doubt."""
    confidences = [value for span in field.spans for value in span.confidences]
    field.confidence = with_checks(aggregate(confidences, method), [check.passed for check in field.checks])
    # Checks are independent witnesses of one value: items can be misread or discounted, a tax line
    # may be a summary's, but when cash minus change (or subtotal plus tax) lands on the value, the
    # value is right and a witness that disagrees is the one misread. They stay in `checks`.
    confirmed = any(check.passed and check.rule_id in CONFIRMING for check in field.checks)
    for check in field.checks:
        if not check.passed and not confirmed:
            field.review = True
            field.reasons.append(f"{check.rule_id} failed" + (f": {check.detail}" if check.detail else ""))
    # A value tied to other printed numbers is right whatever its characters' confidence said.
    if field.confidence < threshold and not confirmed:
        field.review = True
        field.reasons.append(f"confidence.low: {field.confidence:.3f} < {threshold}")
    # A note (a day/month order the locale decided) is kept for people but sends nothing to review.
    if any(not reason.startswith(NOTES) for reason in field.reasons):
        field.review = True


def repair_document(document: Document, config: RepairConfig) -> None:
    """Apply the rule set to a read document and attach its fields and the log of changes."""
    from appliance.fields.classify import receipt_score  # fields import the repair rules
    from appliance.fields.receipt import extract_receipt

    log = RepairLog()
    for p, page in enumerate(document.pages):
        for b, block in enumerate(page.blocks):
            for n, line in enumerate(block.lines):
                normalise_line(line, f"pages[{p}].blocks[{b}].lines[{n}]", log)
    fields: dict[str, FieldValue] = {}
    receipt = config.field_profile == "receipt"
    if receipt and config.receipt_min_score > 0:
        score = receipt_score(document)
        if score.score < config.receipt_min_score:
            # Not a receipt: a manual page's heading is no company and its "1.11" no total.
            receipt = False
            log.changes.append(Change("fields.not_receipt", "", score.describe(), "fields"))
    if receipt:
        fields = extract_receipt(document, config.locale)
        for name, field in fields.items():
            score_field(field, config.review_threshold, config.confidence_aggregate)
            if field.value is not None and field.value != field.raw:
                log.changes.append(Change("+".join(field.rules) or "field.normalise", field.raw,
                                          field.value, f"fields.{name}"))  # fmt: skip
        for name in RECEIPT_FIELDS:
            if name not in fields:
                fields[name] = FieldValue(raw="", value=None, confidence=0.0, review=True,
                                          reasons=["field.missing"])  # fmt: skip
    document.fields = fields
    document.repairs = log
