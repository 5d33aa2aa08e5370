"""How often a reader's lines are wrong below each confidence: the rule for a second reader's threshold.

Usage: python -m bench.confidence_errors [--variant SPEC] [--half odd|even|all] [--share 0.5] DATASET_DIR...

Every page of the chosen half (odd: the 1st, 3rd, ... page of each set in file-name order) is read
through the full pipeline as `bench.ocr_bench` reads it. A read line counts as right when its
whitespace-free text (case-folded where the set's scoring says so) appears whole in the text of
the ground-truth lines its box overlaps, and as wrong otherwise (a misread, or a region the
annotators did not transcribe). The threshold printed is the highest confidence T on a 0.01
grid below which at least `--share` of the lines are wrong: a second reader given the lines
below T re-reads mostly lines that need it. Pick it on one half, confirm on the other.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import fuzz

from appliance.config import AppConfig
from appliance.document import Box
from bench.ocr_bench import build_processor, load_dataset
from bench.scoring import TextLine
from bench.text_forms import normalize


@dataclass(frozen=True)
class ReadLine:
    confidence: float
    right: bool


def _overlaps(a: Box, b: Box) -> bool:
    """Boxes that share at least half the smaller one's height and some width."""
    shared_height = min(a[3], b[3]) - max(a[1], b[1])
    smaller = min(a[3] - a[1], b[3] - b[1])
    return shared_height >= 0.5 * smaller > 0 and min(a[2], b[2]) > max(a[0], b[0])


def judge(text: str, box: Box, truth: list[TextLine], fold: bool) -> bool:
    """Whether a read line appears whole in the ground truth it overlaps."""
    mine = normalize(text, fold)
    around = "".join(normalize(line.text, fold) for line in truth if _overlaps(box, line.box))
    return bool(mine) and fuzz.partial_ratio(mine, around) == 100 and len(around) >= len(mine)


def threshold(lines: list[ReadLine], share: float) -> float | None:
    """The highest T (0.01 grid) with at least `share` of the lines below it wrong; None if none."""
    best = None
    for step in range(1, 101):
        limit = step / 100
        below = [line for line in lines if line.confidence < limit]
        if below and sum(not line.right for line in below) >= share * len(below):
            best = limit
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.confidence_errors", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--variant", help="the first reader, as bench.ocr_bench --variant")
    parser.add_argument("--half", choices=("odd", "even", "all"), default="odd")
    parser.add_argument("--share", type=float, default=0.5, help="wrong share that sets the threshold")
    args = parser.parse_args(argv)
    engine, processor = build_processor(AppConfig(), args.variant)
    lines: list[ReadLine] = []
    for folder in args.datasets:
        pages, fold = load_dataset(folder, None)
        start = {"odd": 0, "even": 1, "all": 0}[args.half]
        for page in pages[start :: 1 if args.half == "all" else 2]:
            document = processor.process(page.image)
            for read_page in document.pages:
                lines.extend(
                    ReadLine(line.confidence, judge(line.text, line.box, page.lines, fold))
                    for line in read_page.lines
                )
    engine.close()
    print(f"{len(lines)} lines, {sum(not line.right for line in lines)} wrong")
    print(f"{'confidence':>12} {'lines':>6} {'wrong':>6} {'wrong below':>12}")
    bands = [0.0, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 1.01]
    for low, high in itertools.pairwise(bands):
        band = [line for line in lines if low <= line.confidence < high]
        below = [line for line in lines if line.confidence < high]
        wrong_below = sum(not line.right for line in below) / len(below) if below else 0.0
        wrong = sum(not line.right for line in band)
        print(f"{low:>5.2f}-{min(high, 1):<6.2f} {len(band):>6} {wrong:>6} {wrong_below:>12.1%}")
    found = threshold(lines, args.share)
    print(f"threshold (at least {args.share:.0%} of the lines below it wrong): {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
