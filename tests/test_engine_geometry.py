"""Word boxes from positions along a line's quad: upright, read upside down, vertical, clamped."""

from __future__ import annotations

import numpy as np

from appliance.engines.ppocr_onnx.geometry import span_box

_LINE = np.array([[0, 0], [100, 0], [100, 10], [0, 10]], dtype=np.float32)
_COLUMN = np.array([[0, 0], [10, 0], [10, 100], [0, 100]], dtype=np.float32)  # reading runs down


def test_span_box_cuts_the_line_along_its_reading_direction() -> None:
    assert span_box(_LINE, 0.2, 0.5, turned_90=False, flipped=False) == (20.0, 0.0, 50.0, 10.0)


def test_span_box_of_a_flipped_line_counts_from_its_other_end() -> None:
    assert span_box(_LINE, 0.2, 0.5, turned_90=False, flipped=True) == (50.0, 0.0, 80.0, 10.0)


def test_span_box_of_a_vertical_line_runs_down_its_long_edges() -> None:
    assert span_box(_COLUMN, 0.2, 0.5, turned_90=True, flipped=False) == (0.0, 20.0, 10.0, 50.0)


def test_span_box_stays_inside_the_line_and_gives_python_floats() -> None:
    box = span_box(_LINE * 1.5 + 0.25, -0.1, 1.2, turned_90=False, flipped=False)
    assert box == (0.25, 0.25, 150.25, 15.25)
    assert all(type(value) is float for value in box)
