"""Routing decisions: done, audit sample or review, with the reasons people will read."""

from __future__ import annotations

from appliance.config import RoutingConfig
from appliance.document import Block, Document, Line, Page, SourceFile
from appliance.fields.model import FieldValue
from appliance.routing import AUDIT, DONE, REVIEW, decide, sampled_for_audit


def _document(confidences: list[float], occluded: bool = False, sha: str = "0" * 64) -> Document:
    line = Line(
        text="x" * len(confidences),
        box=(0, 0, 10, 10),
        polygon=(),
        confidence=1.0,
        char_confidences=confidences,
        occluded=occluded,
    )
    page = Page(index=0, width=100, height=100, dpi=300, blocks=[Block([line])] if confidences else [])
    source = SourceFile(name="a.png", path="/in/a.png", sha256=sha, size=1, media_type="image/png")
    return Document(source=source, engine={"name": "fake", "models": []}, pages=[page])


NO_AUDIT = RoutingConfig(audit_rate=0.0)


def test_confident_document_is_done() -> None:
    assert decide(_document([0.99] * 50), NO_AUDIT).route == DONE


def test_low_mean_goes_to_review_with_the_number() -> None:
    decision = decide(_document([0.7] * 50), NO_AUDIT)
    assert decision.route == REVIEW
    assert "mean character confidence 0.700 is below 0.85" in decision.reasons[0]


def test_share_of_low_characters_goes_to_review_even_with_a_good_mean() -> None:
    confidences = [0.99] * 90 + [0.3] * 10  # mean 0.921, but 10% of characters are unsure
    decision = decide(_document(confidences), NO_AUDIT)
    assert decision.route == REVIEW
    assert "10.0% of characters are below confidence 0.5" in decision.reasons[0]


def test_empty_document_and_text_under_a_seal() -> None:
    assert decide(_document([]), NO_AUDIT).reasons == ["no text was read"]
    assert decide(_document([]), RoutingConfig(review_empty=False, audit_rate=0.0)).route == DONE
    decision = decide(_document([0.99] * 20, occluded=True), NO_AUDIT)
    assert decision.route == REVIEW
    assert decision.reasons == ["1 line(s) lie under a seal or stamp"]


def test_flagged_field_forces_review_but_a_missing_one_only_when_asked() -> None:
    document = _document([0.99] * 20)
    document.fields["total"] = FieldValue(
        raw="40.17", value="40.17", confidence=0.99, review=True, reasons=["x"]
    )
    assert decide(document, NO_AUDIT).reasons == ["field total: x"]
    document.fields["total"] = FieldValue(raw="40.17", value="40.17", confidence=0.99)
    document.fields["company"] = FieldValue(
        raw="", value=None, confidence=0.0, review=True, reasons=["field.missing"]
    )
    assert decide(document, NO_AUDIT).route == DONE
    assert decide(document, RoutingConfig(review_missing_fields=True, audit_rate=0.0)).route == REVIEW


def test_missing_or_unsure_total_and_date_go_to_review_whatever_the_profile() -> None:
    document = _document([0.99] * 20)
    document.fields["date"] = FieldValue(
        raw="", value=None, confidence=0.0, review=True, reasons=["field.missing"]
    )
    assert decide(document, NO_AUDIT).reasons == ["field date: field.missing"]
    document.fields["date"] = FieldValue(
        raw="05/03/2024",
        value="2024-03-05",
        confidence=0.6,
        review=True,
        reasons=["date.ambiguous: day and month order decided by the locale", "confidence.low: 0.600 < 0.8"],
    )
    assert decide(document, NO_AUDIT).route == REVIEW
    document.fields["date"].reasons = ["date.ambiguous: day and month order decided by the locale"]
    document.fields["date"].review = False  # a note alone does not flag the field
    assert decide(document, NO_AUDIT).route == DONE


def test_audit_sample_is_repeatable_and_near_the_rate() -> None:
    shas = [f"{index:064x}" for index in range(4000)]
    sampled = [sha for sha in shas if sampled_for_audit(sha, 0.05)]
    assert 0.035 < len(sampled) / len(shas) < 0.065
    assert sampled == [sha for sha in shas if sampled_for_audit(sha, 0.05)]
    assert not any(sampled_for_audit(sha, 0.0) for sha in shas[:100])
    assert decide(_document([0.99] * 20, sha=sampled[0]), RoutingConfig(audit_rate=0.05)).route == AUDIT


def test_unsure_field_goes_to_review_only_when_the_profile_asks() -> None:
    document = _document([0.99] * 20)
    document.fields["company"] = FieldValue(
        raw="ACME", value="ACME", confidence=0.5, review=True, reasons=["confidence.low: 0.5 < 0.8"]
    )
    assert decide(document, NO_AUDIT).route == DONE
    decision = decide(document, RoutingConfig(review_unsure_fields=True, audit_rate=0.0))
    assert decision.route == REVIEW
    assert decision.reasons == ["field company: confidence.low: 0.5 < 0.8"]
    document.fields["company"] = FieldValue(
        raw="ACME", value="ACME", confidence=0.99, review=True, reasons=["total.items_sum failed"]
    )
    assert decide(document, RoutingConfig(review_failed_checks=False, audit_rate=0.0)).route == DONE
