"""What a VLM wrote becomes lines: markup removed, each character keeping its token's probability."""

from __future__ import annotations

import pytest

from appliance.engines.vlm_gguf.output import make_line, parse_answer, spell_out
from appliance.engines.vlm_gguf.profiles import PROFILES, profile_for


def test_multibyte_characters_split_across_tokens_take_the_lowest_probability() -> None:
    data = "收据 OK".encode()
    # "收" split over two tokens, "据" whole, then " OK".
    pieces = [data[:2], data[2:3], data[3:6], b" OK"]
    text, confidences = spell_out(pieces, [0.9, 0.4, 0.8, 0.95])
    assert text == "收据 OK"
    assert confidences == [0.4, 0.8, 0.95, 0.95, 0.95]


def test_plain_answers_become_stripped_non_empty_lines() -> None:
    text = "  TOTAL 12.50 \n\nTHANK YOU\n"
    lines = parse_answer(text, [0.5] * len(text), "plain")
    assert [line.text for line in lines] == ["TOTAL 12.50", "THANK YOU"]
    assert all(len(line.char_confidences) == len(line.text) for line in lines)


def test_markdown_loses_its_markup_but_keeps_confidences_aligned() -> None:
    text = "# Invoice\n**Total**: 12.50\n| Item | Price |\n|---|---|\n| Tea | 3.00 |\n- first <b>bold</b>"
    confidences = [i / len(text) for i in range(len(text))]
    lines = parse_answer(text, confidences, "markdown")
    assert [line.text for line in lines] == [
        "Invoice",
        "Total: 12.50",
        "Item   Price",
        "Tea   3.00",
        "first bold",
    ]
    total = lines[1]
    # Each kept character keeps the confidence it had at its place in the answer.
    start = text.index("Total")
    assert total.char_confidences[0] == confidences[start]
    assert len(total.char_confidences) == len(total.text)


def test_doctags_give_lines_with_their_page_location() -> None:
    text = (
        "<doctag><text><loc_50><loc_100><loc_250><loc_120>Hello world</text>"
        "<title><loc_0><loc_0><loc_500><loc_20>Head</title></doctag>"
    )
    lines = parse_answer(text, [1.0] * len(text), "doctags")
    assert [line.text for line in lines] == ["Hello world", "Head"]
    assert lines[0].box == pytest.approx((0.1, 0.2, 0.5, 0.24))
    assert lines[1].box == pytest.approx((0.0, 0.0, 1.0, 0.04))


def test_make_line_spreads_words_along_the_box() -> None:
    line = make_line("AB CD", [0.9, 0.8, 1.0, 0.7, 0.6], (0.0, 10.0, 50.0, 20.0))
    assert [word.text for word in line.words] == ["AB", "CD"]
    assert line.words[0].box == (0.0, 10.0, 20.0, 20.0)
    assert line.words[1].box == (30.0, 10.0, 50.0, 20.0)
    assert line.words[1].confidence == 0.6
    assert line.engine == "vlm_gguf"


def test_each_family_places_the_image_as_its_model_expects() -> None:
    marker = "<__media__>"
    paddle = profile_for("paddleocr_vl").messages(marker)
    assert paddle == [
        {"role": "user", "content": [{"type": "text", "text": marker}, {"type": "text", "text": "OCR:"}]}
    ]
    lighton = profile_for("lightonocr").messages(marker)
    assert lighton[0] == {"role": "system", "content": ""}
    assert lighton[1]["content"] == [{"type": "text", "text": marker}]
    assert set(PROFILES) >= {
        "paddleocr_vl",
        "lightonocr",
        "hunyuan_ocr",
        "granite_docling",
        "qwen2vl",
        "smolvlm",
    }
    with pytest.raises(ValueError, match="unknown VLM family"):
        profile_for("nope")


def test_only_a_line_reader_bounds_its_tokens_by_its_crops_width() -> None:
    line = profile_for("qwen2vl_line")
    assert line.token_limit(8) == 40 < line.token_limit(20) == 88 < line.token_limit(64) == line.max_tokens
    assert line.with_overrides(None, 30).token_limit(20) == 30  # a site's lower limit still holds
    for family, profile in PROFILES.items():
        if not profile.line_input:
            assert profile.token_limit(1) == profile.token_limit(1024) == profile.max_tokens, family
