"""Line text normalisation: a closing parenthesis takes the width of the one it closes."""

from __future__ import annotations

import pytest

from appliance.repair.text import normalise, pair_parentheses


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        ("自由软件指导方针（DFSG)基于", "自由软件指导方针（DFSG）基于"),
        ("系统（BTS)的信息", "系统（BTS）的信息"),
        ("（如在学校内)，但", "（如在学校内），但"),
    ],
)
def test_a_closing_parenthesis_follows_its_opening_one(read: str, expected: str) -> None:
    result = normalise(read)
    assert result.text == expected
    assert "text.paired_parenthesis" in result.rules
    assert len(result.kept) == len(result.text), "one character for one: confidences stay aligned"


@pytest.mark.parametrize("text", ["fdisk(8)，cfdisk", "TOTAL (RM) 40.17", "(APOP)", "a)b", "收据）"])
def test_ascii_or_lone_parentheses_are_left_as_read(text: str) -> None:
    assert pair_parentheses(text) == (text, False)


def test_nested_parentheses_pair_innermost_first() -> None:
    assert pair_parentheses("（见(第8节)说明)") == ("（见(第8节)说明）", True)
