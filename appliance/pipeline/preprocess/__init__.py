"""Page preprocessing before the engine, each step optional per profile and recorded with its time.

Order, and why: quarter turns and deskew first (they need the ink as scanned, and everything
after works on the upright page), then the black-edge crop (a deskew canvas adds no black, and a
crop after it cuts straight), then seals (colour must still be there), then the pixel filters
(median denoise, contrast stretch, adaptive binarization) and last the resize to the engine's
preferred long side. Every geometric step is kept in one PageTransform so the boxes read on the
processed page are mapped back to the raster page (see transform.py).

The rest of the orientation decision is not made here: the ink alone cannot tell a page from its
upside-down image, nor which way a sideways page was turned, but the engine's first read can.
`orientation.read_upright` does that after the first read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.config import PreprocessConfig
from appliance.document import Block, Box
from appliance.engines.base import Engine, PageText
from appliance.pipeline.layout import order_page
from appliance.pipeline.preprocess import borders, deskew, filters, seals
from appliance.pipeline.preprocess.orientation import read_upright
from appliance.pipeline.preprocess.transform import PageTransform


@dataclass
class StepRecord:
    """One preprocessing step that ran: its name, what it found or did, and its time."""

    step: str
    params: dict[str, Any]
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "params": dict(self.params), "ms": round(self.ms, 2)}


@dataclass
class Preprocessed:
    """The page the engine reads, how it relates to the raster page, and what was done to it."""

    image: np.ndarray
    transform: PageTransform
    steps: list[StepRecord] = field(default_factory=list)
    occlusions: list[Box] = field(default_factory=list)  # seal boxes in processed-page pixels


def _paper_colour(image: np.ndarray) -> tuple[int, int, int]:
    """The paper's colour (the brightest common shade), used to fill canvas a rotation adds."""
    sample = image[:: max(1, image.shape[0] // 200), :: max(1, image.shape[1] // 200)].reshape(-1, 3)
    return tuple(int(v) for v in np.percentile(sample, 90, axis=0))  # type: ignore[return-value]


class _Clock:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


def preprocess(image: np.ndarray, config: PreprocessConfig) -> Preprocessed:
    """Run the configured steps on one BGR page."""
    result = Preprocessed(image=image, transform=PageTransform())
    if config.orientation or config.deskew:
        _geometry(result, config)
    if config.border_crop:
        _border_crop(result)
    if config.seals:
        clock = _Clock()
        boxes = seals.find_seals(result.image, config.seal_min_saturation, config.seal_min_size)
        result.image = seals.lift_seals(result.image, boxes, config.seal_min_saturation)
        result.occlusions = boxes
        result.steps.append(StepRecord("seals", {"found": len(boxes)}, clock.ms()))
    if config.denoise:
        clock = _Clock()
        result.image = filters.denoise(result.image, config.denoise_kernel)
        result.steps.append(StepRecord("denoise", {"kernel": config.denoise_kernel}, clock.ms()))
    if config.contrast:
        clock = _Clock()
        result.image, low, high = filters.contrast_stretch(
            result.image, config.contrast_low_percentile, config.contrast_high_percentile
        )
        result.steps.append(StepRecord("contrast", {"low": low, "high": high}, clock.ms()))
    if config.binarize:
        _binarize(result, config)
    if config.resize_long_side:
        clock = _Clock()
        height, width = result.image.shape[:2]
        if max(height, width) != config.resize_long_side and min(height, width) > 1:
            result.image, scale = filters.resize_long_side(result.image, config.resize_long_side)
            result.transform.then(np.diag([scale, scale, 1.0]))
            result.steps.append(StepRecord("resize", {"scale": round(scale, 4)}, clock.ms()))
    return result


def _geometry(result: Preprocessed, config: PreprocessConfig) -> None:
    clock = _Clock()
    estimate = deskew.estimate_skew(result.image, config.deskew_max_angle, check_vertical=config.orientation)
    if estimate is None:
        result.steps.append(StepRecord("deskew", {"angle": 0.0, "applied": False, "blank": True}, clock.ms()))
        return
    if config.orientation:
        turns = 1 if estimate.vertical else 0
        scores = {
            "score_horizontal": round(estimate.score_horizontal, 1),
            "score_vertical": round(estimate.score_vertical, 1),
        }
        if turns:
            result.image, matrix = deskew.rotate_quarter(result.image, turns)
            result.transform.then(matrix)
            if config.deskew:
                # The skew is measured again on the upright page, in its own frame: a second
                # look at the whole page, so only when deskew will use it.
                estimate = (
                    deskew.estimate_skew(result.image, config.deskew_max_angle, check_vertical=False)
                    or estimate
                )
        result.steps.append(
            # The scores that decided, not those measured again on the turned page.
            StepRecord("orientation", {"quarter_turns": turns, **scores}, clock.ms())
        )
        clock = _Clock()
    if config.deskew:
        angle = round(estimate.angle, 2)
        applied = abs(angle) > config.deskew_min_angle
        if applied:
            result.image, matrix = deskew.rotate_by(result.image, angle, _paper_colour(result.image))
            result.transform.then(matrix)
        result.steps.append(StepRecord("deskew", {"angle": angle, "applied": applied}, clock.ms()))


def _border_crop(result: Preprocessed) -> None:
    clock = _Clock()
    height, width = result.image.shape[:2]
    x0, y0, x1, y1 = borders.black_border_box(filters.grey_of(result.image))
    cropped = (x0, y0, x1, y1) != (0, 0, width, height) and x1 - x0 > 16 and y1 - y0 > 16
    if cropped:
        result.image = np.ascontiguousarray(result.image[y0:y1, x0:x1])
        result.transform.then(np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0], [0.0, 0.0, 1.0]]))
    result.steps.append(StepRecord("border_crop", {"box": [x0, y0, x1, y1], "applied": cropped}, clock.ms()))


