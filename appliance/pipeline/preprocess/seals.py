"""Red seals and stamps: found through HSV red ranges, recorded as occlusions, and lifted off.

A red company chop over a total or a signature is the usual reason a field reads wrong. The
stamp's pixels are found by hue (red wraps round 0 in HSV, so two ranges) and saturation; blobs
of seal size and shape become occlusion regions. Inside them every channel is replaced by the red
channel: red ink is bright in red, so it turns to paper, while black print under it stays dark.
Red text lines (long thin blobs) are not seals and are left alone.
"""

from __future__ import annotations

import cv2
import numpy as np

from appliance.document import Box
from appliance.pipeline.preprocess.filters import shrink

_WORK_SHORT = 800  # pixels; the smallest seal (5% of the short side) is still 40 pixels there


def red_mask(image: np.ndarray, min_saturation: int) -> np.ndarray:
    """255 where a pixel is red ink (hue within 10 of 0, enough saturation, not dark), else 0.

    Two OpenCV range checks, not numpy comparisons: one pass each in C, off the GIL, instead of
    seven full-size temporaries (lift_seals runs it on the whole page).
    """
    hsv = cv2.cvtColor(image, cv2.COLOR_BGR2HSV)
    low = cv2.inRange(hsv, (0, min_saturation, 70), (10, 255, 255))
    high = cv2.inRange(hsv, (160, min_saturation, 70), (255, 255, 255))
    return cv2.bitwise_or(low, high)


def find_seals(image: np.ndarray, min_saturation: int, min_size_share: float) -> list[Box]:
    """Boxes of seal-like red blobs: at least `min_size_share` of the short side, roughly round."""
    if image.ndim != 3:
        return []
    # Found on the page scaled to a short side of _WORK_SHORT: at full size the colour conversion
    # and the closing of a 12-megapixel receipt took most of the page's time (7-14 s of 12-24 s).
    scale = min(1.0, _WORK_SHORT / min(image.shape[:2]))
    image = shrink(image, scale)
    mask = red_mask(image, min_saturation)
    short = min(image.shape[:2])
    # Closing joins a seal's ring, its characters and its star into one blob.
    size = max(3, short // 100) | 1
    closed = cv2.morphologyEx(
        mask, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size))
    )
    count, _, stats, _ = cv2.connectedComponentsWithStats(closed, connectivity=8)
    boxes: list[Box] = []
    for index in range(1, count):
        x, y, width, height, _area = (int(v) for v in stats[index])
        if min(width, height) < min_size_share * short:
            continue
        if not 0.4 <= width / height <= 2.5:  # a red heading is long and thin, not a stamp
            continue
        boxes.append((x / scale, y / scale, (x + width) / scale, (y + height) / scale))
    return boxes


def lift_seals(image: np.ndarray, boxes: list[Box], min_saturation: int) -> np.ndarray:
    """The page with the red ink inside the seal boxes turned to paper."""
    if not boxes:
        return image
    out = image.copy()
    mask = red_mask(image, min_saturation)
    # Anti-aliased seal edges are pinkish and below the saturation bar; widen the mask over them.
    mask = cv2.dilate(mask, np.ones((3, 3), np.uint8))
    for x0, y0, x1, y1 in boxes:
        ys, xs = slice(int(y0), int(y1)), slice(int(x0), int(x1))
        region = out[ys, xs]
        inside = mask[ys, xs] > 0
        red_channel = region[:, :, 2]
        region[inside] = np.repeat(red_channel[inside][:, None], 3, axis=1)
    return out
