"""PP-OCR DB text detection: resize, run the detector, turn the probability map into quads.

The DB post-processing (threshold, contours, box score, unclip) is written here rather than
taken from RapidOCR: we need the quads in page coordinates for layout and word boxes, control of
the resize that decides small-text recall, and no dependency that wants to download models.
It follows PaddleOCR's `DBPostProcess` (Apache-2.0) step for step.
"""

from __future__ import annotations

from collections.abc import Mapping

import cv2
import numpy as np
import pyclipper

from appliance.engines.ppocr_onnx.image_input import takes_image
from appliance.engines.ppocr_onnx.sessions import ModelSession
from appliance.engines.ppocr_onnx.shapes import choose_bucket, pad_page, paper_colour

# The detector's input normalisation (ImageNet's), per channel of the BGR page as it is read.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
_MAX_CANDIDATES = 1000
_MIN_SIDE = 3


def _resize_for_detector(image: np.ndarray, limit_side_len: int) -> tuple[np.ndarray, float, float]:
    """Scale so the long side is at most limit_side_len, both sides multiples of 32."""
    height, width = image.shape[:2]
    ratio = min(1.0, limit_side_len / max(height, width))
    new_h = max(32, round(height * ratio / 32) * 32)
    new_w = max(32, round(width * ratio / 32) * 32)
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return resized, new_h / height, new_w / width


def normalised(image: np.ndarray) -> np.ndarray:
    """The (1, 3, H, W) float32 input (image / 255 - MEAN) / STD of an (H, W, 3) uint8 BGR page.

    Written channels first into one array, in float32 like the expression it replaces: the same
    values without three page-sized temporaries and the transposed copy onnxruntime made of them.
    """
    tensor = np.empty((1, 3, *image.shape[:2]), dtype=np.float32)
    np.divide(image.transpose(2, 0, 1), np.float32(255.0), out=tensor[0])
    tensor[0] -= MEAN[:, np.newaxis, np.newaxis]
    tensor[0] /= STD[:, np.newaxis, np.newaxis]
    return tensor


def _order_quad(points: np.ndarray) -> np.ndarray:
    """Corners clockwise from top-left.

    Sorted as Python lists: for four points numpy's argsort and fancy indexing cost more in call
    overhead than the sorting, about 150 times a page, all of it holding the GIL that another page
    in flight is waiting for (bench/README, "On the H200 again, and in the daemon": the host's share
    before and after). `sorted` is stable, which numpy's default argsort is not; the corners come out the same
    either way (tests/test_engine_detection.py).
    """
    by_x = sorted(points.tolist(), key=lambda point: point[0])
    top_left, bottom_left = sorted(by_x[:2], key=lambda point: point[1])
    top_right, bottom_right = sorted(by_x[2:], key=lambda point: point[1])
    return np.array([top_left, top_right, bottom_right, bottom_left], dtype=np.float32)


def _mini_box(contour: np.ndarray) -> tuple[np.ndarray, float]:
    rect = cv2.minAreaRect(contour)
    points = cv2.boxPoints(rect)
    return _order_quad(points), min(rect[1])


def _box_score(probability: np.ndarray, quad: np.ndarray) -> float:
    """Mean probability inside the quad (PaddleOCR's 'fast' score mode)."""
    height, width = probability.shape
    x0 = int(np.clip(np.floor(quad[:, 0].min()), 0, width - 1))
    x1 = int(np.clip(np.ceil(quad[:, 0].max()), 0, width - 1))
    y0 = int(np.clip(np.floor(quad[:, 1].min()), 0, height - 1))
    y1 = int(np.clip(np.ceil(quad[:, 1].max()), 0, height - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), dtype=np.uint8)
    shifted = (quad - np.array([x0, y0], dtype=np.float32)).astype(np.int32)
    cv2.fillPoly(mask, [shifted], 1)
    return float(cv2.mean(probability[y0 : y1 + 1, x0 : x1 + 1], mask)[0])


def _unclip(quad: np.ndarray, ratio: float) -> np.ndarray | None:
    """Grow the shrunk DB kernel back to the text outline (offset by area * ratio / perimeter)."""
    area = cv2.contourArea(quad)
    perimeter = cv2.arcLength(quad, True)
    if perimeter == 0:
        return None
    distance = area * ratio / perimeter
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(quad.astype(np.int64).tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    expanded = offset.Execute(distance)
    if len(expanded) != 1:
        return None
    return np.array(expanded[0], dtype=np.float32)


class TextDetector:
    """Finds text lines on a page and returns them as quads in page pixels."""

    def __init__(
        self,
        session: ModelSession,
        limit_side_len: int,
        threshold: float,
        box_threshold: float,
        unclip_ratio: float,
        *,
        buckets: Mapping[tuple[int, int], ModelSession] | None = None,
    ) -> None:
        """`buckets`: one session per fixed (height, width) input (shapes.py); None: `session` takes any.

        With buckets, the resized page is padded with its paper colour to the smallest bucket that
        holds it, run on that bucket's session, and the probability map cut back to the page. A
        graph that normalises the page itself (image_input.py) is given the uint8 pixels.
        """
        self._session = session
        self._takes_image = takes_image(session)
        self._buckets = dict(buckets) if buckets else None
        self._input = session.get_inputs()[0].name
        self._limit_side_len = limit_side_len
        self._threshold = threshold
        self._box_threshold = box_threshold
        self._unclip_ratio = unclip_ratio

    def probability_map(self, image: np.ndarray) -> tuple[np.ndarray, float, float]:
        resized, scale_y, scale_x = _resize_for_detector(image, self._limit_side_len)
        height, width = resized.shape[:2]
        session = self._session
        if self._buckets is not None:
            size = choose_bucket(height, width, list(self._buckets))
            resized, session = pad_page(resized, size, paper_colour(resized)), self._buckets[size]
        tensor = resized[np.newaxis] if self._takes_image else normalised(resized)
        output = session.run(None, {self._input: tensor})[0]
        return output[0, 0, :height, :width], scale_y, scale_x

    def detect(self, image: np.ndarray) -> list[np.ndarray]:
        """Quads (4x2 float32, clockwise from top-left) of the text lines on a BGR page."""
        height, width = image.shape[:2]
        probability, scale_y, scale_x = self.probability_map(image)
        bitmap = (probability > self._threshold).astype(np.uint8) * 255
        contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        quads: list[np.ndarray] = []
        for contour in contours[:_MAX_CANDIDATES]:
            quad, short_side = _mini_box(contour)
            if short_side < _MIN_SIDE:
                continue
            if _box_score(probability, quad) < self._box_threshold:
                continue
            expanded = _unclip(quad, self._unclip_ratio)
            if expanded is None:
                continue
            quad, short_side = _mini_box(expanded.reshape(-1, 1, 2))
            if short_side < _MIN_SIDE + 2:
                continue
            quad[:, 0] = np.clip(quad[:, 0] / scale_x, 0, width - 1)
            quad[:, 1] = np.clip(quad[:, 1] / scale_y, 0, height - 1)
            quad = _order_quad(quad)
            if np.linalg.norm(quad[0] - quad[1]) <= 3 or np.linalg.norm(quad[0] - quad[3]) <= 3:
                continue
            quads.append(quad)
        return quads
