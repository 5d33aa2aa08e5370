"""Whether one reading of a page set beats another beyond the luck of the pages drawn: a paired bootstrap.

A page's lines share its print, paper and faces, so a reader that misreads one face misreads a
page's worth of lines at once: pages, not lines, are what is resampled, and both readings are
scored on the same resampled pages (paired), so what a page's two readings share cancels out.
The interval is the bootstrap's percentile interval (scipy.stats.bootstrap): BCa's correction
needs a jackknife over the pages and fails when most resamples tie, as two readings that differ
on one page do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bench.scoring import PageScore, micro_average


@dataclass(frozen=True)
class PageCounts:
    """Per page, in one order: each reading's edits and the truth's characters."""

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

    def described(self, b: str = "B") -> str:
        """The difference in CER points with its interval, as the benchmarks print it (`b`: B's name)."""
        return (
            f"{self.difference * 100:+.2f} points, 95% interval {self.low * 100:+.2f} to "
            f"{self.high * 100:+.2f} ({self.pages} pages resampled {self.resamples:,} times); "
            f"{b} better in {self.b_better_share:.1%} of them"
        )


def page_counts(
    edits_a: Sequence[float] | np.ndarray,
    edits_b: Sequence[float] | np.ndarray,
    chars: Sequence[float] | np.ndarray,
) -> PageCounts:
    """PageCounts from three per-page sequences of one length."""
    counts = PageCounts(*(np.asarray(values, dtype=float) for values in (edits_a, edits_b, chars)))
    if not counts.edits_a.shape == counts.edits_b.shape == counts.chars.shape:
        raise ValueError("edits and characters must be given for the same pages")
    return counts


def _difference(edits_a: np.ndarray, edits_b: np.ndarray, chars: np.ndarray, axis: int = -1) -> np.ndarray:
    """B's CER less A's, micro-averaged over the pages along `axis` (vectorised for the bootstrap)."""
    return np.asarray(
        (edits_b.sum(axis=axis) - edits_a.sum(axis=axis)) / np.maximum(chars.sum(axis=axis), 1.0)
    )


def compare(counts: PageCounts, resamples: int = 9999, seed: int = 0) -> Difference:
    """B's CER less A's with a 95% paired bootstrap interval over the pages."""
    pages = int(counts.chars.size)
    chars = max(float(counts.chars.sum()), 1.0)
    cer_a, cer_b = float(counts.edits_a.sum()) / chars, float(counts.edits_b.sum()) / chars
    if pages < 2:  # nothing to resample: the difference is all there is
        point = cer_b - cer_a
        return Difference(cer_a, cer_b, point, point, point, float(point < 0), pages, 0)
    result = stats.bootstrap(
        (counts.edits_a, counts.edits_b, counts.chars),
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
        pages,
        resamples,
    )


def scores_difference(a: Sequence[PageScore], b: Sequence[PageScore]) -> dict[str, Difference]:
    """B's page scores against A's (the same pages in one order), whitespace-free and spaced."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} pages against {len(b)}: both readings must score the same pages")
    return {
        "whitespace-free": compare(
            page_counts([s.geo_errors for s in a], [s.geo_errors for s in b], [s.gt_chars for s in a])
        ),
        "spaced": compare(
            page_counts(
                [s.geo_errors_spaced for s in a],
                [s.geo_errors_spaced for s in b],
                [s.gt_chars_spaced for s in a],
            )
        ),
    }


@dataclass(frozen=True)
class AgainstBest:
    """One of our engines against the other engine of the run with the lowest CER."""

    engine: str
    against: str
    differences: dict[str, Difference]  # by way of counting: whitespace-free, spaced


def against_best_other(scores: Mapping[str, Sequence[PageScore]], ours: Sequence[str]) -> list[AgainstBest]:
    """Each of `ours` against the engine outside it with the lowest CER, over the same pages.

    Beating the best peer on whole pages is the bar; a gap of a few edits over a set may be the
    luck of the pages drawn, hence the interval. B is ours: a negative difference, ours reads better.
    """
    others = [name for name in scores if name not in ours]
    if not others:
        return []
    best = min(others, key=lambda name: micro_average(scores[name]).cer_geo)
    return [AgainstBest(name, best, scores_difference(scores[best], scores[name])) for name in ours]
