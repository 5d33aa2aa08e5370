"""Colons printed apart from their label, which the text detector does not see, found on the paper.

Receipts and forms print a column of labels, a column of colons and a column of values:
`Discount      :     0.00`. The DB detector finds the label and the value but not a colon that
stands alone between them (two dots are too small to make a text region), so the page reads
`Discount 0.00` and a search for `Discount :` or a field rule that looks for the colon misses it.
A colon is recognised here by its shape alone, in the blank paper right of a line that ends in a
word: exactly two small marks, one above the other, inside the line's band, and nothing else
before the next text on that row. A value's colon (after a figure) is not looked for: labels end in
words, figures rarely have a colon after them, and a stray mark after a price is likelier a tick.
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from appliance.engines.ppocr_onnx.spacing import CJK_START
from appliance.engines.ppocr_onnx.step_evidence import with_found_mark
from appliance.lines import Box, Line, Word

# How far right of a line a lone colon may stand, in line heights, when no text comes first.
_REACH = 2.0
# A colon's dots: each at most this share of the line's height across; centres at most _ALIGN
# apart sideways and _DOT_GAP apart upright (a colon's dots sit about a third of the height apart).
_DOT_SIZE = 0.3
_ALIGN = 0.2
_DOT_GAP = (0.2, 0.7)
# The strip searched reaches this share of the height above and below the line's box, so dots that
# poke out of a tight box are whole; marks cut by the strip's edge belong to the rows around it.
_MARGIN = 0.25
_MIN_HEIGHT = 8  # px: smaller lines have dots of a pixel or two, indistinguishable from specks


def _same_row(box: Box, other: Box) -> bool:
    overlap = min(box[3], other[3]) - max(box[1], other[1])
    return overlap > 0.5 * min(box[3] - box[1], other[3] - other[1])


def _strip_end(box: Box, boxes: list[Box]) -> float:
    """Where the blank paper right of `box` ends: the next box on its row, or _REACH heights on."""
    x1, height = box[2], box[3] - box[1]
    end = x1 + _REACH * height
    for other in boxes:
        if other is not box and other[0] >= x1 - 2 and _same_row(box, other):
            end = min(end, other[0])
    return end


def find_lone_colon(grey: np.ndarray, box: Box, boxes: list[Box]) -> Box | None:
    """The box of a colon standing alone right of `box` on a grey page, or None.

    `boxes` are all the page's line boxes (`box` among them), so the search stops at the next text.
    """
    x0, y0, x1, y1 = box
    height = y1 - y0
    if height < _MIN_HEIGHT:
        return None
    left, right = int(x1) + 1, int(_strip_end(box, boxes)) - 1
    top, bottom = max(0, int(y0 - _MARGIN * height)), min(grey.shape[0], int(y1 + _MARGIN * height))
    if right - left < 3 or left >= grey.shape[1]:
        return None
    strip = grey[top:bottom, left : min(right, grey.shape[1])]
    line = grey[int(y0) : int(y1), max(0, int(x0)) : int(x1)]
    if strip.size == 0 or line.size == 0:
        return None
    # The line's own ink-paper threshold (Otsu), moved halfway to the strip's paper: a colon is
    # often printed fainter than the letters (thermal print), and its dots are only a few pixels.
    ink_level, _ = cv2.threshold(line, 0, 255, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    threshold = (ink_level + float(np.median(strip))) / 2
    marked = (strip < threshold).astype(np.uint8)
    count, _, stats, centres = cv2.connectedComponentsWithStats(marked, connectivity=8)
    # Ink at the strip's left edge is the line's own last glyph running past its box: its pieces
    # (the tail of an `s`, the bar of a `t`) could pass for dots, so nothing is claimed there.
    if any(stats[index][0] == 0 for index in range(1, count)):
        return None
    marks = [
        (stats[index], centres[index])
        for index in range(1, count)
        if stats[index][1] > 0
        and stats[index][1] + stats[index][3] < strip.shape[0]
        and y0 <= centres[index][1] + top <= y1
    ]
    if len(marks) != 2:
        return None
    (upper, upper_centre), (lower, lower_centre) = sorted(marks, key=lambda mark: mark[1][1])
    if max(upper[2], upper[3], lower[2], lower[3]) > _DOT_SIZE * height:
        return None
    if abs(upper_centre[0] - lower_centre[0]) > _ALIGN * height:
        return None
    if not _DOT_GAP[0] * height <= lower_centre[1] - upper_centre[1] <= _DOT_GAP[1] * height:
        return None
    middle = (upper_centre[1] + lower_centre[1]) / 2 + top
    if not y0 + 0.2 * height <= middle <= y1 - 0.1 * height:
        return None
    colon_x0 = left + min(upper[0], lower[0])
    colon_x1 = left + max(upper[0] + upper[2], lower[0] + lower[2])
    return (float(colon_x0), float(top + upper[1]), float(colon_x1), float(top + lower[1] + lower[3]))


def ends_in_a_word(text: str) -> bool:
    """Whether a label could end here: a Latin-script letter, a closing bracket or a dot, no colon yet."""
    stripped = text.rstrip()
    if not stripped or ord(stripped[-1]) >= CJK_START:
        return False  # CJK text writes its full-width colon right after the word
    return stripped[-1].isalpha() or stripped[-1] in ")."


def add_lone_colons(grey: np.ndarray, lines: list[Line]) -> list[Line]:
    """The lines, each label followed by a lone colon getting ` :` and the colon as a word."""
    boxes = [line.box for line in lines]
    result = []
    for line, box in zip(lines, boxes, strict=True):
        colon = None
        if ends_in_a_word(line.text) and not line.rotated_180 and box[2] - box[0] > box[3] - box[1]:
            colon = find_lone_colon(grey, box, boxes)
        if colon is None:
            result.append(line)
            continue
        confidence = line.confidence
        result.append(
            replace(
                line,
                text=f"{line.text} :",
                char_confidences=[*line.char_confidences, confidence, confidence],
                words=[*line.words, Word(text=":", box=colon, confidence=confidence)],
                box=(box[0], box[1], max(box[2], colon[2]), box[3]),
                likelihood=with_found_mark(line.likelihood, ":", at_start=False, confidence=confidence),
            )
        )
    return result
