"""The document model every output is rendered from: Document > Page > Block > Line > Word."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from appliance.fields.model import FieldValue
from appliance.lines import Box, Line, Polygon, Word, round_box, union_box
from appliance.repair.ruleset import RepairLog
from appliance.schemas.result import (
    SCHEMA_VERSION,
    BlockResult,
    ChangeResult,
    DocumentResult,
    EngineResult,
    PageResult,
    RepairsResult,
    RoutingResult,
    SourceResult,
)

# Box, Polygon, Word, Line and union_box live in appliance.lines (fields point into lines without
# importing the whole document) and are re-exported here, where readers of the model look for them.
__all__ = [
    "DEFAULT_DPI",
    "SCHEMA_VERSION",
    "Block",
    "Box",
    "Document",
    "Line",
    "Page",
    "Polygon",
    "SourceFile",
    "Word",
    "union_box",
]

# The resolution of a page whose input did not state one: the common scanner default.
DEFAULT_DPI = 300.0


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

    def to_result(self) -> BlockResult:
        return BlockResult.model_construct(
            box=round_box(self.box), lines=[line.to_result() for line in self.lines]
        )


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

    def to_result(self) -> PageResult:
        confidence = self.confidence
        return PageResult.model_construct(
            index=self.index,
            width=self.width,
            height=self.height,
            dpi=self.dpi,
            confidence=None if confidence is None else round(confidence, 4),
            text_layer_chars=self.text_layer_chars,
            timings_ms={k: round(v, 2) for k, v in self.timings_ms.items()},
            warnings=list(self.warnings),
            preprocessing=list(self.preprocessing),
            occlusions=list(self.occlusions),
            engine_details=dict(self.engine_details),
            review_reasons=list(self.review_reasons),
            blocks=[block.to_result() for block in self.blocks],
        )


@dataclass
class SourceFile:
    """Where a document came from, identified by content hash."""

    name: str
    path: str
    sha256: str
    size: int
    media_type: str

    def to_result(self) -> SourceResult:
        return SourceResult.model_construct(
            name=self.name, path=self.path, sha256=self.sha256, size=self.size, media_type=self.media_type
        )

    def to_dict(self) -> dict[str, Any]:
        return self.to_result().model_dump()


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

    def to_result(self) -> DocumentResult:
        """The result model of this document (rounded as results are written)."""
        confidence = self.confidence
        repairs = self.repairs
        return DocumentResult.model_construct(
            schema_version=SCHEMA_VERSION,
            appliance_version=self.appliance_version,
            created=self.created,
            source=self.source.to_result(),
            # Engines and routing describe themselves as plain dicts; they pass through as given.
            engine=cast(EngineResult, self.engine),
            page_count=len(self.pages),
            confidence=None if confidence is None else round(confidence, 4),
            timings_ms={k: round(v, 2) for k, v in self.timings_ms.items()},
            pages=[page.to_result() for page in self.pages],
            text=self.text,
            fields={name: value.to_result() for name, value in self.fields.items()},
            repairs=None
            if repairs is None
            else RepairsResult.model_construct(
                ruleset_version=repairs.ruleset_version,
                changes=[
                    ChangeResult.model_construct(
                        rule=change.rule_id, before=change.before, after=change.after, ref=change.ref
                    )
                    for change in repairs.changes
                ],
            ),
            routing=cast(RoutingResult | None, self.routing),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON result as Python values, exactly as the result models dump it."""
        return self.to_result().model_dump()
