"""Page skew and quarter-turn orientation from projection profiles of the ink.

A page of text lines, projected onto the axis across its lines, gives a profile of sharp peaks
(lines) and valleys (leading); any tilt smears them. The angle whose profile has the largest sum
of squared neighbour differences is the skew. Projecting onto the other axis tells a page turned
by 90 degrees: its lines run vertically, so the profile along x is the sharp one. This replaces
the Hough transform the production notes suggest (not compared head to head here): it scores the
text lines themselves rather than whichever long strokes or rules Hough picks, and on rendered
pages it finds skews of 2 to 12 degrees within 0.3 degree (tests/test_preprocess.py).

The search runs on ink points of a page scaled to 1000 pixels, so it costs a few tens of
milliseconds whatever the scan resolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from appliance.pipeline.preprocess.borders import black_border_box
from appliance.pipeline.preprocess.filters import grey_of, shrink

_WORK_SIDE = 1000
_MAX_POINTS = 60_000
_COARSE_STEP = 1.0
_FINE_STEP = 0.1
_VERTICAL_MARGIN = 6.0


@dataclass(frozen=True)
class SkewEstimate:
    """Skew in degrees (positive: lines fall to the right) and whether lines run vertically."""

    angle: float
    vertical: bool
    score_horizontal: float
    score_vertical: float
    ink_points: int


def ink_points(page: np.ndarray, seed: int = 0) -> np.ndarray:
    """Dark-pixel coordinates (N x 2, centred) of the page (BGR or grey) scaled to _WORK_SIDE pixels."""
    height, width = page.shape[:2]
    scale = min(1.0, _WORK_SIDE / max(height, width))
    # Shrunk before it is made grey: a full-size grey copy of a 35 MP scan is a fresh 35 MB whose
    # page faults cost more than the rest of the step, and only the small page is looked at (the
    # step's share of big scans: `bench.preprocess_bench --min-megapixels 20`).
    small = grey_of(shrink(page, scale))
    # Black scanner edges are no text: their long straight sides give the profile along the
    # lines its sharpest steps, and turned 8 of 10 receipts with added black edges sideways.
    x0, y0, x1, y1 = black_border_box(small)
    small = small[y0:y1, x0:x1]
    if small.size == 0:
        return np.zeros((0, 2), dtype=np.float64)
    _, ink = cv2.threshold(small, 0, 255, cv2.THRESH_BINARY_INV | cv2.THRESH_OTSU)
    ys, xs = np.nonzero(ink)
    if len(xs) > _MAX_POINTS:
        # A fixed seed keeps the estimate deterministic for the same page.
        pick = np.random.default_rng(seed).choice(len(xs), _MAX_POINTS, replace=False)
        xs, ys = xs[pick], ys[pick]
    points: np.ndarray = np.stack([xs, ys], axis=1).astype(np.float64)
    centre = np.array([small.shape[1] / 2, small.shape[0] / 2])
    centred: np.ndarray = points - centre
    return centred


def _columns(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """-x and y of the points as contiguous arrays, made once for every angle tried."""
    return np.ascontiguousarray(-points[:, 0]), np.ascontiguousarray(points[:, 1])


def _sharpness(columns: tuple[np.ndarray, np.ndarray], angle: float) -> float:
    """The sum of squared neighbour differences of the ink's profile across lines at `angle`.

    The profile's counts are differenced and squared as integers: the sum is the one float64
    gave (every partial sum is an integer far below 2**53), without converting the counts.
    """
    negative_x, y = columns
    theta = np.deg2rad(angle)
    across = negative_x * np.sin(theta) + y * np.cos(theta)
    across -= across.min()
    profile = np.bincount(across.astype(np.int64))
    return float(np.sum(np.diff(profile) ** 2))


def _best_angle(points: np.ndarray, max_angle: float) -> tuple[float, float]:
    columns = _columns(points)
    coarse = np.arange(-max_angle, max_angle + 1e-9, _COARSE_STEP)
    scores = [_sharpness(columns, a) for a in coarse]
    centre = float(coarse[int(np.argmax(scores))])
    fine = np.arange(centre - _COARSE_STEP, centre + _COARSE_STEP + 1e-9, _FINE_STEP)
    fine_scores = [_sharpness(columns, a) for a in fine]
    best = int(np.argmax(fine_scores))
    return float(fine[best]), float(fine_scores[best])


def estimate_skew(page: np.ndarray, max_angle: float, check_vertical: bool) -> SkewEstimate | None:
    """The page's (BGR or grey) skew, and with `check_vertical` whether its lines run top to bottom.

    None for a blank page.
    """
    points = ink_points(page)
    if len(points) < 200:  # a blank or nearly blank page has no lines to measure
        return None
    angle, horizontal = _best_angle(points, max_angle)
    vertical_score = 0.0
    vertical = False
    if check_vertical:
        swapped = points[:, ::-1] * np.array([-1.0, 1.0])  # the page turned a quarter
        vertical_angle, vertical_score = _best_angle(swapped, max_angle)
        # A wide margin, because a wrong turn costs an engine read and a missed one costs nothing
        # (the check after the first read turns it). Upright receipts, with their left-aligned
        # items and right-aligned prices, score up to 5.7 times sharper across than along their
        # lines (8 of 63 over 2); upright docs_zh pages at most 0.21.
        if vertical_score > _VERTICAL_MARGIN * horizontal:
            vertical, angle = True, vertical_angle
    return SkewEstimate(angle, vertical, horizontal, vertical_score, len(points))


def rotate_quarter(image: np.ndarray, turns: int) -> tuple[np.ndarray, np.ndarray]:
    """The image turned clockwise by `turns` quarters, and the 3x3 matrix of that turn."""
    turns %= 4
    height, width = image.shape[:2]
    codes = {1: cv2.ROTATE_90_CLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_COUNTERCLOCKWISE}
    matrices = {
        0: np.eye(3),
        1: np.array([[0.0, -1.0, height - 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
        2: np.array([[-1.0, 0.0, width - 1.0], [0.0, -1.0, height - 1.0], [0.0, 0.0, 1.0]]),
        3: np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, width - 1.0], [0.0, 0.0, 1.0]]),
    }
    turned = image if turns == 0 else np.ascontiguousarray(cv2.rotate(image, codes[turns]))
    return turned, matrices[turns]


def rotate_by(image: np.ndarray, angle: float, fill: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The image turned counter-clockwise by `angle` degrees on a canvas that keeps every corner."""
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
    cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
    new_width = int(np.ceil(height * sin + width * cos))
    new_height = int(np.ceil(height * cos + width * sin))
    matrix[0, 2] += new_width / 2 - width / 2
    matrix[1, 2] += new_height / 2 - height / 2
    rotated = cv2.warpAffine(
        image,
        matrix,
        (new_width, new_height),
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=fill,
    )
    return rotated, matrix
