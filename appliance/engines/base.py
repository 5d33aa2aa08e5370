"""The engine protocol: a page image in, lines with polygons, text and confidences out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from appliance.document import Line


@dataclass(frozen=True)
class OrientationEvidence:
    """How every detected text region read, kept or dropped, as lengths (pixels along the line).

    The page-level orientation decision needs the regions a line-level filter dropped: an
    upside-down page keeps only the few lines that happen to read confidently turned, and its
    kept lines alone look like a good read.
    """

    regions: int
    length: float  # all detected regions
    upright: float  # regions that read confidently as cropped
    flipped: float  # regions that read better turned 180 degrees
    vertical: float  # regions running top to bottom (their crops were turned a quarter to read)

    def share(self, part: float) -> float:
        return part / self.length if self.length else 0.0


@dataclass
class PageText:
    """What an engine read on one page, in the engine's own (not yet layout-sorted) order."""

    lines: list[Line]
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Per-engine figures for the page (e.g. the VLM's decoding: acceptance rate, tokens/s).
    details: dict[str, Any] = field(default_factory=dict)
    # Why a person must look at this page whatever its confidences (e.g. a generation cut short).
    review_reasons: list[str] = field(default_factory=list)
    evidence: OrientationEvidence | None = None  # None: the engine gives none, lines are used


class Engine(Protocol):
    """Anything that reads text from a BGR page image."""

    name: str

    def describe(self) -> dict[str, Any]:
        """Engine name, model ids and hashes, and the execution provider each model runs on."""
        ...

    def recognize(self, image: np.ndarray) -> PageText:
        """Read one page given as an HxWx3 uint8 BGR array."""
        ...

    def close(self) -> None:
        """Release models and sessions."""
        ...


def parallel_reads(engine: object) -> int:
    """How many pages an engine reads well at once, each on its own thread (1 if it does not say).

    An engine may carry `parallel_reads`: more than one where pages in flight overlap one page's
    host work with another's device work (the ONNX engine on CUDA). Every engine must stay correct
    when called from several threads; one that cannot run two reads at once serialises them itself.
    """
    return max(1, int(getattr(engine, "parallel_reads", 1)))


class SecondReader(Protocol):
    """What the cascade needs of a second reader (the VLM, an ONNX recogniser): read a page or region again.

    `hint` is the text the first engine read there: the second reader may draft from it (and
    verify rather than write from scratch). `deadline` is a time.monotonic() value by which the
    read should stop. The figures of a read go under `PageText.details[name]` (see details.py).
    A reader may carry `line_margin`, the paper round a line crop as a share of the line's height
    (pipeline/cascade.py; a quarter where it has none), `auto_keep`, the read a re-read line keeps
    under `cascade.keep: auto` (`second`, `more_confident`, the surer, or `joint`; the surer where it
    has none), `score_hints(on)` for `keep: joint` (pipeline/cascade.prepare_joint),
    `auto_max_changes`, the most characters a kept second read may change under
    `cascade.max_changes: auto` (None: any; 3 where it has none), and `lines_together` with
    `read_lines(crops, deadline=..., hints=...)` -> one PageText per crop, to be sent a page's
    lines that many at a time, each with its hint (the VLM engine's line reader).
    """

    name: str

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        """Read one BGR page or region (an HxWx3 uint8 array)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Name, model ids and hashes, and where the models run."""
        ...

    def close(self) -> None:
        """Release models and memory."""
        ...
