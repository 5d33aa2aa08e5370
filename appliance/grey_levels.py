"""The linear grey-level map that page contrast stretching and a line reader's levelled input share."""

from __future__ import annotations

import cv2
import numpy as np

# Ink and paper closer than this many grey levels mean no print: stretching them apart would only
# turn the paper's grain into noise.
MIN_SPREAD = 8


def map_levels(image: np.ndarray, dark: float, light: float, to: tuple[int, int] = (0, 255)) -> np.ndarray:
    """The uint8 image with grey level `dark` mapped to to[0] and `light` to to[1], linearly, clipped.

    Every channel is mapped alike (colours keep their hue, and BGR stays BGR). An image whose
    `light` is within MIN_SPREAD of its `dark` comes back unchanged.
    """
    if light - dark < MIN_SPREAD:
        return image
    scale = (to[1] - to[0]) / (light - dark)
    table = np.clip(np.rint((np.arange(256, dtype=np.float64) - dark) * scale + to[0]), 0, 255)
    return cv2.LUT(image, table.astype(np.uint8))
