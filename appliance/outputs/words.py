"""Helpers the layout formats (hOCR, ALTO, searchable PDF) share: words of a line, integer boxes."""

from __future__ import annotations

import math

from appliance.document import DEFAULT_DPI, Box, Line, Word


def line_words(line: Line) -> list[Word]:
    """The line's words, or the whole line as one word when the engine gave none.

    A line without words would otherwise vanish from word-level formats while the JSON and text
    still carry it.
    """
    if line.words:
        return line.words
    return [Word(text=line.text, box=line.box, confidence=line.confidence)] if line.text else []


def int_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """The box rounded outward to whole pixels and clipped to the page.

    hOCR and ALTO readers expect integer pixel boxes inside the page; rounding outward keeps
    every glyph inside its box, and a box of at least one pixel keeps WIDTH/HEIGHT positive.
    """
    x0 = min(max(0, math.floor(box[0])), max(width - 1, 0))
    y0 = min(max(0, math.floor(box[1])), max(height - 1, 0))
    x1 = max(min(width, math.ceil(box[2])), x0 + 1)
    y1 = max(min(height, math.ceil(box[3])), y0 + 1)
    return x0, y0, x1, y1


def page_dpi(dpi: float | None) -> float:
    """The page's resolution, or 300 dpi (the scanner default) when the input did not say."""
    return float(dpi) if dpi and dpi > 0 else DEFAULT_DPI
