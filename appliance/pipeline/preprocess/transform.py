"""The geometric record of preprocessing: one 3x3 matrix from the raster page to the processed page.

Every geometric step (quarter turns, deskew, crop, resize) multiplies onto it, so boxes read on the
processed page can be mapped back exactly to the page as it was rasterized. Results keep their
boxes in that original frame, because the searchable PDF, hOCR and ALTO lay text over the
original page image.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from appliance.document import Box, Line, Polygon, Word


def _identity() -> np.ndarray:
    return np.eye(3, dtype=np.float64)


@dataclass
class PageTransform:
    """Maps raster-page pixels to processed-page pixels (`matrix`), and back."""

    matrix: np.ndarray = field(default_factory=_identity)
    # The inverse, made once for the matrix it was made of (a page maps every line and word back).
    _inverse: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def is_identity(self) -> bool:
        return bool(np.allclose(self.matrix, np.eye(3)))

    def then(self, affine: np.ndarray) -> None:
        """Append a step given as a 2x3 or 3x3 matrix in the current processed frame."""
        step = affine if affine.shape == (3, 3) else np.vstack([affine, [0.0, 0.0, 1.0]])
        self.matrix = step @ self.matrix

    def to_original(self, points: np.ndarray) -> np.ndarray:
        """Processed-page points (N x 2) in raster-page pixels."""
        if self._inverse is None or self._inverse[0] is not self.matrix:
            self._inverse = (self.matrix, np.linalg.inv(self.matrix))
        inverse = self._inverse[1]
        homogeneous = np.hstack([points, np.ones((len(points), 1))])
        mapped: np.ndarray = (homogeneous @ inverse.T)[:, :2]
        return mapped

    def box_to_original(self, box: Box) -> Box:
        x0, y0, x1, y1 = box
        corners = self.to_original(np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float64))
        return (
            float(corners[:, 0].min()),
            float(corners[:, 1].min()),
            float(corners[:, 0].max()),
            float(corners[:, 1].max()),
        )

    def polygon_to_original(self, polygon: Polygon) -> Polygon:
        if not polygon:
            return polygon
        mapped = self.to_original(np.array(polygon, dtype=np.float64))
        return tuple((float(x), float(y)) for x, y in mapped)

    def lines_to_original(self, lines: list[Line]) -> None:
        """Rewrite every line's box, polygon and word boxes in raster-page pixels (in place)."""
        if self.is_identity:
            return
        for line in lines:
            self._line_to_original(line)

    def _line_to_original(self, line: Line) -> None:
        if len(line.polygon) >= 3:
            # The box of the mapped outline, not the mapped box: a box turned by a deskew angle
            # and boxed again grows by the line's length times the angle, and swallows neighbours.
            line.polygon = self.polygon_to_original(line.polygon)
            xs = [x for x, _ in line.polygon]
            ys = [y for _, y in line.polygon]
            line.box = (min(xs), min(ys), max(xs), max(ys))
        else:
            line.box = self.box_to_original(line.box)
        line.words = [Word(word.text, self.box_to_original(word.box), word.confidence) for word in line.words]
