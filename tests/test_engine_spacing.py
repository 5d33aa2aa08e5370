"""Spaces put back from the crop's blank paper: lines rendered here, reads as a recogniser gives them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from appliance.engines.ppocr_onnx.recognition import LineRead, TextRecognizer
from appliance.engines.ppocr_onnx.spacing import longest_blanks, restore_spaces
from tests.rendering import CJK_FONT, LATIN_FONT

MONO_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")


def rendered_read(
    printed: str, dropped: set[int], font_path: Path = MONO_FONT
) -> tuple[LineRead, np.ndarray]:
    """A crop of `printed` and the read of it that leaves out the characters at `dropped`.

    Each character's position is its glyph's centre, as the recogniser's CTC steps place it.
    """
    font = ImageFont.truetype(str(font_path), 32)
    margin = 12
    width = int(font.getlength(printed)) + 2 * margin
    image = Image.new("RGB", (width, 48), "white")
    ImageDraw.Draw(image).text((margin, 6), printed, font=font, fill="black")
    text, positions = [], []
    for index, char in enumerate(printed):
        if index in dropped:
            continue
        start = margin + font.getlength(printed[:index])
        centre = start + font.getlength(char) / 2
        text.append(char)
        positions.append(centre / width)
    read = LineRead("".join(text), [0.99] * len(text), positions)
    return read, np.asarray(image)[:, :, ::-1].copy()


def spaces_at(text: str) -> set[int]:
    return {index for index, char in enumerate(text) if char == " "}


def test_spaces_round_a_colon_in_monospaced_print_come_back() -> None:
    printed = "TEL : 03-7731 8169"
    read, crop = rendered_read(printed, dropped={3, 5})
    assert read.text == "TEL:03-7731 8169"
    assert restore_spaces(read, crop, 0.8).text == printed


def test_a_space_between_digits_and_a_word_in_proportional_print_comes_back() -> None:
    printed = "52200   Kuala Lumpur"
    read, crop = rendered_read(printed, dropped={5, 6, 7}, font_path=LATIN_FONT)
    assert restore_spaces(read, crop, 0.8).text == "52200 Kuala Lumpur"


def test_narrow_glyphs_and_letters_of_one_word_get_no_space() -> None:
    printed = "GANFIELD'S 1111.11 X1:1"
    read, crop = rendered_read(printed, dropped=set())
    assert restore_spaces(read, crop, 0.8).text == printed


def test_cjk_neighbours_get_no_space() -> None:
    printed = "收据   金额"
    read, crop = rendered_read(printed, dropped=spaces_at(printed), font_path=CJK_FONT)
    assert read.text == "收据金额"
    assert restore_spaces(read, crop, 0.8).text == "收据金额"


def test_a_restored_space_carries_a_position_and_confidence_between_its_neighbours() -> None:
    read, crop = rendered_read("AB : CD", dropped={2, 4})
    spaced = restore_spaces(read, crop, 0.8)
    assert spaced.text == "AB : CD"
    assert len(spaced.confidences) == len(spaced.positions) == len(spaced.text)
    assert spaced.positions == sorted(spaced.positions)


def test_a_zero_gap_leaves_the_read_alone() -> None:
    read, crop = rendered_read("TEL : 03", dropped={3, 5})
    assert restore_spaces(read, crop, 0.0) is read


def hinted(read: LineRead, index: int, probability: float) -> LineRead:
    """The read with the recogniser's space probability before character `index` set."""
    space_before = [0.0] * len(read.text)
    space_before[index] = probability
    return LineRead(read.text, read.confidences, read.positions, space_before)


def two_words(left: str, right: str, gap: float) -> tuple[LineRead, np.ndarray]:
    """`left` and `right` printed `gap` mean advances apart, read with no space between them."""
    font = ImageFont.truetype(str(LATIN_FONT), 32)
    advance = font.getlength(left + right) / len(left + right)
    start_right = 12 + font.getlength(left) + gap * advance
    width = int(start_right + font.getlength(right)) + 12
    image = Image.new("RGB", (width, 48), "white")
    draw = ImageDraw.Draw(image)
    draw.text((12, 6), left, font=font, fill="black")
    draw.text((start_right, 6), right, font=font, fill="black")
    positions = [
        (origin + font.getlength(word[:index]) + font.getlength(char) / 2) / width
        for word, origin in ((left, 12.0), (right, start_right))
        for index, char in enumerate(word)
    ]
    text = left + right
    return LineRead(text, [0.99] * len(text), positions), np.asarray(image)[:, :, ::-1].copy()


def test_a_narrow_space_comes_back_where_the_recogniser_half_saw_it() -> None:
    # Half a mean advance of paper, as a space of proportional print leaves: too little alone.
    read, crop = two_words("52200", "Kuala", gap=0.45)
    assert restore_spaces(read, crop, 0.8).text == "52200Kuala"
    assert restore_spaces(hinted(read, 5, 0.3), crop, 0.8).text == "52200 Kuala"
    assert restore_spaces(hinted(read, 5, 0.02), crop, 0.8).text == "52200Kuala"


def test_the_recognisers_hint_alone_puts_no_space_between_touching_letters() -> None:
    read, crop = rendered_read("Kuala", dropped=set(), font_path=LATIN_FONT)
    assert restore_spaces(hinted(read, 2, 0.9), crop, 0.8).text == "Kuala"


def test_ctc_decoding_keeps_the_space_probability_between_characters() -> None:
    recognizer = object.__new__(TextRecognizer)  # _decode needs only the dictionary
    recognizer._keys = ["blank", "A", "B", " "]
    best = np.array([1, 0, 0, 0, 2, 2, 0])
    scores = np.full(7, 0.9)
    space = np.array([0.0, 0.05, 0.4, 0.1, 0.0, 0.0, 0.0])
    read = recognizer._decode(best, scores, width=70, batch_width=70, space=space)
    assert read.text == "AB"
    assert read.space_before == [0.0, 0.4]


def test_paper_beside_a_narrow_glyph_needs_the_recognisers_agreement() -> None:
    # A tabular `1` stands in a cell as wide as any digit: the paper beside it is no space.
    read, crop = rendered_read("1717", dropped=set())
    assert restore_spaces(read, crop, 0.3).text == "1717"  # no space probability from the session
    unsure = LineRead(read.text, read.confidences, read.positions, [0.0] * len(read.text))
    assert restore_spaces(unsure, crop, 0.3).text == "1717"
    assert restore_spaces(hinted(unsure, 2, 0.5), crop, 0.3).text == "17 17"


def test_the_longest_blank_of_every_range_is_that_of_the_range_cut_out() -> None:
    def cut_out(ink: np.ndarray, start: int, end: int) -> int:
        """The definition: the longest run of blank columns in ink[start:end] alone."""
        longest = run = 0
        for column in ink[start:end]:
            run = 0 if column else run + 1
            longest = max(longest, run)
        return longest

    rng = np.random.default_rng(7)
    for width in (0, 1, 5, 40, 200):
        for density in (0.0, 0.3, 0.9, 1.0):
            ink = rng.random(width) < density
            starts = rng.integers(0, width + 1, 30)
            ends = rng.integers(0, width + 1, 30)  # some ranges empty or reversed
            expected = [cut_out(ink, int(s), int(e)) for s, e in zip(starts, ends, strict=True)]
            assert list(longest_blanks(ink, starts, ends)) == expected, (width, density)
