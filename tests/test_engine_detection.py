"""The detector's host steps: the page's float input, against the arithmetic it stands for."""

from __future__ import annotations

import numpy as np

from appliance.engines.ppocr_onnx.detection import MEAN, STD, normalised


def test_normalised_is_the_float32_arithmetic_channels_first_and_contiguous() -> None:
    page = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    tensor = normalised(page)
    expected = ((page.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)[np.newaxis]
    assert tensor.shape == (1, 3, 64, 96) and tensor.dtype == np.float32 and tensor.flags.c_contiguous
    assert np.array_equal(tensor.view(np.uint32), np.ascontiguousarray(expected).view(np.uint32))
