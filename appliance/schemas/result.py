"""The JSON result as pydantic models: what Document.to_dict dumps and what the schema file is made from.

The models are built with `model_construct` from values the document model has already rounded, so
dumping them gives back exactly those values (no coercion of 300 to 300.0, no reordering of the keys
an engine reports); render_json still checks every result against the generated schema.
Objects whose keys come from elsewhere (an engine's description, a preprocessing step, a routing
decision) are TypedDicts: their dicts pass through as they are.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field

# pydantic reads TypedDicts from typing_extensions only, before Python 3.12.
from typing_extensions import TypedDict

SCHEMA_VERSION = "1.0"

Confidence = Annotated[float, Field(ge=0, le=1)]
Box = Annotated[list[float], Field(min_length=4, max_length=4, description="[x0, y0, x1, y1] in page pixels")]
Point = Annotated[list[float], Field(min_length=2, max_length=2)]
Timings = dict[str, Annotated[float, Field(ge=0)]]
Sha256 = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
MediaType = Literal["application/pdf", "image/tiff", "image/jpeg", "image/png", "image/bmp", "image/webp"]
PreprocessingStepName = Literal[
    "orientation",
    "orientation_check",
    "deskew",
    "border_crop",
    "seals",
    "denoise",
    "contrast",
    "binarize",
    "resize",
]


class _Closed(BaseModel):
    # Readers may rely on the keys being exactly these: an unknown key is a bug, not an extension.
    model_config = ConfigDict(extra="forbid")


class SourceResult(_Closed):
    """The input file, identified by its content hash."""

    name: str
    path: str
    sha256: Sha256
    size: Annotated[int, Field(ge=0)]
    media_type: MediaType


class ModelEntry(TypedDict):
    """One model file an engine loaded, and the execution provider it really runs on."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    role: str
    name: str
    file: str
    sha256: Sha256
    provider: str | None
    fallback_reason: NotRequired[str | None]


class EngineResult(TypedDict):
    """The engine that read the document, as it describes itself (engines may add keys)."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    name: str
    manifest: NotRequired[str]
    models: list[ModelEntry]


class WordResult(_Closed):
    """A run of characters without spaces."""

    text: Annotated[str, Field(min_length=1)]
    box: Box
    confidence: Confidence


class LineResult(_Closed):
    """One text line: polygon corners clockwise from top-left, one confidence per character."""

    text: Annotated[str, Field(min_length=1)]
    box: Box
    polygon: Annotated[list[Point], Field(min_length=4)]
    confidence: Confidence
    char_confidences: list[Confidence]
    rotated_180: bool
    engine: str
    occluded: bool = Field(
        default=False,
        description="the line lies under a seal or stamp (pages[].occlusions); its text needs review",
    )
    words: list[WordResult]


class BlockResult(_Closed):
    """Lines that belong together."""

    box: Box
    lines: Annotated[list[LineResult], Field(min_length=1)]


class PreprocessingStep(TypedDict):
    """A preprocessing step that ran, with what it found (e.g. the skew angle) and its time."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    step: PreprocessingStepName
    params: dict[str, Any]
    ms: Annotated[float, Field(ge=0)]


class Occlusion(TypedDict):
    """A region covered by a seal or stamp, in page pixels."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    kind: Literal["seal"]
    box: Box


class PageResult(_Closed):
    """One rasterized page and what was read on it."""

    index: Annotated[int, Field(ge=0)]
    width: Annotated[int, Field(ge=1)]
    height: Annotated[int, Field(ge=1)]
    dpi: float | None
    confidence: Confidence | None
    text_layer_chars: Annotated[int, Field(ge=0)] | None
    timings_ms: Timings
    warnings: list[str]
    preprocessing: list[PreprocessingStep] = Field(
        default_factory=list, description="Preprocessing steps that ran, in order."
    )
    occlusions: list[Occlusion] = Field(
        default_factory=list, description="Regions covered by a seal or stamp, in page pixels."
    )
    engine_details: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-engine figures for the page: the cascade's route and why, the VLM's decoding "
        "(draft source, acceptance rate, tokens/s, stop reason).",
    )
    review_reasons: list[str] = Field(
        default_factory=list,
        description="Why a person must look at this page whatever its confidences (e.g. the VLM was "
        "stopped in a loop).",
    )
    blocks: list[BlockResult]


class CheckResult(_Closed):
    """The outcome of a checksum or cross-check."""

    rule: Annotated[str, Field(min_length=1)]
    passed: bool
    detail: str


class ChangeResult(_Closed):
    """One change the rule set made."""

    rule: Annotated[str, Field(min_length=1)]
    before: str
    after: str
    ref: str = Field(description="pages[P].blocks[B].lines[L] or fields.NAME")


class FieldResult(_Closed):
    """An extracted field: as printed, as normalised, how sure, and why."""

    raw: str = Field(description="the text as read")
    value: str | None = Field(
        description="normalised: ISO 8601 dates, amounts as digits and a point; null when not found"
    )
    confidence: Confidence
    boxes: list[Box]
    rules: list[str]
    checks: list[CheckResult]
    review: bool
    reasons: list[str]


class RepairsResult(_Closed):
    """What the rule set changed, under the rule set's version."""

    ruleset_version: str
    changes: list[ChangeResult]


class RoutingResult(TypedDict):
    """Where the document went and why, with a reviewer's corrections."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    route: Literal["done", "audit", "review"]
    reasons: list[str]
    corrected: NotRequired[dict[str, str]]


class DocumentResult(_Closed):
    """One input file read by the appliance.

    Boxes are [x0, y0, x1, y1] in page pixels; polygons are four [x, y] corners clockwise from
    top-left; confidences are 0..1.
    """

    schema_version: Literal["1.0"]
    appliance_version: str
    created: str = Field(json_schema_extra={"format": "date-time"})
    source: SourceResult
    engine: EngineResult
    page_count: Annotated[int, Field(ge=0)]
    confidence: Confidence | None
    timings_ms: Timings
    pages: list[PageResult]
    text: str
    fields: dict[str, FieldResult] = Field(
        default_factory=dict,
        description="Fields of the configured profile (receipt: company, date, address, total, tax, "
        "invoice_number, id_*), by name.",
    )
    repairs: RepairsResult | None = Field(
        default=None, description="What the rule set changed; null when the repair step did not run."
    )
    routing: RoutingResult | None = Field(
        default=None,
        description="Where the document went and why: done (automatic), audit (done and sampled), "
        "review (people); null when not routed (one-shot use).",
    )
