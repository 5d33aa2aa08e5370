"""Recognised words and lines with their boxes: the leaves of the document model, which fields point into."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.schemas.result import LineResult, WordResult

# A box is (x0, y0, x1, y1) in page pixels; a polygon is four (x, y) corners, clockwise from
# top-left, so rotated lines keep their true outline while boxes stay easy to index.
Box = tuple[float, float, float, float]
Polygon = tuple[tuple[float, float], ...]


def round_box(box: Box) -> list[float]:
    """A box as the results write it: to a tenth of a pixel."""
    return [round(value, 1) for value in box]


def union_box(boxes: list[Box]) -> Box:
    """Smallest box that holds all the given boxes."""
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


@dataclass
class Word:
    """A run of characters without spaces (for CJK text, a run of characters between spaces)."""

    text: str
    box: Box
    confidence: float

    def to_result(self) -> WordResult:
        return WordResult.model_construct(
            text=self.text, box=round_box(self.box), confidence=round(self.confidence, 4)
        )


@dataclass
class Line:
    """One detected text line with the engine's per-character confidences."""

    text: str
    box: Box
    polygon: Polygon
    confidence: float
    char_confidences: list[float]
    words: list[Word] = field(default_factory=list)
    rotated_180: bool = False
    engine: str = ""
    occluded: bool = False  # under a seal or stamp: what was read there needs a human look
    # How likely another text of this line is to the engine that read it (log P, letter case and
    # spaces aside), where it kept the evidence: the cascade's `keep: joint`. Not in the results.
    likelihood: Callable[[str], float] | None = field(default=None, repr=False, compare=False)

    def to_result(self) -> LineResult:
        return LineResult.model_construct(
            text=self.text,
            box=round_box(self.box),
            polygon=[[round(x, 1), round(y, 1)] for x, y in self.polygon],
            confidence=round(self.confidence, 4),
            char_confidences=[round(c, 3) for c in self.char_confidences],
            rotated_180=self.rotated_180,
            engine=self.engine,
            occluded=self.occluded,
            words=[word.to_result() for word in self.words],
        )
