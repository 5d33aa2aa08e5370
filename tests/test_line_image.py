"""The image a line-reading VLM takes (engines/vlm_gguf/line_image.py): 28 px high, whole tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appliance.engines.vlm_gguf.line_image import (
    LINE_HEIGHT,
    LINE_INPUT_FILE,
    MAX_WIDTH,
    MIN_WIDTH,
    UNRECORDED_STRETCH,
    LineInput,
    drawn_width,
    level_line,
    prepare_line,
)

PLAIN = LineInput(stretch=1.0)


@pytest.mark.parametrize("channels", [None, 3, 4])
def test_grey_colour_and_alpha_crops_come_back_three_channels(channels: int | None) -> None:
    shape = (20, 200) if channels is None else (20, 200, channels)
    out = prepare_line(np.zeros(shape, np.uint8), PLAIN)
    assert out.shape == (LINE_HEIGHT, 280, 3)


def test_the_channel_order_is_kept() -> None:
    crop = np.zeros((28, 280, 3), np.uint8)
    crop[:, :, 0] = 200  # blue in BGR, red in RGB: either way it stays in channel 0
    out = prepare_line(crop)
    assert (out[:, :, 0] == 200).all() and (out[:, :, 1:] == 0).all()


def test_a_prepared_line_is_prepared_again_unchanged() -> None:
    crop = np.random.default_rng(1).integers(0, 256, (33, 410, 3), dtype=np.uint8)
    once = prepare_line(crop, PLAIN)
    assert np.array_equal(prepare_line(once, PLAIN), once)


def test_short_and_long_lines_stay_within_8_and_40_tokens() -> None:
    assert prepare_line(np.zeros((28, 10, 3), np.uint8)).shape[1] == MIN_WIDTH
    assert prepare_line(np.zeros((28, 5000, 3), np.uint8)).shape[1] == MAX_WIDTH


def test_a_stretch_widens_the_line_by_its_factor_within_40_tokens() -> None:
    crop = np.zeros((20, 300, 3), np.uint8)  # 420 px wide at height 28, ink to the right edge
    plain = prepare_line(crop, PLAIN)
    wide = prepare_line(crop, LineInput(stretch=1.5))
    assert (plain[:, :420] == 0).all() and (plain[:, 420:] == 255).all()
    assert (wide[:, :630] == 0).all() and (wide[:, 630:] == 255).all()
    assert wide.shape == (LINE_HEIGHT, 644, 3)  # 630 px padded to 23 tokens
    assert prepare_line(np.zeros((28, 900, 3), np.uint8), LineInput(stretch=1.5)).shape[1] == MAX_WIDTH


def test_a_wider_cap_draws_a_long_line_at_its_own_aspect() -> None:
    crop = np.zeros((20, 1000, 3), np.uint8)  # 1,400 px at height 28: over the 1,120 px cap
    assert drawn_width(20, 1000, PLAIN) == MAX_WIDTH
    assert drawn_width(20, 1000, PLAIN, max_width=28 * 80) == 1400
    wide = prepare_line(crop, PLAIN, max_width=28 * 80)
    assert wide.shape == (LINE_HEIGHT, 1400, 3)  # 50 tokens, not squeezed
    assert (wide == 0).all()


def test_an_export_records_its_stretch_and_one_without_a_record_reads_at_1(tmp_path: Path) -> None:
    before = LineInput.of_export(tmp_path)  # exports from before the record
    assert before == LineInput(stretch=UNRECORDED_STRETCH) and UNRECORDED_STRETCH == 1.0
    LineInput(stretch=2.0).write(tmp_path)
    assert LineInput.of_export(tmp_path).stretch == 2.0


def test_a_taller_line_gives_each_glyph_twice_the_rows_at_the_same_width() -> None:
    crop = np.zeros((20, 300, 3), np.uint8)  # ink to the right edge
    usual = prepare_line(crop, LineInput(stretch=3.0))
    tall = prepare_line(crop, LineInput(stretch=1.5, height=56))
    assert usual.shape == (LINE_HEIGHT, 1120, 3) and tall.shape == (56, 1120, 3)
    small = np.zeros((20, 110, 3), np.uint8)  # 462 px at height 28 and stretch 3, and at 56 and 1.5
    assert drawn_width(20, 110, LineInput(stretch=3.0)) == 462
    assert drawn_width(20, 110, LineInput(stretch=1.5, height=56)) == 462
    tall_small = prepare_line(small, LineInput(stretch=1.5, height=56))
    assert tall_small.shape == (56, 476, 3)  # 462 px padded to 17 columns of 28 px
    assert (tall_small[:, :462] == 0).all() and (tall_small[:, 462:] == 255).all()


def test_a_height_that_is_not_whole_rows_of_tokens_or_a_stretch_below_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 28"):
        LineInput(height=42)
    with pytest.raises(ValueError, match="multiple of 28"):
        LineInput(height=0)
    with pytest.raises(ValueError, match="positive"):
        LineInput(stretch=-1.0)


def test_an_export_records_a_height_only_when_it_is_not_the_usual_one(tmp_path: Path) -> None:
    assert LineInput.of_export(tmp_path).height == LINE_HEIGHT  # no record at all
    LineInput(stretch=3.0).write(tmp_path)
    assert "height" not in (tmp_path / LINE_INPUT_FILE).read_text()
    assert LineInput.of_export(tmp_path).height == LINE_HEIGHT
    LineInput(stretch=1.5, height=56).write(tmp_path)
    assert LineInput.of_export(tmp_path) == LineInput(stretch=1.5, height=56)


def _faded_line() -> np.ndarray:
    """A grey-paper line (200) with faded ink (120) in its middle third, a speck (0) and a glare (255)."""
    line = np.full((28, 300, 3), 200, np.uint8)
    line[6:22, 100:200] = 120
    line[0, 0] = 0
    line[0, 1] = 255
    return line


def test_levelling_maps_a_lines_ink_and_paper_to_the_levels_asked() -> None:
    out = level_line(_faded_line(), 54, 255)
    assert (out[6:22, 100:200] == 54).all()  # the faded ink, as dark as asked
    assert (out[20:, 250:] == 255).all()  # the grey paper, white
    assert out[0, 0].tolist() == [0, 0, 0]  # a speck darker than the ink is clipped, not the ink's level


def test_levelling_leaves_a_blank_line_and_the_channel_order_alone() -> None:
    blank = np.full((28, 300, 3), 230, np.uint8)
    blank[5, 5] = 226  # a few grey levels of noise are no print
    assert np.array_equal(level_line(blank, 54, 255), blank)
    coloured = _faded_line()
    coloured[:, :, 0] = 10  # one channel darker throughout: the grey the percentiles come from shifts
    out = level_line(coloured, 54, 255)
    assert (out[1:, :, 0] < out[1:, :, 1]).all()  # channels are mapped alike, so their order shows


def test_a_levelled_line_keeps_its_white_padding_white() -> None:
    out = prepare_line(_faded_line(), LineInput(stretch=1.0, levels=(54, 255)))
    plain = prepare_line(_faded_line(), PLAIN)
    assert out.shape == plain.shape == (LINE_HEIGHT, 308, 3)
    assert (out[:, 300:] == 255).all()
    assert out[10, 150].tolist() == [54, 54, 54] and plain[10, 150].tolist() == [120, 120, 120]


def test_an_export_records_its_levels_only_when_its_lines_were_levelled(tmp_path: Path) -> None:
    LineInput(stretch=3.0).write(tmp_path)
    assert LineInput.of_export(tmp_path).levels is None
    assert "levels" not in (tmp_path / LINE_INPUT_FILE).read_text()
    LineInput(stretch=3.0, levels=(54, 255)).write(tmp_path)
    assert LineInput.of_export(tmp_path) == LineInput(stretch=3.0, levels=(54, 255))
