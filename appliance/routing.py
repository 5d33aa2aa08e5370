"""Routing by confidence: each read document goes straight through, is sampled for audit, or goes to review.

Production OCR routes on more than one number: like ABBYY's verification rule, a page whose share
of low-confidence characters reaches a limit goes to a person even when its mean looks fine; a
field whose checksum or cross-check failed goes to a person whatever its confidence; so does text
read under a seal or stamp, and a document where nothing was read at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from appliance.config import RoutingConfig
from appliance.document import Document
from appliance.repair.step import NOTES

KEY_FIELDS = ("total", "date")  # fields a document is booked by: never missing or unsure when done


class Route(StrEnum):
    """Where a read document goes: its results' folder, that folder and the audit sample, or review."""

    DONE = "done"
    AUDIT = "audit"
    REVIEW = "review"


DONE, AUDIT, REVIEW = Route.DONE, Route.AUDIT, Route.REVIEW


@dataclass(frozen=True)
class Decision:
    """Where a document goes and why."""

    route: Route
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"route": self.route.value, "reasons": list(self.reasons)}


def sampled_for_audit(sha256: str, rate: float) -> bool:
    """Whether a document is in the audit sample, decided by its content hash.

    Repeatable (the same file always gets the same answer) and independent of arrival order.
    """
    if rate <= 0:
        return False
    return int(hashlib.sha256(("audit:" + sha256).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < rate


def decide(document: Document, config: RoutingConfig) -> Decision:
    """Route one document by its confidences, its fields' checks and what preprocessing found."""
    reasons: list[str] = []
    characters = [c for page in document.pages for line in page.lines for c in line.char_confidences]
    if not characters:
        if config.review_empty:
            reasons.append("no text was read")
    else:
        mean = sum(characters) / len(characters)
        if mean < config.min_confidence:
            reasons.append(f"mean character confidence {mean:.3f} is below {config.min_confidence:g}")
        low = sum(1 for c in characters if c < config.low_char_confidence) / len(characters)
        if low > config.max_low_char_share:
            reasons.append(
                f"{low:.1%} of characters are below confidence {config.low_char_confidence:g}"
                f" (limit {config.max_low_char_share:.0%})"
            )
    for page in document.pages:
        reasons.extend(f"page {page.index + 1}: {reason}" for reason in page.review_reasons)
    occluded = sum(1 for page in document.pages for line in page.lines if line.occluded)
    if occluded:
        reasons.append(f"{occluded} line(s) lie under a seal or stamp")
    for name, value in document.fields.items():
        if not value.review:
            continue
        missing = value.value is None and not value.raw
        unsure = all(reason.startswith(("confidence.low", *NOTES)) for reason in value.reasons)
        # A receipt is booked by its total and date: one that lacks them, or reads them unsurely,
        # cannot go through whatever the profile says about names and addresses.
        key = name in KEY_FIELDS
        wanted = (
            config.review_missing_fields or key
            if missing
            else config.review_unsure_fields or key
            if unsure
            else config.review_failed_checks
        )
        if wanted:
            detail = "; ".join(value.reasons) or "flagged"
            reasons.append(f"field {name}: {detail}")
    if reasons:
        return Decision(REVIEW, reasons)
    if sampled_for_audit(document.source.sha256, config.audit_rate):
        return Decision(AUDIT, [f"sampled for audit at rate {config.audit_rate:g}"])
    return Decision(DONE, [])
