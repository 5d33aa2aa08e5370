"""The detector's host steps: the page's float input against the arithmetic it stands for; corner order."""

from __future__ import annotations

import itertools

import numpy as np

from appliance.engines.ppocr_onnx.detection import MEAN, STD, _order_quad, normalised


def test_normalised_is_the_float32_arithmetic_channels_first_and_contiguous() -> None:
    page = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    tensor = normalised(page)
    expected = ((page.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)[np.newaxis]
    assert tensor.shape == (1, 3, 64, 96) and tensor.dtype == np.float32 and tensor.flags.c_contiguous
    assert np.array_equal(tensor.view(np.uint32), np.ascontiguousarray(expected).view(np.uint32))


def test_corner_order_does_not_depend_on_how_argsort_breaks_ties() -> None:
    """numpy's default argsort may order tied values differently on another CPU (SIMD sorts are not
    stable): every four-point set on a 3 x 3 grid, ties of every kind, orders as a stable sort does."""

    def stable(points: np.ndarray) -> np.ndarray:
        by_x = points[np.argsort(points[:, 0], kind="stable")]
        left, right = by_x[:2], by_x[2:]
        top_left, bottom_left = left[np.argsort(left[:, 1], kind="stable")]
        top_right, bottom_right = right[np.argsort(right[:, 1], kind="stable")]
        return np.array([top_left, top_right, bottom_right, bottom_left], dtype=np.float32)

    grid = [(float(x), float(y)) for x in range(3) for y in range(3)]
    for corners in itertools.product(grid, repeat=4):
        points = np.array(corners, dtype=np.float32)
        assert np.array_equal(_order_quad(points), stable(points)), corners
