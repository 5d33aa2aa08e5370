"""Page-level 0/180 decision from the engine's own line reads.

Quarter turns are found from the ink (deskew.py), but a page and its upside-down image have the
same ink profile. The engine's line orientation classifier, aggregated over the page, can tell:
when a large share of the characters came from lines the engine had to read flipped (or the page
reads with low confidence, because the classifier misses many upside-down lines), the whole page
is read again turned 180 degrees and the read with the larger total character confidence is
kept. An upright page pays nothing; an upside-down page pays one more engine pass. The
alternatives were set aside: a detector pass at two rotations needs the detector alone, which the
Engine protocol does not expose, and `recognize` at four rotations would cost every page three
extra reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from appliance.engines.base import Engine, PageText
from appliance.pipeline.preprocess.deskew import rotate_quarter

# Below this mean character confidence a page is suspect even when few lines were flagged.
_LOW_CONFIDENCE = 0.75


@dataclass(frozen=True)
class FlipDecision:
    """Whether the page was turned 180 degrees, the evidence, and what the check cost."""

    flipped: bool
    checked: bool
    flipped_share: float
    confidence: float
    ms: float


def _evidence(page: PageText) -> tuple[float, float, float]:
    """Share of characters on lines read flipped, mean and total character confidence."""
    chars = [len(line.char_confidences) for line in page.lines]
    total_chars = sum(chars)
    if not total_chars:
        return 0.0, 0.0, 0.0
    flipped = sum(n for n, line in zip(chars, page.lines, strict=True) if line.rotated_180)
    mass = sum(sum(line.char_confidences) for line in page.lines)
    return flipped / total_chars, mass / total_chars, mass


def read_upright(
    engine: Engine, image: np.ndarray, flip_share: float
) -> tuple[PageText, np.ndarray, np.ndarray | None, FlipDecision]:
    """Read the page; re-read it turned 180 degrees when it looks upside down, keep the better.

    Returns the read, the image it came from, the 3x3 matrix of the turn (None if not turned)
    and the decision.
    """
    first = engine.recognize(image)
    started = time.perf_counter()
    share, mean_confidence, mass = _evidence(first)
    if share < flip_share and (mean_confidence >= _LOW_CONFIDENCE or not first.lines):
        return first, image, None, FlipDecision(False, False, share, mean_confidence, 0.0)
    turned, matrix = rotate_quarter(image, 2)
    second = engine.recognize(turned)
    _, _, turned_mass = _evidence(second)
    ms = (time.perf_counter() - started) * 1000
    if turned_mass > mass:
        return second, turned, matrix, FlipDecision(True, True, share, mean_confidence, ms)
    return first, image, None, FlipDecision(False, True, share, mean_confidence, ms)