def _binarize(result: Preprocessed, config: PreprocessConfig) -> None:
    clock = _Clock()
    colour = filters.colourfulness(result.image)
    midtones = filters.midtone_share(result.image)
    # Thresholding a colour or photo page erases text printed on tints and turns shading to noise.
    skipped = colour > 0.05 or midtones > 0.35
    if not skipped:
        result.image = filters.binarize(result.image, config.binarize_block, config.binarize_offset)
    result.steps.append(
        StepRecord(
            "binarize",
            {
                "block": config.binarize_block,
                "offset": config.binarize_offset,
                "applied": not skipped,
                "colour_share": round(colour, 3),
                "midtone_share": round(midtones, 3),
            },
            clock.ms(),
        )
    )


@dataclass
class PageRead:
    """One page preprocessed, read and ordered, with every box in raster-page pixels."""

    text: PageText
    blocks: list[Block]
    timings_ms: dict[str, float]
    warnings: list[str]
    steps: list[dict[str, Any]]
    occlusions: list[dict[str, Any]]


def _overlaps(box: Box, other: Box) -> bool:
    return min(box[2], other[2]) > max(box[0], other[0]) and min(box[3], other[3]) > max(box[1], other[1])


def read_page(
    engine: Engine,
    image: np.ndarray,
    config: PreprocessConfig,
    refine: Callable[[np.ndarray, PageText], PageText] | None = None,
) -> PageRead:
    """Preprocess, read (turning the page again when the read says it is not upright), order the lines.

    Reading order is decided on the processed, upright page, where rows and columns are
    horizontal and vertical; only then are the boxes mapped back to the raster page, so a result
    of a turned scan still lays its text over the page image as it was scanned.
    `refine` (the engine cascade) reads the upright page again once orientation is settled, so a
    costly second reader runs once per page, never once per orientation tried.
    """
    prepared = preprocess(image, config)
    occlusions = [prepared.transform.box_to_original(box) for box in prepared.occlusions]
    if config.orientation:
        page_text, upright_image, turn, decision = read_upright(
            engine, prepared.image, config.min_upright_share
        )
        if decision.checked:
            prepared.steps.append(
                StepRecord(
                    "orientation_check",
                    {
                        "quarter_turns": decision.turns,
                        "reads": decision.reads,
                        "upright_share": round(decision.upright_share, 3),
                        "vertical_share": round(decision.vertical_share, 3),
                        "chosen_upright_share": round(decision.chosen_upright_share, 3),
                    },
                    decision.ms,
                )
            )
        if turn is not None:
            prepared.transform.then(turn)
    else:
        page_text = engine.recognize(prepared.image)
        upright_image = prepared.image
    if refine is not None:
        page_text = refine(upright_image, page_text)
    layout_started = time.perf_counter()
    blocks = order_page(page_text.lines)
    layout_ms = (time.perf_counter() - layout_started) * 1000
    warnings: list[str] = []
    occluded = 0
    prepared.transform.lines_to_original(page_text.lines)
    for line in page_text.lines:
        if any(_overlaps(line.box, seal) for seal in occlusions):
            line.occluded = True
            occluded += 1
    if occluded:
        warnings.append(f"{occluded} line(s) lie under a seal or stamp and need review")
    preprocess_ms = sum(step.ms for step in prepared.steps)
    timings = {"preprocess": preprocess_ms, **page_text.timings_ms, "layout": layout_ms}
    return PageRead(
        text=page_text,
        blocks=blocks,
        timings_ms=timings,
        warnings=warnings,
        steps=[step.to_dict() for step in prepared.steps],
        occlusions=[{"kind": "seal", "box": [round(v, 1) for v in box]} for box in occlusions],
    )
