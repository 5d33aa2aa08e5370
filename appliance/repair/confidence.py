"""Confidence of a value from its characters' confidences, moved by the outcome of its checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Aggregate = Literal["min", "mean", "geomean", "product"]

# How much of the remaining doubt a passing independent check removes. A checksum that passes on a
# misread value is rare (1 in 10 for mod 10, 1 in 97 for IBAN), so halving the error is conservative.
CHECK_PASS_FACTOR = 0.5


def aggregate(confidences: Sequence[float], method: Aggregate = "product") -> float:
    """One number for a run of characters; 0.0 for none (an empty value is not trusted).

    "min" says how sure the engine is of its weakest character, which is what decides an exact
    match; "product" assumes independent errors and falls fast with length; bench/fields_bench.py
    measures which of them tracks exact-match accuracy better.
    """
    if not confidences:
        return 0.0
    if method == "min":
        return min(confidences)
    if method == "mean":
        return sum(confidences) / len(confidences)
    logs = sum(math.log(max(value, 1e-6)) for value in confidences)
    if method == "product":
        return math.exp(logs)
    return math.exp(logs / len(confidences))


def with_checks(confidence: float, passed: Sequence[bool]) -> float:
    """Raise a confidence for each passing check; failing checks route to review instead."""
    for outcome in passed:
        if outcome:
            confidence = 1 - (1 - confidence) * CHECK_PASS_FACTOR
    return confidence
