"""Lone colons between a label and its value: receipt rows rendered here, boxes as the detector gives them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from appliance.engines.ppocr_onnx.lone_colons import add_lone_colons, ends_in_a_word, find_lone_colon
from appliance.lines import Box, Line

MONO_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
FONT = ImageFont.truetype(str(MONO_FONT), 28)


def row_page(pieces: list[tuple[int, str]], ink: int = 0, width: int = 700) -> tuple[np.ndarray, list[Box]]:
    """A grey page with one row of text pieces at x offsets; the boxes of the pieces that are not ':'.

    A piece made only of a colon is printed but gets no box, as the text detector gives none.
    """
    image = Image.new("L", (width, 80), 255)
    draw = ImageDraw.Draw(image)
    boxes: list[Box] = []
    for x, text in pieces:
        draw.text((x, 20), text, font=FONT, fill=ink)
        if text.strip() != ":":
            left, top, right, bottom = draw.textbbox((x, 20), text, font=FONT)
            boxes.append((float(left), float(top - 2), float(right), float(bottom + 2)))
    return np.asarray(image), boxes


def line(text: str, box: Box) -> Line:
    return Line(text=text, box=box, polygon=(), confidence=0.97, char_confidences=[0.97] * len(text))


def test_a_colon_standing_between_label_and_value_is_found() -> None:
    grey, boxes = row_page([(20, "Discount"), (172, ":"), (260, "0.00")])
    colon = find_lone_colon(grey, boxes[0], boxes)
    assert colon is not None
    assert 170 <= colon[0] <= colon[2] <= 200


def test_a_faint_colon_is_found_as_well() -> None:
    page, boxes = row_page([(20, "Rounding"), (172, ":"), (260, "0.00")])
    # The colon printed in light grey, as thermal print fades, the words left black.
    faded = page.copy()
    region = faded[:, 168:200]
    region[region < 255] = 190
    assert find_lone_colon(faded, boxes[0], boxes) is not None


def test_no_colon_when_the_paper_is_blank_or_holds_other_marks() -> None:
    blank, boxes = row_page([(20, "Discount"), (260, "0.00")])
    assert find_lone_colon(blank, boxes[0], boxes) is None
    dash, boxes = row_page([(20, "Discount"), (172, "-"), (260, "0.00")])
    assert find_lone_colon(dash, boxes[0], boxes) is None
    dots, boxes = row_page([(20, "Discount"), (166, ". ."), (260, "0.00")])
    assert find_lone_colon(dots, boxes[0], boxes) is None


def test_the_search_stops_at_the_next_text_on_the_row() -> None:
    # The colon stands after the value, past the next box: it is not the label's.
    grey, boxes = row_page([(20, "Discount"), (166, "0.00"), (240, ":")])
    assert find_lone_colon(grey, boxes[0], boxes) is None


def test_add_lone_colons_writes_the_colon_after_the_label_only() -> None:
    grey, boxes = row_page([(20, "Discount"), (172, ":"), (260, "0.00")])
    lines = [line("Discount", boxes[0]), line("0.00", boxes[1])]
    label, value = add_lone_colons(grey, lines)
    assert label.text == "Discount :"
    assert len(label.char_confidences) == len(label.text)
    assert label.words[-1].text == ":"
    assert label.box[2] >= label.words[-1].box[2]
    assert value.text == "0.00"


def test_labels_end_in_words_figures_do_not() -> None:
    assert ends_in_a_word("Total Sales (Excluding GST)")
    assert ends_in_a_word("Doc No.")
    assert not ends_in_a_word("5.00")
    assert not ends_in_a_word("Cashier:")
    assert not ends_in_a_word("")


def test_the_tail_of_the_last_glyph_past_the_box_is_not_a_colon() -> None:
    grey, boxes = row_page([(20, "changes"), (260, "0.00")])
    # The detector's box ends inside the last letter: the rest of the `s` lies in the strip.
    x0, y0, x1, y1 = boxes[0]
    cut = (x0, y0, x1 - 8, y1)
    assert find_lone_colon(grey, cut, [cut, boxes[1]]) is None


def test_cjk_lines_are_not_labels() -> None:
    assert not ends_in_a_word("已下载映像文件的校验")


def test_a_found_colon_is_no_evidence_against_a_read_that_has_it() -> None:
    grey, boxes = row_page([(20, "Discount"), (172, ":"), (260, "0.00")])
    scores = {"Discount": -0.2, "Discount:": -12.0, "0.00": -0.1}
    label, value = line("Discount", boxes[0]), line("0.00", boxes[1])
    label.likelihood = value.likelihood = scores.__getitem__
    found = add_lone_colons(grey, [label, value])
    assert found[0].text == "Discount :" and found[0].likelihood is not None
    # The recogniser's evidence has no colon: a read with it is scored without it, and a read
    # without it pays for what was found on the paper (the colon at the line's confidence).
    assert found[0].likelihood("Discount :") == pytest.approx(-0.2)
    assert found[0].likelihood("Discount") == pytest.approx(-0.2 + math.log(1 - 0.97))
    assert found[1].likelihood is value.likelihood
