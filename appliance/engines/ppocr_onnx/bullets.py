"""List bullets the recogniser does not write, found at the start of the line crop by their shape.

Typeset pages mark list items with a filled disc or square (LaTeX's and DocBook's `•`). The
detector takes the bullet into the item's line, but PP-OCR recognisers skip it or read it as a
middle dot, so a page's lists lose their structure and every item a character. A bullet is told by
its shape alone: the line's first mark, a compact filled blob about the size of a lower-case letter,
sitting on the middle of the line, with clear paper of at least one and a half of its widths
before the text. Asterisks and stars of receipts' banners (`***** THANK YOU *****`) stand close
together and high on the line, and are left alone.
"""

from __future__ import annotations

import cv2
import numpy as np

from appliance.engines.ppocr_onnx.recognition import LineRead
from appliance.engines.ppocr_onnx.step_evidence import with_found_mark

BULLET = "•"
# Marks smaller than this share of the crop's height (both ways) are specks, not glyphs.
_SPECK = 0.1
# A bullet's width and height as shares of the crop's height, its width-to-height range, the
# share of its box it fills (a square fills all of it, a disc 0.79), where its centre may sit
# (shares of the height, from the top) and the clear paper after it, in its own widths.
_SIZE = (0.12, 0.45)
_ASPECT = (0.6, 1.6)
_FILL = 0.7
_MIDDLE = (0.4, 0.7)
_CLEARANCE = 1.5
# What a recogniser writes for a bullet it does see: replaced by the bullet.
_MISREAD = "·."


def find_bullet(crop: np.ndarray) -> tuple[float, float] | None:
    """A leading list bullet's centre and the middle of the paper after it (x in crop pixels)."""
    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY) if crop.ndim == 3 else crop
    height = grey.shape[0]
    _, ink = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    _, _, stats, centres = cv2.connectedComponentsWithStats(ink, connectivity=8)
    # The marks (components 1..: 0 is the paper) left to right, ties in label order. Whole
    # columns of the stats, not a Python loop over them: a line of docs_zh has a hundred marks.
    extent = np.maximum(stats[1:, cv2.CC_STAT_WIDTH], stats[1:, cv2.CC_STAT_HEIGHT])
    marks = 1 + np.flatnonzero(extent >= _SPECK * height)
    marks = marks[np.argsort(stats[marks, cv2.CC_STAT_LEFT], kind="stable")]
    if len(marks) < 2:
        return None
    x, _, width, tall, area = stats[marks[0]]
    if not (_SIZE[0] * height <= min(width, tall) and max(width, tall) <= _SIZE[1] * height):
        return None
    if not _ASPECT[0] <= width / tall <= _ASPECT[1] or area / (width * tall) < _FILL:
        return None
    if not _MIDDLE[0] * height <= centres[marks[0]][1] <= _MIDDLE[1] * height:
        return None
    following = stats[marks[1:], cv2.CC_STAT_LEFT].min()
    if following < x + width + _CLEARANCE * width:
        return None
    return float(centres[marks[0]][0]), float(x + width + following) / 2


def restore_bullet(read: LineRead, crop: np.ndarray) -> LineRead:
    """The read with its line's leading bullet written as `•`, when the crop shows one."""
    if not read.text or read.text[0] == BULLET or crop.size == 0:
        return read
    bullet = find_bullet(crop)
    if bullet is None:
        return read
    centre_x, end = bullet
    width = crop.shape[1]
    if read.positions[0] * width < end:
        # The recogniser wrote something for the bullet itself: only its usual misreads are mended.
        if read.text[0] in _MISREAD:
            # The recogniser's evidence holds the misread: a text with the bullet is scored with it.
            likelihood = with_found_mark(
                read.likelihood, BULLET, at_start=True, confidence=read.confidence, read_as=read.text[0]
            )
            return LineRead(
                BULLET + read.text[1:], read.confidences, read.positions, read.space_before, likelihood
            )
        return read
    confidence = float(np.mean(read.confidences))
    centre = centre_x / width
    return LineRead(
        f"{BULLET} {read.text}",
        [confidence, confidence, *read.confidences],
        [centre, (centre + read.positions[0]) / 2, *read.positions],
        None if read.space_before is None else [0.0, 0.0, *read.space_before],
        with_found_mark(read.likelihood, BULLET, at_start=True, confidence=confidence),
    )
