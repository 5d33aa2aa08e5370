"""Black scanner edges: rows and columns at the page's sides that are mostly near-black.

A flatbed or ADF scan of a page smaller than the glass, or a page fed askew, leaves black bands
along its edges. The detector reads their ragged edge as text-like strokes, and the dark band
drags the contrast stretch; cutting them off removes both. Only bands touching a side are cut
and never more than a quarter of the page per side, so a dark photo or a black header bar inside
the page stays.
"""

from __future__ import annotations

import numpy as np

_DARK = 60  # grey level under which a pixel counts as scanner black
_DARK_SHARE = 0.6  # a row or column this dark is border, not page
_MAX_SHARE = 0.25  # the most that is cut from one side


def _run(dark_share: np.ndarray, limit: int) -> int:
    """How many leading entries are border (dark), up to `limit`."""
    count = 0
    while count < limit and dark_share[count] >= _DARK_SHARE:
        count += 1
    return count


def black_border_box(grey: np.ndarray) -> tuple[int, int, int, int]:
    """The page inside its black edges as (x0, y0, x1, y1), exclusive ends."""
    height, width = grey.shape[:2]
    dark = grey < _DARK
    rows = dark.mean(axis=1)
    cols = dark.mean(axis=0)
    top = _run(rows, int(height * _MAX_SHARE))
    bottom = height - _run(rows[::-1], int(height * _MAX_SHARE))
    left = _run(cols, int(width * _MAX_SHARE))
    right = width - _run(cols[::-1], int(width * _MAX_SHARE))
    if left or right < width or top or bottom < height:
        # A few pixels more: the edge of a black band is grey, not black, and would stay as a rule.
        pad = max(2, min(height, width) // 200)
        left = left + pad if left else 0
        top = top + pad if top else 0
        right = right - pad if right < width else width
        bottom = bottom - pad if bottom < height else height
    return left, top, right, bottom
