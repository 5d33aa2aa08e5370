"""Pixel filters: median denoise, contrast stretch, adaptive binarization, resize.

Each works on the BGR page and returns a BGR page, so the engine always gets what it was trained
on; binarization alone turns the page grey, and is refused on colour or photo pages where a
threshold would erase text printed on tints.
"""

from __future__ import annotations

import cv2
import numpy as np

from appliance.grey_levels import map_levels


def grey_of(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image


def denoise(image: np.ndarray, kernel: int) -> np.ndarray:
    """Median filter: removes salt-and-pepper speckle while keeping stroke edges sharp."""
    return cv2.medianBlur(image, kernel)


def contrast_stretch(image: np.ndarray, low_pct: float, high_pct: float) -> tuple[np.ndarray, int, int]:
    """Map the low..high percentiles of grey to 0..255 on every channel (colours keep their hue)."""
    grey = grey_of(image)
    sample = grey[:: max(1, grey.shape[0] // 400), :: max(1, grey.shape[1] // 400)]
    low, high = (int(v) for v in np.percentile(sample, [low_pct, high_pct]))
    return map_levels(image, low, high), low, high  # a blank page comes back as it is


def colourfulness(image: np.ndarray) -> float:
    """Share of clearly coloured pixels (HSV saturation over 60 and not dark)."""
    if image.ndim != 3:
        return 0.0
    small = image[:: max(1, image.shape[0] // 300), :: max(1, image.shape[1] // 300)]
    hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV)
    return float(np.mean((hsv[:, :, 1] > 60) & (hsv[:, :, 2] > 60)))


def midtone_share(image: np.ndarray) -> float:
    """Share of mid-grey pixels: high on photographs, low on printed text over paper."""
    grey = grey_of(image)
    small = grey[:: max(1, grey.shape[0] // 300), :: max(1, grey.shape[1] // 300)]
    return float(np.mean((small > 60) & (small < 190)))


def binarize(image: np.ndarray, block: int, offset: float) -> np.ndarray:
    """Adaptive Gaussian threshold: black text on white, even under uneven lighting."""
    grey = grey_of(image)
    binary = cv2.adaptiveThreshold(
        grey, 255, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, block | 1, offset
    )
    return cv2.cvtColor(binary, cv2.COLOR_GRAY2BGR)


def shrink(image: np.ndarray, scale: float) -> np.ndarray:
    """The page scaled down by `scale` (< 1) for measuring, averaging like INTER_AREA, but quicker.

    INTER_AREA over a 35-megapixel scan takes 120-140 ms on one core; taking every k-th pixel
    first, with k small enough that each output pixel still averages at least two samples per
    axis, gives nearly the same small page in about 40 ms (the ink profile and the seal search
    only look at strokes and blobs many pixels wide).
    """
    if scale >= 1:
        return image
    step = max(1, int(1 / scale) // 2)
    sampled = image[::step, ::step] if step > 1 else image
    height, width = image.shape[:2]
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return cv2.resize(sampled, size, interpolation=cv2.INTER_AREA)


def resize_long_side(image: np.ndarray, target: int) -> tuple[np.ndarray, float]:
    """Scale so the long side is `target` pixels; returns the page and the factor."""
    height, width = image.shape[:2]
    scale = target / max(height, width)
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    resized = cv2.resize(image, None, fx=scale, fy=scale, interpolation=interpolation)
    return resized, scale
