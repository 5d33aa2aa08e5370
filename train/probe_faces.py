"""Reads chosen strings drawn cleanly in every font of a folder: which faces and glyphs a model misreads.

    python -m train.probe_faces --hf DIR --fonts DIR [--text STRING ... | --set marks] [--size 30]
        [--margin 0.2]

A misread on a receipt crop may come from the print (faded, broken, loose box) or from the model;
a misread of the same string drawn black on white, in a face it was trained on, can only come from
the model (`0.00` read `O.OO`). Each string is drawn in each face that covers it at `size`, with
`margin` of the ink's height of white round it (the appliance's cut gives an eighth of the box),
and goes through `prepare_line` as every line does. Misreads are counted as `train.eval_lines`
counts edits: case and whitespace aside.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from bench.text_forms import normalize
from train.render import DEFAULT_LINE_INPUT, FontInfo, LineInput, _font, load_fonts, prepare_line

# Receipt strings whose zeros, colons and dots a reader must tell from letters.
ZERO_TEXTS = (
    "0.00",
    "0.42",
    "150.00",
    "12/03/2018 10:25:49 PM",
    "GST REG NO: 001335787520",
    "Z = 0%",
    "RM 0.00",
    "TOTAL 0.00",
)
# Receipt strings whose apostrophes, `@`, `#` and `%` signs, condensed digits and zeros after
# letters the 2.98% reader misread on the receipt crops (`CUSTOMERS COPY`, `GST06%`, `SSBB EAGLE`).
MARK_TEXTS = (
    "CUSTOMER'S COPY",
    "McDonald's",
    "PAPER 100'S",
    "TOTAL INCL. GST@6%",
    "(@ 6%)",
    "S = 6%",
    "Z = 0%",
    "CNY DECO A002# 26CM",
    "RECEIPT #: CS00052997",
    "5588 EAGLE FRIED DACE WT SA",
    "18/04/2018 20:27",
    "GST (6%)",
)
TEXT_SETS = {"zeros": ZERO_TEXTS, "marks": MARK_TEXTS}


def draw_clean(text: str, info: FontInfo, size: int, margin: float) -> np.ndarray:
    """`text` in black on white (RGB uint8), `margin` x the ink's height of white on every side."""
    font = _font(info.path, info.index, size)
    left, top, right, bottom = (round(v) for v in font.getbbox(text))
    pad = round((bottom - top) * margin)
    canvas = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 255)
    ImageDraw.Draw(canvas).text((pad - left, pad - top), text, font=font, fill=0)
    return np.repeat(np.asarray(canvas)[:, :, None], 3, axis=2)


def probe_lines(
    fonts: Sequence[FontInfo],
    texts: Sequence[str],
    size: int,
    margin: float,
    line_input: LineInput = DEFAULT_LINE_INPUT,
) -> list[tuple[str, str, np.ndarray]]:
    """(face file name, text, prepared image) for each text in each face whose cmap covers it."""
    lines = []
    for info in fonts:
        for text in texts:
            if {ord(c) for c in text if not c.isspace()} <= info.chars:
                lines.append(
                    (
                        info.path.name,
                        text,
                        prepare_line(draw_clean(text, info, size, margin), line_input),
                    )
                )
    return lines


def misreads(lines: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The (face, text, read) triples whose read differs from the text, case and whitespace aside."""
    return [
        (face, text, read) for face, text, read in lines if normalize(text, True) != normalize(read, True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.probe_faces", description=__doc__.splitlines()[0])
    parser.add_argument("--hf", type=Path, required=True, help="export folder (train_vlm's DIR/hf)")
    parser.add_argument("--fonts", type=Path, required=True)
    parser.add_argument("--text", action="append", help="a string to draw (default: the --set's)")
    parser.add_argument(
        "--set", choices=sorted(TEXT_SETS), default="zeros", help="a built-in set of strings (default: zeros)"
    )
    parser.add_argument("--size", type=int, default=30)
    parser.add_argument("--margin", type=float, default=0.2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    from train.eval_lines import load_export, read_lines

    texts_in = args.text or TEXT_SETS[args.set]
    lines = probe_lines(
        load_fonts(args.fonts), texts_in, args.size, args.margin, LineInput.of_export(args.hf)
    )
    model, tokenizer = load_export(args.hf, args.device)
    texts = read_lines(model, tokenizer, [image for _, _, image in lines])
    wrong = misreads([(face, text, read) for (face, text, _), read in zip(lines, texts, strict=True)])
    for face, text, read in wrong:
        print(f"{face:34s} {text!r:30s} read {read!r}")
    faces = {face for face, _, _ in lines}
    print(json.dumps({"faces": len(faces), "lines": len(lines), "misread": len(wrong)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
