"""Whether one reader reads the crops better than another beyond the luck of which receipts were drawn.

    python -m train.paired --crops CROPS A B [--resamples 9999] [--seed 0]

A and B are reads of the same crops: `train.eval_lines --out` files (the line reader's) or `bench.vlm_lines
--save-hints` files (the ONNX reader's). Prints each one's CER (whitespace-free and spaced, as
`train.eval_lines` counts them) and B's less A's with a 95% interval from a paired bootstrap.

Pages are what is resampled, not lines: a receipt's lines share its print, paper and faces, so a
reader that misreads one face misreads a page's worth of lines at once, and resampling lines would
make a difference carried by two or three receipts look sure. Both readers are scored on the same
resampled pages (paired), so what the pages share cancels out. The interval is the bootstrap's
percentile interval (scipy.stats.bootstrap): BCa's correction needs a jackknife over the pages and
fails when most resamples tie, as two readers differing on one page do.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rapidfuzz.distance import Levenshtein
from scipy import stats

from bench.text_forms import normalize, normalize_spaced


@dataclass(frozen=True)
class PageCounts:
    """Per page, in one order: each reader's edits and the truth's characters."""

    pages: list[str]
    edits_a: np.ndarray
    edits_b: np.ndarray
    chars: np.ndarray


@dataclass(frozen=True)
class Difference:
    """B's CER less A's over the pages, with its bootstrap interval and how often B came out ahead."""

    cer_a: float
    cer_b: float
    difference: float
    low: float
    high: float
    b_better_share: float  # of the resamples, those where B's CER was below A's
    pages: int
    resamples: int


def load_truths(crops: Path) -> dict[str, tuple[str, str]]:
    """Each crop's page and truth, by file name, from a `train.make_crops` folder's labels.jsonl."""
    truths = {}
    for line in (crops / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            truths[record["file"]] = (record["page"], record["text"])
    return truths


def load_reads(path: Path) -> dict[str, str]:
    """Each crop's read, by file name, from `train.eval_lines --out` or `bench.vlm_lines --save-hints`."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "lines" in data:
        return {line["file"]: line["read"] for line in data["lines"]}
    if isinstance(data, list):
        return {read["file"]: read["text"] for read in data}
    raise ValueError(f"{path}: neither train.eval_lines --out nor bench.vlm_lines --save-hints")


def page_counts(
    truths: Mapping[str, tuple[str, str]],
    reads_a: Mapping[str, str],
    reads_b: Mapping[str, str],
    spaced: bool = False,
) -> PageCounts:
    """Each page's edits by A and by B and its truth's characters, over the crops both read."""
    files = [name for name in truths if name in reads_a and name in reads_b]
    if not files:
        raise ValueError("the two reads share no crop of this folder")
    norm = normalize_spaced if spaced else normalize
    pages = sorted({truths[name][0] for name in files})
    index = {page: position for position, page in enumerate(pages)}
    edits_a, edits_b, chars = (np.zeros(len(pages)) for _ in range(3))
    for name in files:
        page, truth = truths[name]
        want = norm(truth, True)
        at = index[page]
        edits_a[at] += Levenshtein.distance(norm(reads_a[name], True), want)
        edits_b[at] += Levenshtein.distance(norm(reads_b[name], True), want)
        chars[at] += len(want)
    return PageCounts(pages, edits_a, edits_b, chars)


def _difference(edits_a: np.ndarray, edits_b: np.ndarray, chars: np.ndarray, axis: int = -1) -> np.ndarray:
    """B's CER less A's, micro-averaged over the pages along `axis` (vectorised for the bootstrap)."""
    return np.asarray(
        (edits_b.sum(axis=axis) - edits_a.sum(axis=axis)) / np.maximum(chars.sum(axis=axis), 1.0)
    )


def compare(counts: PageCounts, resamples: int = 9999, seed: int = 0) -> Difference:
    """B's CER less A's with a 95% paired bootstrap interval over the pages."""
    data = (counts.edits_a, counts.edits_b, counts.chars)
    chars = max(float(counts.chars.sum()), 1.0)
    cer_a, cer_b = float(counts.edits_a.sum()) / chars, float(counts.edits_b.sum()) / chars
    if len(counts.pages) < 2:  # nothing to resample: the difference is all there is
        point = cer_b - cer_a
        return Difference(cer_a, cer_b, point, point, point, float(point < 0), len(counts.pages), 0)
    result = stats.bootstrap(
        data,
        _difference,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return Difference(
        cer_a,
        cer_b,
        cer_b - cer_a,
        float(interval.low),
        float(interval.high),
        float(np.mean(result.bootstrap_distribution < 0)),
        len(counts.pages),
        resamples,
    )


def describe(name_a: str, name_b: str, whitespace_free: Difference, spaced: Difference) -> list[str]:
    """The report's lines: both readers' CER, then B's less A's with its interval, each way of counting."""
    lines = [
        f"A {name_a}: {whitespace_free.cer_a:.2%} / {spaced.cer_a:.2%} spaced",
        f"B {name_b}: {whitespace_free.cer_b:.2%} / {spaced.cer_b:.2%} spaced",
    ]
    for label, result in (("whitespace-free", whitespace_free), ("spaced", spaced)):
        lines.append(
            f"B - A, {label}: {result.difference * 100:+.2f} points, 95% interval "
            f"{result.low * 100:+.2f} to {result.high * 100:+.2f} ({result.pages} pages resampled "
            f"{result.resamples:,} times); B better in {result.b_better_share:.1%} of them"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.paired", description=__doc__.splitlines()[0])
    parser.add_argument("--crops", type=Path, required=True, help="the train.make_crops folder both read")
    parser.add_argument("a", type=Path, help="reads of the crops (eval_lines --out, vlm_lines --save-hints)")
    parser.add_argument("b", type=Path, help="another reader's reads of the same crops")
    parser.add_argument("--resamples", type=int, default=9999)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    truths = load_truths(args.crops)
    reads_a, reads_b = load_reads(args.a), load_reads(args.b)
    unread = [name for name in truths if name not in reads_a or name not in reads_b]
    if unread:
        parser.error(f"{len(unread)} crops of {args.crops} lack a read in A or B (the first: {unread[0]})")
    results = [
        compare(page_counts(truths, reads_a, reads_b, spaced=spaced), args.resamples, args.seed)
        for spaced in (False, True)
    ]
    print("\n".join(describe(str(args.a), str(args.b), *results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
