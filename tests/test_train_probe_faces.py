"""Clean probe lines: each string drawn black on white in each face that covers it, as the model takes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.rendering import MONO_FONT, link_fonts
from train.probe_faces import TEXT_SETS, draw_clean, misreads, probe_lines
from train.render import LINE_HEIGHT, LineInput, load_fonts


@pytest.fixture(scope="module")
def fonts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MONO_FONT.exists():
        pytest.skip("fonts-dejavu-core is not installed")
    return link_fonts(tmp_path_factory.mktemp("fonts"), chinese=False)


def test_a_string_is_drawn_black_on_white_with_the_margin_round_its_ink(fonts: Path) -> None:
    info = load_fonts(fonts)[0]
    image = draw_clean("0.00", info, 30, 0.2)
    assert image.dtype == np.uint8 and image.shape[2] == 3
    ink = np.where((image[:, :, 0] < 128).any(axis=1))[0]
    columns = np.where((image[:, :, 0] < 128).any(axis=0))[0]
    height = ink[-1] - ink[0] + 1
    pad = round(height * 0.2)
    assert abs(int(ink[0]) - pad) <= 1 and abs(image.shape[0] - 1 - int(ink[-1]) - pad) <= 1
    assert abs(int(columns[0]) - pad) <= 2  # the same white on the left (antialiasing aside)
    assert image.min() < 30 and image.max() == 255


def test_each_string_in_each_face_that_covers_it(fonts: Path) -> None:
    infos = load_fonts(fonts)
    lines = probe_lines(infos, ["0.00", "合计"], 30, 0.2)
    assert sorted((face, text) for face, text, _ in lines) == [
        ("DejaVuSans.ttf", "0.00"),
        ("DejaVuSansMono.ttf", "0.00"),
    ]  # DejaVu has no Chinese: that string is left out, not drawn as boxes
    assert all(image.shape[0] == LINE_HEIGHT for _, _, image in lines)


def test_strings_are_drawn_as_tall_as_the_model_reads_them(fonts: Path) -> None:
    usual = probe_lines(load_fonts(fonts), ["0.00"], 30, 0.2, LineInput(stretch=3.0))
    tall = probe_lines(load_fonts(fonts), ["0.00"], 30, 0.2, LineInput(stretch=1.5, height=2 * LINE_HEIGHT))
    assert [image.shape for _, _, image in tall] == [
        (2 * LINE_HEIGHT, image.shape[1], 3) for _, _, image in usual
    ]  # twice the rows, as wide: half the stretch


def test_a_misread_is_a_difference_beyond_case_and_spaces() -> None:
    lines = [("a", "Z = 0%", "z =  0%"), ("b", "Z = 0%", "Z = O%"), ("c", "0.00", "0.00")]
    assert misreads(lines) == [("b", "Z = 0%", "Z = O%")]


def test_the_marks_set_holds_the_receipts_marks_in_strings_dejavu_draws(fonts: Path) -> None:
    marks = TEXT_SETS["marks"]
    assert {"'", "@", "#", "%"} <= {char for text in marks for char in text}
    lines = probe_lines(load_fonts(fonts), marks, 30, 0.2)
    assert {text for _, text, _ in lines} == set(marks)  # DejaVu covers every one
