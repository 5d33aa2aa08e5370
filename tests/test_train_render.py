"""The line renderer and the model-input contract `prepare_line` (height 28, white padding to k*28 >= 224)."""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN, cut_box
from tests.rendering import CJK_FONT, LATIN_FONT, MONO_FONT, link_fonts
from train.line_shapes import grey_edge_share, line_looks, line_shape
from train.pack import subset_latin
from train.render import (
    LINE_HEIGHT,
    LINE_STRETCH,
    MARKED_ZERO_SHARE,
    MAX_WIDTH,
    MIN_WIDTH,
    MORE_FACE_SHARE,
    MORE_FOLDER,
    FontInfo,
    LineRenderer,
    Shares,
    drawn_as_homoglyphs,
    load_fonts,
    made_for_chinese,
    prepare_line,
    zero_is_marked,
)
from train.text_source import common_chinese


@pytest.fixture(scope="module")
def fonts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MONO_FONT.exists():
        pytest.skip("fonts-dejavu-core is not installed")
    return link_fonts(tmp_path_factory.mktemp("fonts"), chinese=True)


@pytest.mark.parametrize(
    ("height", "width"), [(10, 30), (28, 100), (40, 400), (56, 700), (13, 170), (56, 800)]
)
def test_prepare_line_is_28_high_and_padded_white_to_a_multiple_of_28(height: int, width: int) -> None:
    crop = np.zeros((height, width), dtype=np.uint8)  # all ink: the padding is what stays white
    out = prepare_line(crop)
    assert out.dtype == np.uint8
    assert out.shape[0] == LINE_HEIGHT and out.shape[2] == 3
    assert out.shape[1] % 28 == 0 and MIN_WIDTH <= out.shape[1] <= MAX_WIDTH
    # The line at its aspect ratio times the stretch, squeezed to the 40-token cap where it is wider,
    # so that the shapes hold at whatever stretch the trainer defaults to.
    scaled = min(round(width * LINE_STRETCH * LINE_HEIGHT / height), MAX_WIDTH)
    assert (out[:, :scaled] < 128).all()
    assert (out[:, scaled + 1 :] == 255).all()  # white padding on the right only
    assert out.shape[1] == max(MIN_WIDTH, -(-scaled // 28) * 28)


def test_prepare_line_squeezes_long_lines_to_the_cap() -> None:
    crop = np.zeros((20, 2000, 3), dtype=np.uint8)
    out = prepare_line(crop)
    assert out.shape == (LINE_HEIGHT, MAX_WIDTH, 3)
    assert (out < 128).all()  # squeezed to fill the cap exactly, no padding


def test_renderer_is_deterministic_and_draws_ink(fonts: Path) -> None:
    infos = load_fonts(fonts)
    first = [LineRenderer(infos, 11).render(text) for text in ("TOTAL : RM12.50", "CASH  20.00")]
    again = [LineRenderer(infos, 11).render(text) for text in ("TOTAL : RM12.50", "CASH  20.00")]
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a, b)
    renderer = LineRenderer(infos, 12)
    for seed_text in ["INVOICE NO: 12345", "0123456789", "THANK YOU"] * 10:
        crop = renderer.render(seed_text)
        assert crop.ndim == 3 and crop.shape[2] == 3 and crop.dtype == np.uint8
        assert crop.shape[1] > crop.shape[0]  # a line: wider than high
        grey = crop.mean(axis=2)
        # Ink that stands out from the paper: darker (faded thermal included), or lighter on a dark band.
        assert max(np.median(grey) - grey.min(), grey.max() - np.median(grey)) > 20


@pytest.mark.parametrize(
    ("text", "drawn"),
    [
        ("12/03/2018 10:25", "12/O3/2O18 1O:25"),
        ("TOTAL 0.00", "T0TAL O.OO"),
        ("Mall, Level 4", "Ma11, Leve1 4"),
        # a code's zero beside a letter, a lone zero, and mixed fields keep their own glyphs
        ("SH01 POS01", "SH01 POS01"),
        ("0 X", "0 X"),
        ("A4 COLOR", "A4 C0L0R"),
    ],
)
def test_a_face_that_shares_glyphs_swaps_only_what_the_neighbours_decide(text: str, drawn: str) -> None:
    assert drawn_as_homoglyphs(text) == drawn


def test_some_lines_are_drawn_with_shared_glyphs_under_the_true_label(
    fonts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One face: which faces a line may be drawn in depends on whether it holds a zero.
    infos = [info for info in load_fonts(fonts) if info.path.name == "DejaVuSans.ttf"]
    monkeypatch.setattr("train.render.HOMOGLYPH_SHARE", 1.0)
    swapped = LineRenderer(infos, 5).render("DATE 2018")
    monkeypatch.setattr("train.render.HOMOGLYPH_SHARE", 0.0)
    as_letters = LineRenderer(infos, 5).render("DATE 2O18")
    as_digits = LineRenderer(infos, 5).render("DATE 2018")
    assert np.array_equal(swapped, as_letters)
    assert not np.array_equal(swapped, as_digits)


def test_chinese_lines_use_a_font_that_has_the_characters(fonts: Path) -> None:
    infos = load_fonts(fonts)
    if not any(info.cjk for info in infos):
        pytest.skip("fonts-wqy-microhei is not installed")
    renderer = LineRenderer(infos, 5)
    for _ in range(10):
        assert renderer.pick_font("合计：RM 12.00").cjk
    with pytest.raises(ValueError, match="no font covers"):
        LineRenderer([i for i in infos if not i.cjk], 5).pick_font("合计")


class _AlwaysClip:
    """A stand-in random source whose every margin clips one pixel off the box."""

    def random(self) -> float:
        return 0.0

    def choice(self, options: list[int]) -> int:
        return -1


def test_a_one_pixel_mark_clipped_on_both_sides_still_leaves_a_crop(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 1)
    renderer.rng = _AlwaysClip()  # type: ignore[assignment]
    size, paper = 20, 250.0
    image = np.full((size * 4, 100), paper, np.float32)
    image[size + 4 : size * 2, 50] = 0.0  # a '|' one pixel wide in the middle band
    crop = renderer._crop_box(image, paper, size)
    assert crop.shape[0] >= 2 and crop.shape[1] >= 2
    assert (crop < paper - 30).any()  # the mark is inside the crop


def test_a_loose_box_takes_in_part_of_the_lines_above_and_below(fonts: Path) -> None:
    size, paper = 20, 250.0
    image = np.full((size * 4, 100), paper, np.float32)
    image[2:12, 20:80] = 0.0  # the line above
    image[size + 4 : size * 2, 50] = 0.0  # the line read, in the middle band
    image[48:60, 20:80] = 0.0  # the line below
    renderer = LineRenderer(load_fonts(fonts), 1)
    # Every detector slack 3 px (0.9: a drawn slack, the middle of 0-6), a loose one 16 (0.825 x 20);
    # the last draw (0.0) keeps the box as it is, without the appliance's margin.
    renderer.rng = _Scripted(0.9, 0.9, 0.9, 0.9, 0.0)  # type: ignore[assignment]
    tight = renderer._crop_box(image, paper, size)
    renderer.rng = _Scripted(0.9, 0.9, 0.9, 0.9, 0.0)  # type: ignore[assignment]
    loose = renderer._crop_box(image, paper, size, loose=True)
    assert tight.shape[0] == (size * 2 + 3) - (size + 4 - 3)  # the middle line and its slack only
    assert (tight[:, :] < paper - 30).any(axis=1).sum() == size - 4
    assert loose.shape[0] == (size * 2 + 16) - (size + 4 - 16)
    inked_rows = np.where((loose < paper - 30).any(axis=1))[0]
    assert inked_rows[0] == 0 and inked_rows[-1] == loose.shape[0] - 1  # both neighbours reach in


def test_most_lines_are_cut_with_the_margin_the_appliance_gives_a_line_reader(fonts: Path) -> None:
    size, paper = 20, 250.0
    image = np.full((size * 4, 100), paper, np.float32)
    image[size + 4 : size * 2, 40:60] = 0.0
    renderer = LineRenderer(load_fonts(fonts), 1)
    renderer.rng = _Scripted(0.9, 0.9, 0.9, 0.9, 0.9)  # type: ignore[assignment]
    crop = renderer._crop_box(image, paper, size)
    # The detector's box (the ink's, 3 px slack) cut as the cascade cuts it for the reader.
    box = (40 - 3, size + 4 - 3, 60 + 3, size * 2 + 3)
    assert np.array_equal(crop, cut_box(image, box, RECOGNISER_LINE_MARGIN))
    assert crop.shape[0] > (box[3] - box[1]) * (1 + RECOGNISER_LINE_MARGIN)
    # Over many renders the ink rarely fills a crop's height: only the lines cut tight reach it.
    renderer = LineRenderer(load_fonts(fonts), 3)
    shares = [line_shape(renderer.render("TOTAL RM 12.50"), "TOTAL RM 12.50")[0] for _ in range(200)]
    full = sum(share > 0.95 for share in shares)
    assert 10 <= full <= 45  # TIGHT_CROP_SHARE of 200 is 30 (57 when half were cut tight)


def test_light_print_on_a_dark_band_is_boxed_like_dark_print(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 1)
    renderer.rng = _AlwaysClip()  # type: ignore[assignment]
    size, paper = 20, 40.0
    image = np.full((size * 4, 100), paper, np.float32)
    image[size + 4 : size * 2, 40:60] = 230.0
    crop = renderer._crop_box(image, paper, size)
    # The box is the mark's, one pixel clipped on each side, not the whole canvas.
    assert crop.shape == (size - 4 - 2, 20 - 2)
    assert (crop > paper + 30).all()


def test_some_lines_come_out_light_on_dark(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 5)
    backgrounds = [float(np.median(renderer.render("TOTAL 12.50"))) for _ in range(300)]
    dark = sum(1 for value in backgrounds if value < 110)
    assert 1 <= dark <= 30  # about 3% of lines


def test_one_text_in_one_font_comes_out_narrow_and_wide(fonts: Path) -> None:
    # Receipt printers' condensed faces are narrower than any Debian font: the renderer squeezes
    # and stretches lines so that a reader trained on them meets every glyph width.
    mono = [info for info in load_fonts(fonts) if info.path.name == "DejaVuSansMono.ttf"]
    renderer = LineRenderer(mono, 7)
    text = "TOTAL 12.50"
    widths = [line_shape(renderer.render(text), text)[1] for _ in range(100)]
    narrow, wide = np.percentile(widths, [10, 90])
    # Without the squeeze the narrowest tenth came out at 0.53 of the height a character, and the
    # widest tenth 1.5 times as wide as the narrowest.
    assert narrow < 0.42
    assert wide / narrow > 1.9


class _Scripted:
    """A stand-in random source: `random()` gives the scripted values in turn, `uniform` the middle."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)

    def uniform(self, low: float, high: float) -> float:
        return (low + high) / 2


def _ink_of(fonts: Path, text: str, *draws: float) -> np.ndarray:
    """The ink of `text` drawn with scripted draws: rule?, [its kind], barcode?, slant?, in that order."""
    from train.render import _font

    mono = next(info for info in load_fonts(fonts) if info.path.name == "DejaVuSansMono.ttf")
    renderer = LineRenderer([mono], 1)
    renderer.rng = _Scripted(*draws)  # type: ignore[assignment]
    return renderer._ink_mask(text, _font(mono.path, mono.index, 30), 30, 0.0, None)


def test_an_underline_runs_under_the_whole_text(fonts: Path) -> None:
    # Draws: a rule (0.0 < 0.15), of the underline kind (0.1 < 0.6), no slant (0.99).
    ruled = _ink_of(fonts, "TAX (RM)", 0.0, 0.1, 0.99, 0.99) > 0.5
    plain = _ink_of(fonts, "TAX (RM)", 0.99, 0.99, 0.99) > 0.5
    text_rows = np.where(plain.any(axis=1))[0]
    text_cols = np.where(plain.any(axis=0))[0]
    text_width = text_cols[-1] - text_cols[0] + 1
    below = ruled[text_rows[-1] + 1 :]
    assert below.sum(axis=1).max() >= text_width  # one row as wide as the text, under it
    assert not plain[text_rows[-1] + 1 :].any()


def test_a_frame_closes_around_the_text(fonts: Path) -> None:
    framed = _ink_of(fonts, "12.50", 0.0, 0.9, 0.99, 0.99) > 0.5
    plain = _ink_of(fonts, "12.50", 0.99, 0.99, 0.99) > 0.5
    rows, cols = np.where(plain)
    # Ink above, below, left and right of every glyph: the four sides of the box.
    assert framed[: rows.min()].any() and framed[rows.max() + 1 :].any()
    assert framed[:, : cols.min()].any() and framed[:, cols.max() + 1 :].any()


def test_a_slanted_line_leans_right(fonts: Path) -> None:
    upright = _ink_of(fonts, "|", 0.99, 0.99, 0.99) > 0.5
    slanted = _ink_of(fonts, "|", 0.99, 0.99, 0.0) > 0.5  # no rule, no barcode, a slant

    def lean(ink: np.ndarray) -> float:
        rows = np.where(ink.any(axis=1))[0]
        top, bottom = ink[rows[0] + 2], ink[rows[-1] - 2]
        return float(np.where(top)[0].mean() - np.where(bottom)[0].mean())

    assert abs(lean(upright)) < 1.0
    assert lean(slanted) > 5.0  # the top of the bar is right of its foot


def test_faint_marks_pale_the_dots_and_keep_the_letters(fonts: Path) -> None:
    # Thermal receipts print ':' and '.' paler than the letters: the renderer fades small marks.
    ink = _ink_of(fonts, "TEL : 12.55", 0.99, 0.99, 0.99)  # no 0: DejaVu Sans Mono dots its zero
    faint = LineRenderer._faint_marks(ink, 30, 0.3)
    strokes = ink > 0.5
    _, labels, stats, _ = cv2.connectedComponentsWithStats(strokes.astype(np.uint8))
    areas = stats[1:, 4]
    dots = [i + 1 for i, area in enumerate(areas) if area < 0.04 * 30 * 30]
    letters = [i + 1 for i, area in enumerate(areas) if area >= 0.04 * 30 * 30]
    assert len(dots) == 3  # the colon's two dots and the decimal point
    assert len(letters) == 7  # T, E, L, 1, 2, 5, 5
    for label in dots:
        assert faint[labels == label].max() <= 0.3 + 1e-6
    for label in letters:
        assert np.array_equal(faint[labels == label], ink[labels == label])
    assert (faint <= ink).all()


def test_a_dead_pin_leaves_a_row_without_ink_through_every_letter(fonts: Path) -> None:
    size = 30
    ink = _ink_of(fonts, "HEAL 12", 0.9, 0.9, 0.9)  # no rule, barcode or slant
    renderer = LineRenderer(load_fonts(fonts), 1)
    renderer.rng = _Scripted(0.0, 0.1)  # type: ignore[assignment]  # one pin (< 0.7), at the top (< 0.5)
    rows = np.where((ink > 0.5).any(axis=1))[0]
    dead = renderer._dead_pins(ink, size)
    thickness = round(size * ((0.05 + 0.12) / 2))  # _Scripted.uniform gives the middle
    assert not (dead[rows[0] : rows[0] + thickness] > 0.5).any()  # the top rows are blank
    assert (ink[rows[0] : rows[0] + thickness] > 0.5).any()  # where the letters had ink
    assert (dead[rows[0] + thickness :] > 0.5).sum() == (ink[rows[0] + thickness :] > 0.5).sum()
    # Every letter keeps its ink below the dead row: nearly every inked column still holds ink.
    assert (dead > 0.5).any(axis=0).sum() > 0.9 * (ink > 0.5).any(axis=0).sum()


def test_a_dead_thermal_dot_leaves_columns_without_ink_down_the_whole_line(fonts: Path) -> None:
    size = 30
    ink = _ink_of(fonts, "Bacon Homemade", 0.9, 0.9, 0.9)
    renderer = LineRenderer(load_fonts(fonts), 3)
    dead = renderer._dead_dots(ink, size)
    inked = (ink > 0.5).any(axis=0)
    blank = inked & ~(dead > 0.5).any(axis=0)
    assert blank.any()  # some columns that held ink hold none now
    cut = ~np.isclose(dead, ink).all(axis=0)
    assert np.array_equal(cut, cut & ~(dead > 0).any(axis=0))  # a cut column is blank top to bottom
    # Narrow cuts: most of the line's inked columns keep their ink.
    assert (dead > 0.5).any(axis=0).sum() > 0.6 * inked.sum()


def test_crumpled_paper_bends_the_line_up_and_down_smoothly_and_keeps_its_ink(fonts: Path) -> None:
    size = 30
    bar = np.zeros((size * 3, 900), np.float32)
    bar[40:44, 30:870] = 1.0  # a rule across the canvas, four rows thick
    renderer = LineRenderer(load_fonts(fonts), 1)
    # `uniform` gives the middle: a wave of 0.08 x size, a period of 10 x size, no drift.
    renderer.rng = _Scripted()  # type: ignore[assignment]
    bent = renderer._crumple(bar, size)
    columns = bent[:, 60:840]
    rows = np.arange(bent.shape[0], dtype=np.float32)[:, None]
    centres = (rows * columns).sum(axis=0) / columns.sum(axis=0)
    # Up and down by the wave's height either way, where the flat rule's centre never moved.
    assert 0.14 * size < np.ptp(centres) <= 0.17 * size
    assert np.abs(np.diff(centres)).max() < 0.2  # smoothly: a bend, not a step
    assert np.allclose(columns.sum(axis=0), 4.0, atol=0.05)  # each column keeps its ink


@pytest.mark.parametrize("kind", [0.0, 0.9])  # a ring (< 0.6), a tick
def test_a_pen_mark_crosses_the_print_within_its_columns_and_keeps_every_stroke(
    fonts: Path, kind: float
) -> None:
    size = 30
    ink = _ink_of(fonts, "PLEASE COME AGAIN", 0.9, 0.9, 0.9)  # no rule, barcode or slant
    renderer = LineRenderer(load_fonts(fonts), 1)
    renderer.rng = _Scripted(kind)  # type: ignore[assignment]
    marked = renderer._pen_stroke(ink, size)
    assert marked.shape == ink.shape
    assert (marked >= ink).all()  # the print keeps all its ink
    added = (marked - ink) > 0.3
    assert added.sum() > size  # a mark, not a speck
    rows = np.where((ink > 0.5).any(axis=1))[0]
    cols = np.where((ink > 0.5).any(axis=0))[0]
    # It crosses the print's rows and reaches past them, above or below, as a ring round a word
    # or a tick's long stroke does.
    assert added[rows[0] : rows[-1] + 1].any(axis=0).sum() > size / 2
    assert added[: rows[0]].any() or added[rows[-1] + 1 :].any()
    # Nothing beside the print: the box a detector draws round the line stays the print's.
    marked_cols = np.where(added.any(axis=0))[0]
    assert marked_cols[0] >= cols[0] - size * 0.2 and marked_cols[-1] <= cols[-1] + size * 0.2


def _count_calls(monkeypatch: pytest.MonkeyPatch, method: str) -> list[None]:
    """A list that grows by one each time LineRenderer's `method` is called (it still runs)."""
    calls: list[None] = []
    original = getattr(LineRenderer, method)

    def counted(self: LineRenderer, *args: Any) -> Any:
        calls.append(None)
        return original(self, *args)

    monkeypatch.setattr(LineRenderer, method, counted)
    return calls


@pytest.mark.parametrize(
    ("method", "share_name", "share", "called"),
    [
        ("_pen_stroke", "pen_share", 0.0, 0),
        ("_pen_stroke", "pen_share", 1.0, 12),
        ("_scanner_levels", "levels_share", 0.0, 0),
        ("_scanner_levels", "levels_share", 1.0, 12),
        ("_bilevel_scan", "bilevel_share", 0.0, 0),
        ("_bilevel_scan", "bilevel_share", 1.0, 12),
    ],
)
def test_a_share_is_the_share_of_lines_given_that_step(
    fonts: Path, monkeypatch: pytest.MonkeyPatch, method: str, share_name: str, share: float, called: int
) -> None:
    # Pen marks (`_pen_stroke`), a scanner's levels (`_scanner_levels`) and one-bit scans
    # (`_bilevel_scan`) each on its share of lines.
    calls = _count_calls(monkeypatch, method)
    renderer = LineRenderer(load_fonts(fonts), 4, **{share_name: share})
    for _ in range(12):
        renderer.render("TOTAL : RM12.50")
    assert len(calls) == called


def test_shares_are_the_renderers_own_keyword_arguments(fonts: Path) -> None:
    # A trainer's data loader builds its renderers with `**asdict(shares)`.
    renderer = LineRenderer(
        load_fonts(fonts),
        1,
        **asdict(Shares(pen_share=0.1, more_share=0.2, levels_share=0.3, bilevel_share=0.4)),
    )
    assert (renderer.pen_share, renderer.more_share, renderer.levels_share, renderer.bilevel_share) == (
        0.1,
        0.2,
        0.3,
        0.4,
    )
    default = LineRenderer(load_fonts(fonts), 1)
    assert asdict(Shares()) == {
        "pen_share": default.pen_share,
        "more_share": default.more_share,
        "levels_share": default.levels_share,
        "bilevel_share": default.bilevel_share,
    }


def test_scanner_levels_clip_the_paper_to_white_and_widen_the_contrast(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 2)
    image = np.full((30, 120), 200.0, np.float32)
    image[10:20, 10:110] = 80.0  # a bar of grey ink on grey paper
    image += np.random.default_rng(0).normal(0, 4, image.shape).astype(np.float32)
    for _ in range(20):
        levelled = np.clip(renderer._scanner_levels(image), 0, 255)
        paper, ink = levelled[:5], levelled[12:18, 20:100]
        # The white point sits at or under the paper's upper grain: it reaches white, much of it clipped.
        assert np.median(paper) >= 250 and (paper >= 255).mean() > 0.3
        assert np.median(paper) - np.median(ink) > 200 - 80


def test_scanner_levels_leave_light_print_on_a_dark_band_alone(fonts: Path) -> None:
    band = np.full((30, 120), 40.0, np.float32)
    band[10:20, 10:40] = 230.0  # a little light print: most of the crop is the dark band
    assert np.array_equal(LineRenderer(load_fonts(fonts), 2)._scanner_levels(band), band)


def test_lines_given_a_scanners_levels_reach_the_model_on_white_paper(fonts: Path) -> None:
    def paper_levels(share: float) -> list[float]:
        renderer = LineRenderer(load_fonts(fonts), 9, levels_share=share)
        lines = [renderer.render(f"CASH {n}.00 THANK YOU") for n in range(40)]
        return [line_looks(line)[0] for line in lines]

    # The renderer's own paper is 170-255 and grained; a scanner's levels take most of it to white.
    assert np.median(paper_levels(0.0)) < 240
    assert np.median(paper_levels(1.0)) >= 250


def test_a_bilevel_scan_leaves_every_pixel_paper_white_or_ink_black(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 2)
    image = np.full((30, 120), 200.0, np.float32)
    image[10:20, 10:110] = 80.0  # a bar of grey ink on grey paper, its edges blurred and noisy
    image = cv2.GaussianBlur(image, (0, 0), 1.0)
    image += np.random.default_rng(0).normal(0, 4, image.shape).astype(np.float32)
    for _ in range(20):
        bits = renderer._bilevel_scan(image)
        assert bits.shape == image.shape
        assert set(np.unique(bits)) <= {0.0, 255.0}
        # The bar is ink and the paper round it white, whatever the threshold and resolution.
        assert (bits[13:17, 20:100] == 0).all() and (bits[:5] == 255).all() and (bits[25:] == 255).all()


def test_a_bilevel_scan_leaves_light_print_on_a_dark_band_alone(fonts: Path) -> None:
    band = np.full((30, 120), 40.0, np.float32)
    band[10:20, 10:40] = 230.0
    assert np.array_equal(LineRenderer(load_fonts(fonts), 2)._bilevel_scan(band), band)


def test_lines_scanned_one_bit_a_pixel_reach_the_reader_with_hard_edges(fonts: Path) -> None:
    def edge_shares(share: float) -> list[float]:
        renderer = LineRenderer(load_fonts(fonts), 9, bilevel_share=share)
        lines = [renderer.render(f"CASH {n}.00 THANK YOU") for n in range(40)]
        return [edge for line in lines if (edge := grey_edge_share(line)) is not None]

    # Anti-aliased glyphs, blur and resampling leave grey on a stroke's edges; a one-bit scan
    # none, unless a JPEG after it rings (part of the lines).
    assert np.percentile(edge_shares(0.0), 10) > 0.15
    assert np.median(edge_shares(1.0)) < 0.1


@pytest.mark.parametrize("share_name", ["pen_share", "bilevel_share"])
def test_pen_marks_and_one_bit_scans_are_off_by_default(fonts: Path, share_name: str) -> None:
    # Runs with pen marks read the receipts worse, runs with one-bit scans no better
    # (train/README.md): a renderer built without a share draws exactly what one told to draw the
    # step on no line draws.
    infos = load_fonts(fonts)
    plain = [LineRenderer(infos, 8).render(f"CASH {n}.00") for n in range(20)]
    off = [LineRenderer(infos, 8, **{share_name: 0.0}).render(f"CASH {n}.00") for n in range(20)]
    assert all(np.array_equal(a, b) for a, b in zip(plain, off, strict=True))


class _TickFirst:
    """A random source whose first `random()` asks `_pen_stroke` for a tick; the rest are drawn."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.first = True

    def random(self) -> float:
        if self.first:
            self.first = False
            return 0.9
        return self.rng.random()

    def uniform(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high)


def _longest_run(row: np.ndarray) -> int:
    edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(np.int8), [0]))))
    return int((edges[1::2] - edges[::2]).max(initial=0))  # each run's end less its start


@pytest.mark.parametrize("seed", range(40))
def test_a_pen_tick_is_steep_so_it_never_lies_flat_like_a_hyphen(fonts: Path, seed: int) -> None:
    # A flat stroke in the print's ink looks like a hyphen; a reader trained on strokes over the
    # print that are not there learns to drop hyphens.
    size = 30
    blank = np.zeros((4 * size, 30 * size), np.float32)
    renderer = LineRenderer(load_fonts(fonts), seed)
    renderer.rng = _TickFirst(random.Random(seed))  # type: ignore[assignment]
    marks = renderer._pen_stroke(blank, size)
    assert (marks > 0.3).sum() > size
    # Each row of the mark is a short run: a thick stroke at a steep angle, two of them where the
    # tick turns. A stroke drawn flat across the print ran a size and more in most draws.
    assert max(_longest_run(row) for row in marks > 0.3) < 0.45 * size


def test_a_barcode_runs_above_or_below_the_text_as_many_bars(fonts: Path) -> None:
    from PIL import Image, ImageDraw

    from train.render import _font

    mono = next(info for info in load_fonts(fonts) if info.path.name == "DejaVuSansMono.ttf")
    size = 30
    font = _font(mono.path, mono.index, size)
    sides = set()
    for seed in range(12):
        canvas = Image.new("L", (400, size * 4), 0)
        draw = ImageDraw.Draw(canvas)
        x0, y0, x1, y1 = (round(v) for v in draw.textbbox((40, size + size // 2), "9556123456789", font=font))
        box = (x0, y0, x1, y1)
        renderer = LineRenderer([mono], seed)
        renderer._barcode(draw, box, size)
        ink = np.asarray(canvas) > 0
        above, below = ink[: box[1]], ink[box[3] + 1 :]
        assert above.any() != below.any()  # one side only; the text itself was not drawn
        bars = above if above.any() else below
        sides.add("above" if above.any() else "below")
        row = bars[np.where(bars.any(axis=1))[0][0]]
        starts = np.flatnonzero(row[1:] & ~row[:-1])
        assert len(starts) >= 10  # many bars, not a rule
        columns = np.flatnonzero(bars.any(axis=0))
        assert columns[0] <= box[0] and columns[-1] >= box[2] - size * 0.3  # under or over all digits
    assert sides == {"above", "below"}


def test_bleeding_ink_fills_the_counters_in_flecks_and_covers_every_stroke(fonts: Path) -> None:
    size = 30
    ink = _ink_of(fonts, "Total Amt 80", 0.9, 0.9, 0.9)  # no rule, barcode or slant
    bled = LineRenderer(load_fonts(fonts), 3)._bleed(ink, size)
    assert bled.shape == ink.shape
    assert bled.min() >= 0.0 and bled.max() <= 1.0
    strokes, spread = ink > 0.5, bled > 0.05
    assert spread[strokes].all()  # no stroke loses its ink
    assert spread.sum() > 1.5 * strokes.sum()  # the strokes spread into the counters round them
    # Mottled, not solid: the spread ink is lighter in places than the strokes it came from.
    assert bled[strokes].min() < 0.75 < bled[strokes].max()


def test_a_face_is_chinese_when_it_has_nearly_all_the_common_characters() -> None:
    common = frozenset(ord(char) for char in common_chinese())
    latin = frozenset(range(0x20, 0x7F))
    assert made_for_chinese(common | latin)
    some = frozenset(sorted(common)[: int(len(common) * 0.64)])  # a Japanese face's share
    assert not made_for_chinese(some | latin)
    assert not made_for_chinese(latin)


@pytest.mark.parametrize(
    ("text", "small"),
    [("is not made within the prescribed", True), ("Keep The Invoice", True), ("TOTAL SALES (RM)", False)],
)
def test_the_lines_round_a_line_are_mostly_in_its_case(fonts: Path, text: str, small: bool) -> None:
    # A paragraph of terms in small letters has small letters above and below, whose descenders
    # reach into the crop; a heading in capitals has capitals round it.
    mono = next(info for info in load_fonts(fonts) if info.path.name == "DejaVuSansMono.ttf")
    renderer = LineRenderer([mono], 5)
    fillers = [renderer.neighbour_text(text, mono) for _ in range(200)]
    letters = [char for filler in fillers for char in filler if char.isalpha()]
    share_small = sum(char.islower() for char in letters) / len(letters)
    assert (share_small > 0.7) if small else (share_small < 0.3)
    assert all(len(filler) == len(text) + 8 for filler in fillers)


def test_neighbours_are_drawn_only_in_characters_the_face_has(fonts: Path) -> None:
    mono = next(info for info in load_fonts(fonts) if info.path.name == "DejaVuSansMono.ttf")
    capitals_only = FontInfo(mono.path, mono.index, frozenset(ord(c) for c in "ABCDEFGH0123"), cjk=False)
    renderer = LineRenderer([capitals_only], 5)
    fillers = "".join(renderer.neighbour_text("small letters here", capitals_only) for _ in range(50))
    assert set(fillers) <= set("ABCDEFGH0123 ")


def test_a_face_whose_zero_has_a_dot_or_slash_is_told_from_one_with_a_plain_zero(fonts: Path) -> None:
    faces = {info.path.name: info for info in load_fonts(fonts)}
    assert zero_is_marked(MONO_FONT)  # DejaVu Sans Mono's dotted zero
    assert faces["DejaVuSansMono.ttf"].marked_zero
    assert not zero_is_marked(LATIN_FONT)  # DejaVu Sans's plain zero
    assert not faces["DejaVuSans.ttf"].marked_zero


def test_lines_with_a_zero_are_seldom_drawn_in_a_face_whose_zero_is_marked(fonts: Path) -> None:
    latin = [info for info in load_fonts(fonts) if not info.cjk]  # one marked zero, one plain
    renderer = LineRenderer(latin, 9)
    with_zero = [renderer.pick_font("RM 0.80").marked_zero for _ in range(2000)]
    without = [renderer.pick_font("RM 8.88").marked_zero for _ in range(2000)]
    assert sum(with_zero) / len(with_zero) == pytest.approx(MARKED_ZERO_SHARE, abs=0.03)
    assert sum(without) / len(without) == pytest.approx(0.5, abs=0.05)  # any face, as before


@pytest.fixture(scope="module")
def fonts_with_more(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fonts folder with a Latin cut of DejaVu Sans in `more/`, as train.pack writes it."""
    if not MONO_FONT.exists():
        pytest.skip("fonts-dejavu-core is not installed")
    folder = link_fonts(tmp_path_factory.mktemp("fonts"), chinese=True)
    (folder / MORE_FOLDER).mkdir()
    subset_latin(LATIN_FONT, folder / MORE_FOLDER / "DejaVuSansLatin.ttf")
    return folder


def test_faces_in_the_more_folder_are_marked_as_such(fonts_with_more: Path) -> None:
    more = {info.path.name for info in load_fonts(fonts_with_more) if info.more}
    assert more == {"DejaVuSansLatin.ttf"}


@pytest.mark.parametrize("share", [MORE_FACE_SHARE, 0.35, 1.0])
def test_more_faces_draw_their_share_of_the_latin_lines_and_no_chinese_one(
    fonts_with_more: Path, share: float
) -> None:
    renderer = LineRenderer(load_fonts(fonts_with_more), 3, more_share=share)
    latin = [renderer.pick_font("CASH 8.88").more for _ in range(3000)]
    # The 15% of Latin lines that may go to any face, the Chinese one too, never go to a more face.
    assert sum(latin) / len(latin) == pytest.approx(0.85 * share, abs=0.03)
    if CJK_FONT.exists():
        assert not any(renderer.pick_font("合计 8.88").more for _ in range(200))


def test_without_a_more_folder_every_latin_line_goes_to_the_receipt_faces(fonts: Path) -> None:
    renderer = LineRenderer(load_fonts(fonts), 3, more_share=1.0)
    assert {renderer.pick_font("CASH 8.88").path.name for _ in range(200)} >= {
        MONO_FONT.name,
        LATIN_FONT.name,
    }


def test_at_a_share_of_0_a_more_folder_changes_no_line(fonts: Path, fonts_with_more: Path) -> None:
    texts = ["CASH 8.88", "TOTAL : RM12.50", "合计 8.88", "Thank you"] * 3
    without = LineRenderer(load_fonts(fonts), 6, more_share=0.0)
    beside = LineRenderer(load_fonts(fonts_with_more), 6, more_share=0.0)
    for text in texts:
        assert np.array_equal(without.render(text), beside.render(text))
