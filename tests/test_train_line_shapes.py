"""The line-shape figures that compare rendered lines with real crops."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from train.line_shapes import LOOKS, grey_edge_share, line_looks, line_shape, percentiles


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


def test_looks_of_grey_print_on_grey_paper_at_the_models_input() -> None:
    crop = np.full((40, 200, 3), 220, np.uint8)
    crop[12:28, 10:190:8] = 60  # vertical strokes, 1 px wide in 8, over the middle of the height
    crop[12:28, 11:190:8] = 60
    paper, ink, contrast, dark = line_looks(crop)
    assert paper == pytest.approx(220, abs=1)
    assert ink == pytest.approx(60, abs=3)  # two-pixel strokes stretched threefold keep their level
    assert contrast == pytest.approx(paper - ink)
    assert 0.05 < dark < 0.25  # strokes on a quarter of the columns, 40% of the rows


def test_looks_leave_the_white_padding_out() -> None:
    # A short line is padded with white to 224 px at the model's input: grey paper stays grey.
    crop = np.full((28, 30), 180, np.uint8)
    crop[8:20, 5:25] = 10
    assert line_looks(crop)[0] == pytest.approx(180, abs=1)


def test_percentiles_of_the_looks_by_name() -> None:
    table = percentiles([(float(i), 0.0, 1.0, i / 100) for i in range(101)], LOOKS)
    assert list(table) == list(LOOKS)
    assert table["paper level"] == [10.0, 25.0, 50.0, 75.0, 90.0]
    assert table["dark share"] == [0.1, 0.25, 0.5, 0.75, 0.9]


def test_a_one_bit_crop_has_no_grey_edges_and_a_blurred_one_has_many() -> None:
    crop = np.full((40, 200), 255, np.uint8)
    crop[10:30, 20:180:10] = 0  # strokes 3 px wide, black on white, nothing between
    crop[10:30, 21:180:10] = 0
    crop[10:30, 22:180:10] = 0
    assert grey_edge_share(crop) == 0.0
    assert grey_edge_share(np.repeat(crop[:, :, None], 3, axis=2)) == 0.0  # a colour crop alike
    blurred = cv2.GaussianBlur(crop, (0, 0), 1.2)
    assert 0.3 < (grey_edge_share(blurred) or 0.0) < 0.9
    # Levels are the crop's own: the same strokes in grey on grey paper are as hard.
    assert grey_edge_share(np.where(crop == 0, 90, 200).astype(np.uint8)) == 0.0


def test_a_crop_without_print_has_no_grey_edge_share() -> None:
    noise = np.random.default_rng(0).normal(235, 6, (30, 120))
    assert grey_edge_share(np.clip(noise, 0, 255).astype(np.uint8)) is None
