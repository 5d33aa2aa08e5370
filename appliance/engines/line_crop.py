"""Cuts a text line out of a page as an upright image, from the four corners an engine found."""

from __future__ import annotations

import cv2
import numpy as np

# Below this slant (degrees) a line's box is cut as it is: warping an upright rectangle only blurs it.
_UPRIGHT_DEGREES = 1.0

# Paper round a line crop that a second reader gets, as a share of the line's height. A
# recogniser (and a line reader trained on detector-like crops) gets an eighth: the ppocr_onnx
# engine narrows a detected quad to 0.8 of its thickness for the line's box, so an eighth gives
# back about the crop its detector cut. A page VLM reads a line better with a quarter.
RECOGNISER_LINE_MARGIN = 0.125
VLM_LINE_MARGIN = 0.25


def cut_box(
    image: np.ndarray,
    box: tuple[float, float, float, float],
    share: float,
    x_limits: tuple[float, float] | None = None,
) -> np.ndarray:
    """The axis-aligned box (x0, y0, x1, y1) grown by `share` of its height on every side, clipped.

    `x_limits` (page x from, to), where given, bound it left and right too.
    """
    x0, y0, x1, y1 = box
    margin = (y1 - y0) * share
    height, width = image.shape[:2]
    left, top = max(0, int(x0 - margin)), max(0, int(y0 - margin))
    right, bottom = min(width, int(np.ceil(x1 + margin))), min(height, int(np.ceil(y1 + margin)))
    if x_limits is not None:
        lowest, highest = x_limits
        bounded_left = max(left, int(np.ceil(lowest))) if np.isfinite(lowest) else left
        bounded_right = min(right, int(highest)) if np.isfinite(highest) else right
        if bounded_right > bounded_left:
            left, right = bounded_left, bounded_right
    return image[top:bottom, left:right]


def crop_line(image: np.ndarray, quad: np.ndarray) -> tuple[np.ndarray, bool]:
    """Rectify a line quad into an upright crop; tall crops are turned so text runs left to right.

    Returns the crop and whether it was turned 90 degrees (vertical text), which the word-box
    mapping needs to know.
    """
    width = int(max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[3] - quad[2])))
    height = int(max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2])))
    width, height = max(width, 1), max(height, 1)
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(quad.astype(np.float32), target)
    crop = cv2.warpPerspective(
        image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC
    )
    if height / width >= 1.5:
        return np.ascontiguousarray(np.rot90(crop)), True
    return crop, False


def widen(quad: np.ndarray, margin: float) -> np.ndarray:
    """The quad grown by `margin` pixels on every side, along its own edges.

    Along its own edges, not the page's axes: a slanted line gets paper round it, not the corners
    of the lines above and below.
    """
    p0, p1, p2, p3 = (quad[index].astype(np.float64) for index in range(4))
    along = p1 - p0
    across = p3 - p0
    along /= max(float(np.linalg.norm(along)), 1e-9)
    across /= max(float(np.linalg.norm(across)), 1e-9)
    shift_along, shift_across = along * margin, across * margin
    return np.array(
        [
            p0 - shift_along - shift_across,
            p1 + shift_along - shift_across,
            p2 + shift_along + shift_across,
            p3 - shift_along + shift_across,
        ]
    )


def slant_degrees(quad: np.ndarray) -> float:
    """How far the line's top edge leans from horizontal."""
    dx, dy = (quad[1] - quad[0]).astype(np.float64)
    return abs(float(np.degrees(np.arctan2(dy, dx))))


def is_upright(quad: np.ndarray) -> bool:
    return slant_degrees(quad) < _UPRIGHT_DEGREES
