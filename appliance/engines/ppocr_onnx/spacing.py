"""Spaces the recogniser left out, put back where the line crop shows blank paper between two glyphs.

PP-OCR recognisers drop many printed spaces next to narrow glyphs and in spaced-out print:
`TEL : 03-7731 8169` comes out as `TEL:03-7731 8169`, `52200 Kuala Lumpur` as `52200Kuala Lumpur`.
A user searching the archive for `52200` or `GST ID` then finds nothing. The CTC steps cannot say
it (a step is 8 px of a 48 px line, about half a character), but the crop can: between the centres
of two neighbouring characters, a run of ink-free columns at least `min_gap` of the line's
character pitch wide is a printed space. In monospaced print (receipts) a space is one whole pitch
of paper plus the glyphs' side bearings; letters of one word leave about half a pitch at most.

A narrower run, down to `_HINTED_GAP` of the pitch, is a space too where the recogniser itself
gave the space class at least `_HINTED_PROBABILITY` on a step between the two characters
(LineRead.space_before): in proportional print a space is about half a pitch, too narrow for the
blank paper alone to tell it from the gap after a narrow glyph (on the receipts' reads this second
rule took the whitespace-counting CER from 3.04% to 2.92%, on either half of the set alike).
Next to a narrow glyph (`1`, `i`, `.`, ...) blank paper counts only with that agreement (2.89%).

Only Latin-script neighbours get a space: CJK text is written without them.
"""

from __future__ import annotations

import cv2
import numpy as np

from appliance.engines.ppocr_onnx.recognition import LineRead

# Where CJK scripts start (CJK radicals): no space is put between characters from here up.
CJK_START = 0x2E80
# The band of rows searched for ink: a crop's top and bottom fifths can hold the descenders and
# ascenders of the neighbouring lines, whose ink would hide a gap between this line's glyphs.
_BAND = (0.2, 0.8)
# Fewer characters than this give no trustworthy pitch.
_MIN_CHARACTERS = 3
# The narrower blank run that is a space when the recogniser's own space probability agrees.
_HINTED_GAP = 0.45
_HINTED_PROBABILITY = 0.1
# Glyphs narrow in their cell: in monospaced and tabular print the paper beside them is wide
# without any space (`1 7-06-2018`, `D.I .Y`), so next to them blank paper counts only with the
# recogniser's agreement (and not at all where the session gives no space probability). Not the
# colon: receipts print a label's colon with a space on each side, which the recogniser reads as
# `TEL:03` without giving the space class any weight.
_NARROW = frozenset("1iIl.,;'!|")


def _spaceable(char: str) -> bool:
    return not char.isspace() and ord(char) < CJK_START


def ink_columns(crop: np.ndarray) -> np.ndarray:
    """Whether each column of the crop's middle band holds any ink (Otsu's threshold on the grey crop)."""
    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY) if crop.ndim == 3 else crop
    _, ink = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    height = ink.shape[0]
    band = ink[int(height * _BAND[0]) : int(height * _BAND[1]) + 1]
    return np.asarray(band.any(axis=0))


def longest_blanks(ink: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each column range [start, end) of `ink`, the longest run of ink-free columns inside it.

    The line's blank runs are found once and each range takes the longest part of one that lies in
    it: one numpy pass a line instead of one slice and run search per pair of characters (all under
    the GIL that another page in flight waits for). A range that is empty or reversed gets 0.
    """
    # Run bounds from the positions where ink starts and stops.
    padded = np.concatenate(([True], ink, [True]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    run_starts, run_ends = edges[::2], edges[1::2]
    if not len(run_starts) or not len(starts):
        return np.zeros(len(starts), dtype=np.int64)
    inside = np.minimum(run_ends, ends[:, np.newaxis]) - np.maximum(run_starts, starts[:, np.newaxis])
    return np.asarray(inside.max(axis=1).clip(min=0), dtype=np.int64)


def restore_spaces(read: LineRead, crop: np.ndarray, min_gap: float) -> LineRead:
    """The read with a space wherever the crop has a blank run of `min_gap` pitches between glyphs.

    `read.positions` are the characters' centres as fractions of the crop's width. The pitch is the
    line's mean advance per character (spaces counted), so a line's own print size sets the bar.
    """
    text = read.text
    if min_gap <= 0 or len(text) < _MIN_CHARACTERS or crop.size == 0:
        return read
    width = crop.shape[1]
    centres = [position * width for position in read.positions]
    pitch = (centres[-1] - centres[0]) / (len(text) - 1)
    if pitch <= 0:
        return read
    ink = ink_columns(crop)
    bounds = np.array([int(centre) for centre in centres], dtype=np.int64)
    blanks = longest_blanks(ink, bounds[:-1], bounds[1:])  # blanks[i - 1]: between characters i - 1 and i
    hints = read.space_before
    chars, confidences, positions = [text[0]], [read.confidences[0]], [read.positions[0]]
    space_before = None if hints is None else [hints[0]]
    for index in range(1, len(text)):
        before, after = text[index - 1], text[index]
        if _spaceable(before) and _spaceable(after):
            blank = int(blanks[index - 1]) / pitch
            hinted = hints is not None and hints[index] >= _HINTED_PROBABILITY
            narrow = before in _NARROW or after in _NARROW
            if (blank >= min_gap and not narrow) or (hinted and blank >= min(_HINTED_GAP, min_gap)):
                chars.append(" ")
                confidences.append(min(read.confidences[index - 1], read.confidences[index]))
                positions.append((read.positions[index - 1] + read.positions[index]) / 2)
                if space_before is not None:
                    space_before.append(0.0)
        chars.append(after)
        confidences.append(read.confidences[index])
        positions.append(read.positions[index])
        if space_before is not None and hints is not None:
            space_before.append(hints[index])
    if len(chars) == len(text):
        return read
    return LineRead("".join(chars), confidences, positions, space_before, read.likelihood)
