"""Character error rate for tests: whitespace-free edit distance over the reference length."""

from __future__ import annotations

import re

from rapidfuzz.distance import Levenshtein


def cer(hypothesis: str, reference: str, case_insensitive: bool = False) -> float:
    hyp = re.sub(r"\s+", "", hypothesis)
    ref = re.sub(r"\s+", "", reference)
    if case_insensitive:
        hyp, ref = hyp.upper(), ref.upper()
    return Levenshtein.distance(hyp, ref) / max(len(ref), 1)
