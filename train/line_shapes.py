"""How rendered lines are shaped and printed against a folder of real line crops.

    python -m train.line_shapes --crops DIR [--fonts DIR] [--words FILE] [--count N] [--looks]

A line reader trained on one shape of line reads others badly, so the renderer must cover the
shapes a detector hands over. Two figures per line, printed as percentiles (10, 25, 50, 75, 90)
for the crops and for as many rendered lines: the share of the crop's height that holds ink (a
loose detector box makes the text small once the line is scaled to 28 px), and the crop's width
per character over its height (condensed faces are narrow). Lines of fewer than four characters are
left out: their width says little about a glyph's. With `--looks`, four more, of the grey levels
the model is given (`prepare_line`'s 28 rows, its white padding left out): the paper's level, the
ink's, the contrast between them and the share of pixels darker than half-way; and one at the
crop's own resolution, the share of its inked pixels that are grey (`grey_edge_share`: none on a
one-bit scan). Blank crops (no contrast) are left out of that one.
"""

from __future__ import annotations

import argparse
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from appliance.engines.vlm_gguf.line_image import drawn_width, prepare_line
from train.make_crops import read_crops

PERCENTILES = (10, 25, 50, 75, 90)
_MIN_CHARS = 4
_INK_ROW_SHARE = 0.02  # a row holds ink when 2% of its pixels are dark (noise alone is not)


def line_shape(image: np.ndarray, text: str) -> tuple[float, float]:
    """(ink height / crop height, crop width per character / crop height) of one line crop."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    _, dark = cv2.threshold(grey, 0, 255, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    rows = np.flatnonzero((dark > 0).mean(axis=1) > _INK_ROW_SHARE)
    height = grey.shape[0]
    ink = (rows[-1] - rows[0] + 1) / height if rows.size else 0.0
    return float(ink), grey.shape[1] / height / max(len(text), 1)


def line_looks(image: np.ndarray) -> tuple[float, float, float, float]:
    """(paper, ink, contrast, dark share) of a crop's grey levels at the model's input.

    The paper is the 90th percentile of the prepared line's grey levels, the ink the 3rd (most of a
    line is paper; thin strokes shrunk to 28 rows are paler than the print), the dark share that of
    pixels nearer the ink than the paper.
    """
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    return prepared_looks(prepare_line(grey)[:, : drawn_width(*grey.shape[:2]), 0])


def prepared_looks(prepared: np.ndarray) -> tuple[float, float, float, float]:
    """`line_looks` of a line already at the model's input: its grey rows, the white padding cut off."""
    grey = prepared.astype(np.float32)
    paper, ink = np.percentile(grey, (90, 3))
    dark = grey < (paper + ink) / 2
    return float(paper), float(ink), float(paper - ink), float(dark.mean())


LOOKS = ("paper level", "ink level", "contrast", "dark share")

_BLANK_CONTRAST = 40  # grey levels between a crop's paper and its ink under which it holds no print


def grey_edge_share(image: np.ndarray) -> float | None:
    """The share of a crop's inked pixels that are grey, at its own resolution; None for a blank crop.

    The ink is the crop's 1st percentile of grey, the paper its 90th. A pixel is inked from a
    quarter of the way from the paper to the ink, grey up to three quarters. A one-bit scan has
    none (every pixel is paper or ink); anti-aliased print, blur, resampling and JPEG make about a
    third to three quarters of most lines' inked pixels grey, most of them on the strokes' edges.
    """
    grey = (image.mean(axis=2) if image.ndim == 3 else image).astype(np.float32)
    ink, paper = np.percentile(grey, (1, 90))
    if paper - ink < _BLANK_CONTRAST:
        return None
    depth = (paper - grey) / (paper - ink)  # 0 on the paper, 1 on the ink
    inked = depth > 0.25
    return float((inked & (depth < 0.75)).sum() / max(int(inked.sum()), 1))


EDGES = ("grey edge share",)


def _has_wide(text: str) -> bool:
    """Whether the text holds a wide (East Asian full-width) character: Han, kana, full-width forms."""
    return any(unicodedata.east_asian_width(char) in "FW" for char in text)


SHAPES = ("ink height share", "width per char / height")


def percentiles(
    shapes: Sequence[tuple[float, ...]], names: tuple[str, ...] = SHAPES
) -> dict[str, list[float]]:
    """The percentiles of each figure (`names`, in the tuples' order), rounded for printing."""
    table = np.asarray(shapes, dtype=np.float64)
    return {name: np.percentile(table[:, i], PERCENTILES).round(3).tolist() for i, name in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.line_shapes", description=__doc__.splitlines()[0])
    parser.add_argument("--crops", type=Path, required=True, help="train.make_crops output")
    parser.add_argument("--fonts", type=Path, default=Path("/usr/share/fonts"))
    parser.add_argument("--words", type=Path, default=Path("/usr/share/dict/words"))
    parser.add_argument("--count", type=int, default=1500, help="crops read (as many lines are rendered)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--looks", action="store_true", help="also the grey levels at the model's input")
    parser.add_argument(
        "--levels-share", type=float, help="render with this share of scanner levels (the renderer's default)"
    )
    parser.add_argument(
        "--bilevel-share", type=float, help="render with this share of one-bit scans (the renderer's default)"
    )
    args = parser.parse_args(argv)
    from train.render import BILEVEL_SHARE, SCANNER_LEVELS_SHARE, LineRenderer, load_fonts
    from train.text_source import TextSource

    crops = [(crop, text) for _, crop, text in read_crops(args.crops, args.count) if len(text) >= _MIN_CHARS]
    real = [line_shape(crop, text) for crop, text in crops]
    real_looks = [line_looks(crop) for crop, _ in crops] if args.looks else []
    # Chinese and other full-width characters are about twice as wide as Latin ones: rendered lines
    # holding them count only when the crops hold some.
    with_wide = any(_has_wide(text) for _, text in crops)
    levels = SCANNER_LEVELS_SHARE if args.levels_share is None else args.levels_share
    bilevel = BILEVEL_SHARE if args.bilevel_share is None else args.bilevel_share
    renderer = LineRenderer(load_fonts(args.fonts), args.seed, levels_share=levels, bilevel_share=bilevel)
    source = TextSource(args.seed, args.words)
    rendered: list[tuple[float, float]] = []
    rendered_looks: list[tuple[float, float, float, float]] = []
    rendered_edges: list[tuple[float]] = []
    while len(rendered) < len(real):
        text = source.line()
        if len(text) >= _MIN_CHARS and (with_wide or not _has_wide(text)):
            # The renderer's lines are RGB; line_looks takes BGR as the crops are read: grey alike.
            line = cv2.cvtColor(renderer.render(text), cv2.COLOR_RGB2BGR)
            rendered.append(line_shape(line, text))
            if args.looks:
                rendered_looks.append(line_looks(line))
                edge = grey_edge_share(line)
                if edge is not None:
                    rendered_edges.append((edge,))
    print(f"percentiles {list(PERCENTILES)}")
    for name, shapes in (("crops", real), ("rendered", rendered)):
        for figure, values in percentiles(shapes).items():
            print(f"{name:9s} {figure:24s} {values}")
    if args.looks:
        real_edges = [(edge,) for crop, _ in crops if (edge := grey_edge_share(crop)) is not None]
        for name, looks, edges in (
            ("crops", real_looks, real_edges),
            ("rendered", rendered_looks, rendered_edges),
        ):
            for figure, values in (percentiles(looks, LOOKS) | percentiles(edges, EDGES)).items():
                print(f"{name:9s} {figure:24s} {values}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
