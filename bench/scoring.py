"""Page-level character error rates for the OCR benchmark.

All figures are whitespace-free: every whitespace character is removed from both the ground
truth (GT) and the hypothesis before comparing, because the sets disagree on spaces (the docs_zh
PDF text layer has none between CJK and Latin runs; SROIE annotators space freely). Where a
dataset's scoring.json says `case_insensitive`, both sides are case-folded first (SROIE's
transcriptions are upper-cased, so case carries no information there).

A page's text is its lines joined in some order, and a page CER is the Levenshtein distance
(rapidfuzz) between GT and hypothesis page texts. Rates over a set are micro-averaged: the sum of
the distances over the sum of GT characters, so long pages weigh more than short ones.

A fourth figure counts spaces as a user searching the text sees them: **geo spaced** joins the
geometrically ordered lines with one space, collapses every run of whitespace to one space and
compares the two texts with their spaces, so `ABCHO TRADING` for `ABC HO TRADING` costs an edit
and `ABC  HO` for `ABC HO` does not. (docs_zh's ground truth has no spaces between CJK and Latin
runs, so there the whitespace-free figure is the one to read.)

Three figures per page, differing only in how lines are ordered:

- **geo** (the primary metric): GT lines and hypothesis lines are both put in the *same*
  geometric order, `appliance.pipeline.layout.group_rows` applied to their boxes (visual rows top
  to bottom, each row left to right). The GT's own line order is annotation order, which on SROIE
  receipts is idiosyncratic (often a column of labels, then a column of values), so comparing any
  engine's reading order against it mostly measures ordering, not reading. Ordering both sides by
  one rule removes that while still penalising lines split, merged or missed.
- **annotation order** (secondary): GT lines in file order against the hypothesis in the order
  the engine returned it (for our pipeline, its own reading order). Mostly an ordering measure.
- **bag of characters** (secondary, order-free): with per-character counts g and h,
  max(sum (g-h)+, sum (h-g)+) / GT characters. This is a lower bound on the edits any line order
  would need (a substitution fixes one missing and one extra character at once), so it shows the
  pure reading error with no ordering at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

from appliance.document import Box, Line
from appliance.pipeline.layout import group_rows
from bench.text_forms import normalize, normalize_spaced


@dataclass(frozen=True)
class TextLine:
    """One line of text with its box (x0, y0, x1, y1) in page pixels."""

    text: str
    box: Box


def geo_order(lines: Sequence[TextLine]) -> list[TextLine]:
    """Lines in the pipeline's geometric reading order (rows top to bottom, left to right)."""
    proxies = [
        Line(text=str(index), box=line.box, polygon=(), confidence=1.0, char_confidences=[])
        for index, line in enumerate(lines)
    ]
    return [lines[int(proxy.text)] for row in group_rows(proxies) for proxy in row]


def bag_distance(reference: str, hypothesis: str) -> int:
    """Order-free lower bound on the edit distance: max(missing, extra) character counts."""
    ref_counts, hyp_counts = Counter(reference), Counter(hypothesis)
    missing = sum((ref_counts - hyp_counts).values())
    extra = sum((hyp_counts - ref_counts).values())
    return max(missing, extra)


@dataclass(frozen=True)
class PageScore:
    """Edit distances of one page under each ordering, and its GT length (whitespace-free)."""

    gt_chars: int
    geo_errors: int
    annotation_errors: int
    bag_errors: int
    # Counted with spaces: the GT's length and the distance of the geo-ordered texts.
    gt_chars_spaced: int = 0
    geo_errors_spaced: int = 0


def _joined(lines: Iterable[TextLine], case_insensitive: bool) -> str:
    return "".join(normalize(line.text, case_insensitive) for line in lines)


def score_page(
    ground_truth: Sequence[TextLine], hypothesis: Sequence[TextLine], case_insensitive: bool
) -> PageScore:
    """Score one page; both line lists are given in their own order (GT: annotation order)."""
    gt_annotation = _joined(ground_truth, case_insensitive)
    hyp_native = _joined(hypothesis, case_insensitive)
    gt_ordered, hyp_ordered = geo_order(ground_truth), geo_order(hypothesis)
    gt_geo = _joined(gt_ordered, case_insensitive)
    hyp_geo = _joined(hyp_ordered, case_insensitive)
    gt_spaced = normalize_spaced(" ".join(line.text for line in gt_ordered), case_insensitive)
    hyp_spaced = normalize_spaced(" ".join(line.text for line in hyp_ordered), case_insensitive)
    return PageScore(
        gt_chars=len(gt_annotation),
        geo_errors=Levenshtein.distance(gt_geo, hyp_geo),
        annotation_errors=Levenshtein.distance(gt_annotation, hyp_native),
        bag_errors=bag_distance(gt_annotation, hyp_native),
        gt_chars_spaced=len(gt_spaced),
        geo_errors_spaced=Levenshtein.distance(gt_spaced, hyp_spaced),
    )


@dataclass(frozen=True)
class SetScore:
    """Micro-averaged rates over a set of pages (errors summed over GT characters summed)."""

    pages: int
    gt_chars: int
    cer_geo: float
    cer_annotation: float
    bag_error: float
    cer_geo_spaced: float = 0.0


def micro_average(scores: Sequence[PageScore]) -> SetScore:
    total = sum(score.gt_chars for score in scores)
    denominator = max(total, 1)
    return SetScore(
        pages=len(scores),
        gt_chars=total,
        cer_geo=sum(score.geo_errors for score in scores) / denominator,
        cer_annotation=sum(score.annotation_errors for score in scores) / denominator,
        bag_error=sum(score.bag_errors for score in scores) / denominator,
        cer_geo_spaced=sum(score.geo_errors_spaced for score in scores)
        / max(sum(score.gt_chars_spaced for score in scores), 1),
    )
