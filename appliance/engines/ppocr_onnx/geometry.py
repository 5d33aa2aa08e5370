"""Maps positions along a rectified line crop back to page coordinates, for word boxes."""

from __future__ import annotations

import numpy as np

from appliance.document import Box, Polygon


def quad_to_box(quad: np.ndarray) -> Box:
    return (
        float(quad[:, 0].min()),
        float(quad[:, 1].min()),
        float(quad[:, 0].max()),
        float(quad[:, 1].max()),
    )


def thinned(quad: np.ndarray, share: float, turned_90: bool) -> np.ndarray:
    """The quad narrowed across its reading direction to `share` of its thickness, about its middle.

    The detector's quads are its text kernels grown back by the unclip ratio, with paper round
    the glyphs on purpose: the recogniser reads such loose crops best. As the line's place on the
    page (its box, for reading order, word boxes and the searchable PDF's text layer) they are too
    tall: on scanned receipts glyph-tight boxes are about 0.83 of their height, on printed pages
    about 0.92. Rows of a slanted receipt then overlap and interleave in reading order.
    """
    p0, p1, p2, p3 = (quad[i].astype(np.float64) for i in range(4))
    cut = (1.0 - share) / 2.0
    if turned_90:  # reading runs down the left and right edges: thickness is left to right
        return np.array(
            [p0 + (p1 - p0) * cut, p1 + (p0 - p1) * cut, p2 + (p3 - p2) * cut, p3 + (p2 - p3) * cut],
            dtype=np.float32,
        )
    return np.array(
        [p0 + (p3 - p0) * cut, p1 + (p2 - p1) * cut, p2 + (p1 - p2) * cut, p3 + (p0 - p3) * cut],
        dtype=np.float32,
    )


def quad_to_polygon(quad: np.ndarray) -> Polygon:
    return tuple((float(x), float(y)) for x, y in quad)


def span_box(quad: np.ndarray, start: float, end: float, turned_90: bool, flipped: bool) -> Box:
    """Page box of the part of a line between fractions start..end of its reading direction.

    `turned_90`: the crop was turned counter-clockwise because the line is vertical, so reading
    runs down the quad's left and right edges. `flipped`: the crop was read upside down, so the
    fractions run backwards.
    """
    if flipped:
        start, end = 1.0 - end, 1.0 - start
    start, end = max(0.0, start), min(1.0, end)
    # On Python floats, not 2-element arrays: a line has a word box per word, and numpy's cost
    # a call dwarfs four multiply-adds. The same double arithmetic, so the same boxes.
    p0, p1, p2, p3 = quad.tolist()
    edge_a, edge_b = ((p1, p2), (p0, p3)) if turned_90 else ((p0, p1), (p3, p2))
    xs, ys = [], []
    for (a, b), share in ((edge_a, start), (edge_a, end), (edge_b, end), (edge_b, start)):
        xs.append(a[0] + (b[0] - a[0]) * share)
        ys.append(a[1] + (b[1] - a[1]) * share)
    return (min(xs), min(ys), max(xs), max(ys))
