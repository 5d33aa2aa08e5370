"""Stops a generation that has fallen into a loop, a known failure of OCR VLMs on hard pages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoopGuard:
    """A generation loops when its tail repeats one stretch of tokens, back to back, too often.

    The tail is checked for every period up to `max_period` tokens: `min_repeats` copies covering at
    least `min_span` tokens. Real pages repeat too (a dotted leader, a run of identical table rows),
    so the span must be long before the page is cut; a cut page goes to review, not to the archive.
    """

    max_period: int = 64
    min_repeats: int = 4
    min_span: int = 96
    check_every: int = 8  # the check is vectorised but still not free: run it every few tokens

    def looping(self, tokens: Sequence[int]) -> bool:
        count = len(tokens)
        if count < self.min_span or count % self.check_every:
            return False
        tail = np.asarray(tokens[-(self.max_period * self.min_repeats + self.min_span) :], dtype=np.int64)
        for period in range(1, self.max_period + 1):
            span = max(self.min_span, period * self.min_repeats)
            if span + period > tail.size:
                break
            window = tail[-span:]
            if np.array_equal(window, tail[-span - period : -period]):
                return True
        return False
