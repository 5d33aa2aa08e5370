"""One extracted field and the spans of recognised text it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.lines import Box, Line, round_box, union_box
from appliance.repair.ruleset import Check
from appliance.schemas.result import CheckResult, FieldResult


@dataclass(frozen=True)
class Span:
    """Characters start..end of one line, with the line's place in the document."""

    line: Line
    ref: str
    start: int
    end: int

    @property
    def text(self) -> str:
        return self.line.text[self.start : self.end]

    @property
    def confidences(self) -> list[float]:
        return self.line.char_confidences[self.start : self.end]

    @property
    def box(self) -> Box:
        """The union of the words the span touches; the line's box when words are not known."""
        boxes: list[Box] = []
        offset = 0
        for word in self.line.words:
            position = self.line.text.find(word.text, offset)
            if position < 0:
                return self.line.box
            offset = position + len(word.text)
            if position < self.end and self.start < offset:
                boxes.append(word.box)
        return union_box(boxes) if boxes else self.line.box


@dataclass
class FieldValue:
    """A field as printed (raw), as normalised (value), how sure we are, and why."""

    raw: str
    value: str | None
    confidence: float
    spans: list[Span] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    review: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_result(self) -> FieldResult:
        return FieldResult.model_construct(
            raw=self.raw,
            value=self.value,
            confidence=round(self.confidence, 4),
            boxes=[round_box(span.box) for span in self.spans],
            rules=list(dict.fromkeys(self.rules)),  # each rule once, in the order it first applied
            checks=[
                CheckResult.model_construct(rule=check.rule_id, passed=check.passed, detail=check.detail)
                for check in self.checks
            ],
            review=self.review,
            reasons=list(self.reasons),
        )

    def to_dict(self) -> dict[str, Any]:
        return self.to_result().model_dump()
