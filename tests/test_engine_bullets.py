"""List bullets at a line's start: item lines rendered here, reads as a recogniser gives them."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from appliance.engines.ppocr_onnx.bullets import BULLET, find_bullet, restore_bullet
from appliance.engines.ppocr_onnx.recognition import LineRead
from tests.rendering import CJK_FONT, LATIN_FONT

HEIGHT = 48


def item_line(text: str, bullet: str | None, font_path: str = str(CJK_FONT)) -> tuple[np.ndarray, float]:
    """A line crop: an optional bullet (`square`, `disc`), then the text; and where the text starts."""
    font = ImageFont.truetype(font_path, 30)
    image = Image.new("RGB", (int(font.getlength(text)) + 90, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    if bullet == "square":
        draw.rectangle((10, 21, 19, 30), fill="black")
    elif bullet == "disc":
        draw.ellipse((10, 20, 21, 31), fill="black")
    start = 50 if bullet else 10
    draw.text((start, 6), text, font=font, fill="black")
    return np.asarray(image)[:, :, ::-1].copy(), start


def read_of(text: str, crop: np.ndarray, start: float) -> LineRead:
    """A read whose characters sit evenly from `start` to the crop's right end."""
    width = crop.shape[1]
    step = (width - 40 - start) / max(len(text), 1)
    positions = [(start + step * (index + 0.5)) / width for index in range(len(text))]
    return LineRead(text, [0.98] * len(text), positions)


def test_a_square_bullet_the_recogniser_skipped_is_written() -> None:
    crop, start = item_line("瘦客户端能够仅有", "square")
    restored = restore_bullet(read_of("瘦客户端能够仅有", crop, start), crop)
    assert restored.text == f"{BULLET} 瘦客户端能够仅有"
    assert len(restored.confidences) == len(restored.positions) == len(restored.text)
    assert restored.positions == sorted(restored.positions)


def test_a_disc_bullet_before_latin_text_is_written() -> None:
    crop, start = item_line("combined main server", "disc", str(LATIN_FONT))
    assert (
        restore_bullet(read_of("combined main server", crop, start), crop).text
        == f"{BULLET} combined main server"
    )


def test_a_bullet_read_as_a_middle_dot_is_mended() -> None:
    crop, _ = item_line("对软件包系统", "square")
    read = read_of("·对软件包系统", crop, 8)
    assert restore_bullet(read, crop).text == f"{BULLET}对软件包系统"


def test_lines_without_a_bullet_are_left_alone() -> None:
    for text, font in (("客户端根文件系统", CJK_FONT), ("Total Sales", LATIN_FONT), ("0.00", LATIN_FONT)):
        crop, start = item_line(text, None, str(font))
        assert find_bullet(crop) is None
        read = read_of(text, crop, start)
        assert restore_bullet(read, crop) is read


def test_a_banner_of_asterisks_gets_no_bullet() -> None:
    crop, _ = item_line("***** PLEASE COME AGAIN *****", None, str(LATIN_FONT))
    assert find_bullet(crop) is None
    crop, _ = item_line("*GOODS SOLD ARE NOT RETURNABLE*", None, str(LATIN_FONT))
    assert find_bullet(crop) is None


def test_a_written_bullet_is_scored_as_what_the_recogniser_read_there() -> None:
    scores = {"combinedmainserver": -1.0, "·combinedmainserver": -0.5, "-combinedmainserver": -9.0}

    def likelihood(text: str) -> float:
        return scores["".join(text.split())]

    crop, start = item_line("combined main server", "disc", str(LATIN_FONT))
    read = read_of("combined main server", crop, start)
    skipped = restore_bullet(LineRead(read.text, read.confidences, read.positions, None, likelihood), crop)
    assert skipped.likelihood is not None
    # The recogniser read nothing for the bullet: a text with it is scored without it.
    assert skipped.likelihood(f"{BULLET} combined main server") == -1.0
    crop, _ = item_line("combined main server", "square", str(LATIN_FONT))
    read = read_of("·combined main server", crop, 8)
    mended = restore_bullet(LineRead(read.text, read.confidences, read.positions, None, likelihood), crop)
    assert mended.text.startswith(BULLET) and mended.likelihood is not None
    # It read the bullet as `·`: a text with the bullet is scored as that read, one with another
    # mark for it as that mark, less the bullet found on the paper.
    assert mended.likelihood(f"{BULLET}combined main server") == -0.5
    assert mended.likelihood("- combined main server") < -9.0
