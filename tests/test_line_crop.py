"""A line is cut out upright, with paper round it and none of its neighbours, however it slants."""

from __future__ import annotations

import cv2
import numpy as np

from appliance.engines.line_crop import crop_line, is_upright, slant_degrees, widen
from appliance.engines.vlm_gguf.output import make_line
from appliance.pipeline.cascade import _crop

BAR_TOP, BAR_HEIGHT, BAR_LEFT, BAR_LENGTH = (200, 250, 300), 20, 100, 400


def _slanted_page(degrees: float) -> tuple[np.ndarray, np.ndarray]:
    """Three black bars 30 px apart on white, the page turned; returns it and the middle bar's quad."""
    page = np.full((600, 600, 3), 255, dtype=np.uint8)
    for top in BAR_TOP:
        page[top : top + BAR_HEIGHT, BAR_LEFT : BAR_LEFT + BAR_LENGTH] = 0
    turn = cv2.getRotationMatrix2D((300.0, 300.0), degrees, 1.0)
    turned = cv2.warpAffine(page, turn, (600, 600), borderValue=(255, 255, 255))
    top, left, right, bottom = BAR_TOP[1], BAR_LEFT, BAR_LEFT + BAR_LENGTH, BAR_TOP[1] + BAR_HEIGHT
    corners = np.array([[left, top], [right, top], [right, bottom], [left, bottom]], dtype=np.float64)
    quad = np.hstack([corners, np.ones((4, 1))]) @ turn.T
    return turned, quad


def test_a_slanted_line_is_cut_upright_without_its_neighbours() -> None:
    page, quad = _slanted_page(8.0)
    assert not is_upright(quad) and abs(slant_degrees(quad) - 8.0) < 0.1
    x0, y0, x1, y1 = quad[:, 0].min(), quad[:, 1].min(), quad[:, 0].max(), quad[:, 1].max()
    line = make_line("MIDDLE", [0.5] * 6, (x0, y0, x1, y1))
    line.polygon = tuple((float(x), float(y)) for x, y in quad)
    crop = _crop(page, [line], 0)
    grey = crop.mean(axis=2)
    # The bar with a quarter of its height round it: 30 x 410, not the slanted line's box.
    assert abs(grey.shape[0] - 30) <= 2 and abs(grey.shape[1] - 410) <= 2
    assert grey[8:-8, 10:-10].mean() < 40  # the bar itself, dark
    assert grey[:3].mean() > 200 and grey[-3:].mean() > 200  # paper above and below: no neighbour
    assert y1 - y0 > 2 * grey.shape[0]  # the plain box would have been over twice as tall


def test_an_upright_line_is_cut_from_the_page_as_it_was() -> None:
    page = np.full((100, 300, 3), 255, dtype=np.uint8)
    line = make_line("FLAT", [0.5] * 4, (20.0, 40.0, 220.0, 60.0))
    assert is_upright(np.array(line.polygon))
    assert _crop(page, [line], 0).shape[:2] == (30, 210)


def test_widening_moves_every_edge_out_along_the_line() -> None:
    _, quad = _slanted_page(30.0)
    wide = widen(quad, 5.0)
    crop, turned = crop_line(np.zeros((600, 600, 3), dtype=np.uint8), wide)
    assert not turned
    assert abs(crop.shape[0] - (BAR_HEIGHT + 10)) <= 1 and abs(crop.shape[1] - (BAR_LENGTH + 10)) <= 1


def test_a_crop_stops_halfway_to_the_line_beside_it_on_its_row() -> None:
    # Receipt columns: the detector's grown boxes touch, so a margin past them would take in the
    # next column's first glyph, which a VLM reads as part of the line.
    page = np.full((100, 400, 3), 255, dtype=np.uint8)
    qty = make_line("5 X", [0.5] * 3, (100.0, 40.0, 186.0, 60.0))
    price = make_line("0.60", [0.5] * 4, (180.0, 40.0, 260.0, 60.0))
    above = make_line("TOTAL", [0.5] * 5, (60.0, 10.0, 300.0, 30.0))  # another row: no bound
    page[44:56, 190:196] = 0  # the price's first glyph, inside its box, past the overlap
    crop = _crop(page, [above, qty, price], 1)
    # The left margin is whole (5 px: a quarter of 20); the right stops at 183, halfway into the
    # overlap, before the price's ink.
    assert crop.shape[:2] == (30, 183 - 95)
    assert crop.min() == 255
    alone = _crop(page, [above, qty], 1)
    assert alone.shape[1] == 191 - 95 and alone.min() == 0  # without the price: its glyph is cut in
    # The price is bounded on its left the same way, its right margin whole.
    assert _crop(page, [qty, price, above], 1).shape[1] == 265 - 183
