"""Page-level 0/90/180/270 check from how the engine's detected text regions read.

The ink profile (deskew.py) finds most quarter turns before the first read, but it cannot tell
a page from its upside-down image, nor which way a sideways page was turned, and on tall narrow
receipts with short lines it can miss a turn. The engine's first read can: it reports, over every
region its detector found (kept or dropped), how much text read confidently as cropped, how much
read better turned 180 degrees, and how much ran top to bottom (`OrientationEvidence`).

- Regions mostly vertical: the page is still sideways. The engine turned those crops a quarter
  counter-clockwise to read them; if they read upright, the page wants the same turn, else the
  other one.
- Less than `min_upright` of the text read confidently upright: the page is upside down, or a
  poor scan; it is read again turned 180 degrees.

Every candidate read is kept only if it is better: the winner is the read whose text runs
across the page and reads upright (at least `min_upright`), with the most upright text; if no
read qualifies, the one with the most upright text, a sideways read counting half. So a wrong
guess costs one read, never the page, and a page of genuinely vertical writing keeps its first
read.

Measured on 16 receipts and 2 docs_zh pages, each at four turns: upright receipts read 32-98%
of their text confidently upright, the same receipts upside down 0-6% (docs_zh: 100% and 0%);
sideways pages have 95-100% of their text in vertical regions, upright pages 0-3%. The share of
flipped lines the earlier check used misses upside-down receipts: the classifier flags few of
their lines, the rest are dropped as low-confidence, and what remains reads confidently (receipt
130 upside down: 17% flipped, mean confidence 0.75). Set aside: a classifier vote over all lines
(on 8 receipts, upright pages voted up to 0.28 for upside down and upside-down pages as low as
0.21, and it cost 0.5-1 s a page), and a detector pass at two rotations (the first read already
holds the vertical share, for free).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from appliance.engines.base import Engine, OrientationEvidence, PageText
from appliance.pipeline.preprocess.deskew import rotate_quarter

# For engines that give no evidence: a line this confident counts as read upright.
_CONFIDENT = 0.9
# Regions are vertical when they run top to bottom this much longer than across.
_TALL = 1.5
# The page is sideways when this share of its text runs top to bottom.
_SIDEWAYS = 0.5


@dataclass(frozen=True)
class OrientationDecision:
    """The quarter turns (clockwise) added after the first read, the evidence, and the cost."""

    turns: int
    reads: int
    upright_share: float  # of the first read
    vertical_share: float  # of the first read
    chosen_upright_share: float
    ms: float  # extra reads and the decision, not the first read

    @property
    def checked(self) -> bool:
        return self.reads > 1


def evidence_of(page: PageText) -> OrientationEvidence:
    """The engine's own evidence, or one made from the kept lines (characters as length)."""
    if page.evidence is not None:
        return page.evidence
    length = upright = flipped = vertical = 0.0
    for line in page.lines:
        chars = float(len(line.char_confidences) or len(line.text))
        length += chars
        if line.rotated_180:
            flipped += chars
        elif line.confidence >= _CONFIDENT:
            upright += chars
        x0, y0, x1, y1 = line.box
        if y1 - y0 >= _TALL * (x1 - x0):
            vertical += chars
    return OrientationEvidence(len(page.lines), length, upright, flipped, vertical)


def _sideways(evidence: OrientationEvidence) -> bool:
    return evidence.share(evidence.vertical) > _SIDEWAYS


def _qualifies(evidence: OrientationEvidence, min_upright: float) -> bool:
    return not _sideways(evidence) and evidence.share(evidence.upright) >= min_upright


def _fallback_rank(evidence: OrientationEvidence) -> float:
    """Upright text, halved for a sideways read, to choose among reads of which none qualifies.

    A poor scan can fall short of `min_upright` every way round; its sideways read then reads
    about as much upright text as its upright one (the engine turns each vertical crop), but its
    lines would be ordered down the page's columns (receipt 230: 25% upright both ways, and the
    sideways read was kept). A page of real vertical writing keeps its sideways read: turned,
    its characters lie on their side and read far less than half as well.
    """
    return evidence.upright / 2 if _sideways(evidence) else evidence.upright


def _next_turn(evidence: OrientationEvidence, min_upright: float) -> int:
    """Clockwise quarter turns this read asks for (0: it looks upright)."""
    if not evidence.regions:
        return 0
    if _sideways(evidence):
        # Vertical crops were turned counter-clockwise to read; reading upright means the page
        # was turned clockwise and wants a counter-clockwise quarter (3), else the other way.
        return 3 if evidence.upright >= evidence.flipped else 1
    return 2 if evidence.share(evidence.upright) < min_upright else 0


def read_upright(
    engine: Engine, image: np.ndarray, min_upright: float
) -> tuple[PageText, np.ndarray, np.ndarray | None, OrientationDecision]:
    """Read the page; read it again turned while the read says it is not upright; keep the best.

    Returns the read, the image it came from, the 3x3 matrix of the turn (None if not turned)
    and the decision. At most three reads: a sideways page may need its quarter turn and then 180.
    """
    first = engine.recognize(image)
    started = time.perf_counter()
    first_evidence = evidence_of(first)
    # (clockwise quarter turns from the given image, its matrix, the read, the image, the evidence)
    candidates = [(0, np.eye(3), first, image, first_evidence)]
    turns, matrix, current = 0, np.eye(3), image
    step = _next_turn(first_evidence, min_upright)
    while step and len(candidates) < 3:
        turns = (turns + step) % 4
        if any(seen == turns for seen, *_ in candidates):
            break
        current, step_matrix = rotate_quarter(current, step)
        matrix = step_matrix @ matrix
        read = engine.recognize(current)
        evidence = evidence_of(read)
        candidates.append((turns, matrix, read, current, evidence))
        if _qualifies(evidence, min_upright):
            break
        # After a wrong guess only the half turn is left to try (the other way round, or back).
        step = 2 if _next_turn(evidence, min_upright) else 0
    qualified = [item for item in candidates if _qualifies(item[4], min_upright)]
    chosen_turns, chosen_matrix, read, chosen_image, chosen = max(
        qualified or candidates, key=lambda item: _fallback_rank(item[4])
    )
    decision = OrientationDecision(
        turns=chosen_turns,
        reads=len(candidates),
        upright_share=first_evidence.share(first_evidence.upright),
        vertical_share=first_evidence.share(first_evidence.vertical),
        chosen_upright_share=chosen.share(chosen.upright),
        ms=(time.perf_counter() - started) * 1000,
    )
    return read, chosen_image, chosen_matrix if chosen_turns else None, decision
