"""The line-shape figures that compare rendered lines with real crops."""

from __future__ import annotations

import numpy as np
import pytest

from train.line_shapes import line_shape, percentiles


def test_ink_height_share_and_width_per_character() -> None:
    crop = np.full((40, 200, 3), 235, np.uint8)
    crop[10:30, 20:180] = 20  # ink on the middle half of the height
    ink, width = line_shape(crop, "ABCDEFGHIJ")
    assert ink == pytest.approx(0.5)
    assert width == pytest.approx(200 / 40 / 10)


def test_a_blank_crop_has_no_ink_height() -> None:
    assert line_shape(np.full((20, 80), 240, np.uint8), "ab")[0] == 0.0


def test_percentiles_of_both_figures() -> None:
    table = percentiles([(i / 100, i / 10) for i in range(101)])
    assert table["ink height share"] == [0.1, 0.25, 0.5, 0.75, 0.9]
    assert table["width per char / height"] == [1.0, 2.5, 5.0, 7.5, 9.0]
