"""Engines whose reads depend on which way up the page is, for the orientation decision's tests."""

from __future__ import annotations

import numpy as np

from appliance.document import Line
from appliance.engines.base import OrientationEvidence, PageText


class _CountingEngine:
    """What both fakes share: a name, a description and the number of reads."""

    name = "fake"

    def __init__(self) -> None:
        self.calls = 0

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "models": []}

    def close(self) -> None:
        pass


class UpsideDownEngine(_CountingEngine):
    """Reads well only when the page's top-left pixel is white (the page's upright corner)."""

    def recognize(self, image: np.ndarray) -> PageText:
        self.calls += 1
        upright = bool(image[0, 0, 0] == 255)
        confidence = 0.95 if upright else 0.55
        line = Line(
            text="TOTAL 9.00",
            box=(10.0, 10.0, 110.0, 30.0),
            polygon=((10.0, 10.0), (110.0, 10.0), (110.0, 30.0), (10.0, 30.0)),
            confidence=confidence,
            char_confidences=[confidence] * 9,
            rotated_180=not upright,
        )
        return PageText(lines=[line])


class SidewaysEngine(_CountingEngine):
    """Reports its regions vertical unless the page is wider than tall, upright only one way up."""

    def recognize(self, image: np.ndarray) -> PageText:
        self.calls += 1
        height, width = image.shape[:2]
        sideways = height > width
        # The page's dark corner is top-left when upright; the crops of a page turned clockwise
        # read upright once the engine turns them back counter-clockwise.
        corner_top_left = bool(image[0, 0, 0] == 0)
        corner_top_right = bool(image[0, -1, 0] == 0)
        reads_upright = corner_top_left or (sideways and corner_top_right)
        evidence = OrientationEvidence(
            regions=4,
            length=400.0,
            upright=360.0 if reads_upright else 0.0,
            flipped=0.0 if reads_upright else 200.0,
            vertical=400.0 if sideways else 0.0,
        )
        return PageText(lines=[], evidence=evidence)
