"""The document model every output is rendered from: Document > Page > Block > Line > Word."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the repair package imports this module; these are for annotations only
    from appliance.fields.model import FieldValue
    from appliance.repair.ruleset import RepairLog

# A box is (x0, y0, x1, y1) in page pixels; a polygon is four (x, y) corners, clockwise from
# top-left, so rotated lines keep their true outline while boxes stay easy to index.
Box = tuple[float, float, float, float]
Polygon = tuple[tuple[float, float], ...]

SCHEMA_VERSION = "1.0"
# The resolution of a page whose input did not state one: the common scanner default.
DEFAULT_DPI = 300.0


def _round_box(box: Box) -> list[float]:
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

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "box": _round_box(self.box), "confidence": round(self.confidence, 4)}


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "box": _round_box(self.box),
            "polygon": [[round(x, 1), round(y, 1)] for x, y in self.polygon],
            "confidence": round(self.confidence, 4),
            "char_confidences": [round(c, 3) for c in self.char_confidences],
            "rotated_180": self.rotated_180,
            "engine": self.engine,
            "occluded": self.occluded,
            "words": [word.to_dict() for word in self.words],
        }


@dataclass
class Block:
    """Lines that belong together (a paragraph, a column segment)."""

    lines: list[Line]

    @property
    def box(self) -> Box:
        return union_box([line.box for line in self.lines])

    @property
    def text(self) -> str:
        # Blocks are visual rows for now, so their lines share one text line.
        return " ".join(line.text for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {"box": _round_box(self.box), "lines": [line.to_dict() for line in self.lines]}


@dataclass
class Page:
    """One rasterized page and what was read on it."""

    index: int
    width: int
    height: int
    dpi: float | None
    blocks: list[Block] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    text_layer_chars: int | None = None
    # What preprocessing did (step, params, ms) and the seal regions found, in page pixels.
    preprocessing: list[dict[str, Any]] = field(default_factory=list)
    occlusions: list[dict[str, Any]] = field(default_factory=list)
    # What the engines report for the page (the cascade's route, the VLM's decoding figures).
    engine_details: dict[str, Any] = field(default_factory=dict)
    review_reasons: list[str] = field(default_factory=list)  # a person must look, whatever the confidence

    @property
    def lines(self) -> list[Line]:
        return [line for block in self.blocks for line in block.lines]

    @property
    def text(self) -> str:
        return "\n".join(block.text for block in self.blocks)

    @property
    def confidence(self) -> float | None:
        """Character-weighted mean confidence; None on a page with no text."""
        confidences = [c for line in self.lines for c in line.char_confidences]
        return sum(confidences) / len(confidences) if confidences else None

    def to_dict(self) -> dict[str, Any]:
        confidence = self.confidence
        return {
            "index": self.index,
            "width": self.width,
            "height": self.height,
            "dpi": self.dpi,
            "confidence": None if confidence is None else round(confidence, 4),
            "text_layer_chars": self.text_layer_chars,
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
            "warnings": list(self.warnings),
            "preprocessing": list(self.preprocessing),
            "occlusions": list(self.occlusions),
            "engine_details": dict(self.engine_details),
            "review_reasons": list(self.review_reasons),
            "blocks": [block.to_dict() for block in self.blocks],
        }


@dataclass
class SourceFile:
    """Where a document came from, identified by content hash."""

    name: str
    path: str
    sha256: str
    size: int
    media_type: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "media_type": self.media_type,
        }


@dataclass
class Document:
    """The result of reading one input file."""

    source: SourceFile
    engine: dict[str, Any]
    pages: list[Page] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    created: str = ""
    appliance_version: str = ""
    fields: dict[str, FieldValue] = field(default_factory=dict)
    repairs: RepairLog | None = None  # None: the repair step did not run
    routing: dict[str, Any] | None = None  # {"route": done|audit|review, "reasons": [...]} once routed

    @property
    def text(self) -> str:
        # A form feed between pages, as pdftotext does, so page breaks survive in plain text.
        return "\n\f".join(page.text for page in self.pages)

    @property
    def confidence(self) -> float | None:
        confidences = [c for page in self.pages for line in page.lines for c in line.char_confidences]
        return sum(confidences) / len(confidences) if confidences else None

    def to_dict(self) -> dict[str, Any]:
        confidence = self.confidence
        return {
            "schema_version": SCHEMA_VERSION,
            "appliance_version": self.appliance_version,
            "created": self.created,
            "source": self.source.to_dict(),
            "engine": self.engine,
            "page_count": len(self.pages),
            "confidence": None if confidence is None else round(confidence, 4),
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
            "pages": [page.to_dict() for page in self.pages],
            "text": self.text,
            "fields": {name: value.to_dict() for name, value in self.fields.items()},
            "repairs": None if self.repairs is None else self.repairs.to_dict(),
            "routing": self.routing,
        }
