"""The image a line-reading VLM takes: one text line 28 px high, padded with white to whole tokens.

A Qwen2-VL line reader (train/ makes one) sees a line as one row of 28 x 28 px tokens. llama.cpp
would otherwise resize a crop to its own token grid (and a 40 px high line to two rows of tokens),
so the caller sizes the crop exactly: height 28, its aspect's width times a stretch (so that a
glyph spans more of a token's pixels), white on the right to a multiple of 28 px and at least 224 px (8
tokens); a line wider than 1,120 px (40 tokens) is squeezed horizontally, keeping the glyphs'
height, which is what the model reads best. A model trained on levelled lines (its ink and paper
mapped to set grey levels) reads lines levelled the same way. A model is read at the stretch and
levels it was trained at (its export's line_input.json, carried into its GGUF manifest); train/
renders its training lines through this same function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from appliance.grey_levels import map_levels

LINE_HEIGHT = 28
MIN_WIDTH = 224
MAX_WIDTH = 28 * 40
# How much wider than its aspect train/ draws a line unless told otherwise. Trained side by side
# from the same random weights on the same lines, a model at 1.5 read held-out lines and receipts
# far better than one at 1.0 (train/README.md, "Lost a fourth time, and the line stretch"), and
# read wider lines better still; fine-tuned at 2.0, it read the receipts better again ("A fifth
# box lost, and a stretch of 2.0"), and that model read them better still at 2.5 (not at 3.0), at
# which it was fine-tuned next ("Under 5% at a stretch of 2.5"). Much later, half of what the 2.5
# model misread beyond the ONNX recogniser was narrow print, and fine-tuned at 3.0 it read the
# receipts better again ("The stretch of 3.0"), for a fifth more image tokens a line.
LINE_STRETCH = 3.0
# Models from before the stretch was recorded were trained at this one.
UNRECORDED_STRETCH = 1.0
# The file in a trained export that records its stretch, height and levels; quantize.gguf copies
# the stretch and levels into the manifest.
LINE_INPUT_FILE = "line_input.json"
# The grey levels a line's ink and paper are taken at when it is levelled: its 1st and 99th
# percentiles, so that a speck of dirt or a glare does not set them.
LEVEL_PERCENTILES = (1.0, 99.0)


@dataclass(frozen=True)
class LineInput:
    """How a line reader's lines are drawn: the stretch, height and grey levels it was trained at.

    One record for the trainer, the evaluation, the GGUF manifest and the engine, so that no reader
    draws its lines otherwise than its model learnt them. `height` is a multiple of 28 (56 gives
    each glyph two rows of tokens); `levels` (ink, paper) levels each line (`level_line`), None
    leaves it as drawn.
    """

    stretch: float = LINE_STRETCH
    height: int = LINE_HEIGHT
    levels: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.height <= 0 or self.height % LINE_HEIGHT:
            raise ValueError(f"a line's height must be a multiple of {LINE_HEIGHT} px, not {self.height}")
        if self.stretch <= 0:
            raise ValueError(f"a line's stretch must be positive, not {self.stretch}")

    def write(self, export_dir: Path) -> None:
        """Records in a trained export how its lines were drawn (LINE_INPUT_FILE)."""
        record: dict[str, float | int | list[int]] = {"stretch": self.stretch}
        if self.height != LINE_HEIGHT:  # exports at the usual height stay as they always were
            record["height"] = self.height
        if self.levels is not None:
            record["levels"] = list(self.levels)
        (export_dir / LINE_INPUT_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")

    @classmethod
    def of_export(cls, export_dir: Path) -> LineInput:
        """How an export's lines were drawn; one from before the record was trained at UNRECORDED_STRETCH."""
        path = export_dir / LINE_INPUT_FILE
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        levels = record.get("levels")
        return cls(
            stretch=float(record.get("stretch", UNRECORDED_STRETCH)),
            height=int(record.get("height", LINE_HEIGHT)),
            levels=None if levels is None else (int(levels[0]), int(levels[1])),
        )


# The contract's usual lines: LINE_STRETCH wide, LINE_HEIGHT high, not levelled.
DEFAULT_LINE_INPUT = LineInput()


def level_line(line: np.ndarray, ink: int, paper: int) -> np.ndarray:
    """The line (3 channels, uint8) with its ink's grey level mapped to `ink`, its paper's to `paper`.

    The map is linear, clipped to 0-255. Scanners and printers give each receipt its own levels
    (paper clipped to white or grey, ink black or faded); levelled, every line reaches the model
    at one contrast. The grey is the channels' mean, the same whichever order they are in; a line
    with no print (grey_levels.MIN_SPREAD) is left as it is.
    """
    dark, light = np.percentile(line.mean(axis=2), LEVEL_PERCENTILES)
    return map_levels(line, float(dark), float(light), (ink, paper))


def drawn_width(
    height: int, width: int, line_input: LineInput = DEFAULT_LINE_INPUT, max_width: int = MAX_WIDTH
) -> int:
    """The width a height x width crop is drawn at in `prepare_line`'s image, before the white padding."""
    scale = line_input.stretch * line_input.height / max(height, 1)
    return min(max(1, round(width * scale)), max_width)


def prepare_line(
    crop: np.ndarray, line_input: LineInput = DEFAULT_LINE_INPUT, max_width: int = MAX_WIDTH
) -> np.ndarray:
    """The crop (grey, 3 or 4 channels, uint8) drawn as `line_input` says, padded white to k*28 >= 224 px.

    The line is `line_input.height` high (28: one row of tokens); its width is the crop's aspect
    times the stretch, at most `max_width` (the contract's MAX_WIDTH; another cap only to probe how
    a model reads past it). With levels, the line is levelled (`level_line`) before it is padded.
    The channel order is kept: a BGR crop comes back BGR, an RGB one RGB (white is the same in
    both); 3 channels always.
    """
    height, levels = line_input.height, line_input.levels
    if crop.ndim == 2:
        crop = cv2.cvtColor(crop, cv2.COLOR_GRAY2RGB)
    elif crop.shape[2] == 4:
        crop = np.ascontiguousarray(crop[:, :, :3])
    h, w = crop.shape[:2]
    width = drawn_width(h, w, line_input, max_width)
    shrinking = h > height or w > width
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    resized = cv2.resize(crop, (width, height), interpolation=interpolation)
    if levels is not None:
        resized = level_line(resized, *levels)
    padded_width = max(MIN_WIDTH, -(-width // LINE_HEIGHT) * LINE_HEIGHT)
    out = np.full((height, padded_width, 3), 255, dtype=np.uint8)
    out[:, :width] = resized
    return out
