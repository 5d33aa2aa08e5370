"""The image a line-reading VLM takes (engines/vlm_gguf/line_image.py): 28 px high, whole tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appliance.engines.vlm_gguf.line_image import (
    LINE_HEIGHT,
    MAX_WIDTH,
    MIN_WIDTH,
    UNRECORDED_STRETCH,
    drawn_width,
    prepare_line,
    trained_stretch,
    write_trained_stretch,
)


@pytest.mark.parametrize("channels", [None, 3, 4])
def test_grey_colour_and_alpha_crops_come_back_three_channels(channels: int | None) -> None:
    shape = (20, 200) if channels is None else (20, 200, channels)
    out = prepare_line(np.zeros(shape, np.uint8), stretch=1.0)
    assert out.shape == (LINE_HEIGHT, 280, 3)


def test_the_channel_order_is_kept() -> None:
    crop = np.zeros((28, 280, 3), np.uint8)
    crop[:, :, 0] = 200  # blue in BGR, red in RGB: either way it stays in channel 0
    out = prepare_line(crop)
    assert (out[:, :, 0] == 200).all() and (out[:, :, 1:] == 0).all()


def test_a_prepared_line_is_prepared_again_unchanged() -> None:
    crop = np.random.default_rng(1).integers(0, 256, (33, 410, 3), dtype=np.uint8)
    once = prepare_line(crop, stretch=1.0)
    assert np.array_equal(prepare_line(once, stretch=1.0), once)


def test_short_and_long_lines_stay_within_8_and_40_tokens() -> None:
    assert prepare_line(np.zeros((28, 10, 3), np.uint8)).shape[1] == MIN_WIDTH
    assert prepare_line(np.zeros((28, 5000, 3), np.uint8)).shape[1] == MAX_WIDTH


def test_a_stretch_widens_the_line_by_its_factor_within_40_tokens() -> None:
    crop = np.zeros((20, 300, 3), np.uint8)  # 420 px wide at height 28, ink to the right edge
    plain = prepare_line(crop, stretch=1.0)
    wide = prepare_line(crop, stretch=1.5)
    assert (plain[:, :420] == 0).all() and (plain[:, 420:] == 255).all()
    assert (wide[:, :630] == 0).all() and (wide[:, 630:] == 255).all()
    assert wide.shape == (LINE_HEIGHT, 644, 3)  # 630 px padded to 23 tokens
    assert prepare_line(np.zeros((28, 900, 3), np.uint8), stretch=1.5).shape[1] == MAX_WIDTH


def test_a_wider_cap_draws_a_long_line_at_its_own_aspect() -> None:
    crop = np.zeros((20, 1000, 3), np.uint8)  # 1,400 px at height 28: over the 1,120 px cap
    assert drawn_width(20, 1000, stretch=1.0) == MAX_WIDTH
    assert drawn_width(20, 1000, stretch=1.0, max_width=28 * 80) == 1400
    wide = prepare_line(crop, stretch=1.0, max_width=28 * 80)
    assert wide.shape == (LINE_HEIGHT, 1400, 3)  # 50 tokens, not squeezed
    assert (wide == 0).all()


def test_an_export_records_its_stretch_and_one_without_a_record_reads_at_1(tmp_path: Path) -> None:
    assert trained_stretch(tmp_path) == UNRECORDED_STRETCH == 1.0  # exports from before the record
    write_trained_stretch(tmp_path, 2.0)
    assert trained_stretch(tmp_path) == 2.0
