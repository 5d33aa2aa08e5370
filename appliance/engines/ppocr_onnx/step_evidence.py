"""How likely any text is under a CTC recogniser's read of one line: its likeliest classes at each step.

The cascade's `keep: joint` weighs a line's two reads by both readers: the VLM scores the ONNX
text, and this scores the VLM's text under the ONNX recogniser's own per-step probabilities. The
full distribution (18,385 classes for PP-OCRv5's dictionary, some 100 steps a line) is 7 MB a line;
the few likeliest classes a step hold nearly all of its mass, and what they leave is shared evenly
among the rest.

The CTC forward pass is written here with numpy: torch's and TensorFlow's CTC losses are not
dependencies of the appliance, and no kept numpy library computes it. Letter case is folded (a
class's probability counts for its character in either case) and the space class counts as a
blank: the readers disagree on case and spacing more than on characters, and the appliance's CER
counts neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# A probability no class has: the log of zero would make every later sum -inf.
_TINY = 1e-30


@dataclass(frozen=True)
class StepEvidence:
    """The `classes` likeliest classes at each CTC step of one line, with their probabilities.

    `rest` is each step's probability of any one class outside them (what they leave, shared
    evenly); `chars` are those classes' characters in small letters ("" for the blank and the space).
    """

    chars: np.ndarray  # steps x k
    probabilities: np.ndarray  # steps x k
    rest: np.ndarray  # steps
    blank: np.ndarray  # steps: the blank's probability plus the space's

    @classmethod
    def of(cls, probabilities: np.ndarray, folded: np.ndarray, kept: int) -> StepEvidence:
        """From one line's steps x classes probabilities (its own steps, not the batch's padding).

        `folded` is `fold_keys` of the recogniser's dictionary, in its class order.
        """
        count = probabilities.shape[1]
        kept = max(1, min(kept, count))
        # One arg-max pass per kept class, each found one then set aside: with the few classes kept
        # (JOINT_EVIDENCE_CLASSES) several times cheaper than argpartition over 18,385 classes a
        # step, and this runs on every line the recogniser reads while a cascade keeps evidence.
        # Ties go to the lower index, as the GPU graph's TopK breaks them.
        work = probabilities.copy()
        steps = np.arange(len(work))
        top = np.empty((len(work), kept), dtype=np.intp)
        for column in range(kept):
            top[:, column] = work.argmax(axis=1)
            work[steps, top[:, column]] = -1.0
        top_probabilities = np.take_along_axis(probabilities, top, axis=1)
        rest = np.clip(1.0 - top_probabilities.sum(axis=1), 0.0, 1.0) / max(1, count - kept)
        blank = probabilities[:, folded == ""].sum(axis=1)
        return cls(folded[top], top_probabilities.astype(np.float64), rest, blank)

    @classmethod
    def of_top(
        cls, classes: np.ndarray, probabilities: np.ndarray, blank: np.ndarray, folded: np.ndarray
    ) -> StepEvidence:
        """From a graph's own likeliest classes a step (best_class.EVIDENCE_OUTPUTS), as `of` keeps them.

        `blank` is each step's blank and space probability together; `folded` as for `of`.
        """
        kept = classes.shape[1]
        rest = np.clip(1.0 - probabilities.sum(axis=1), 0.0, 1.0) / max(1, len(folded) - kept)
        return cls(folded[classes], probabilities.astype(np.float64), rest, blank.astype(np.float64))

    def log_likelihood(self, text: str) -> float:
        """The log-probability of `text` under CTC: summed over its characters' alignments to the steps."""
        chars = [char for char in text.lower() if not char.isspace()]
        blank = np.log(np.maximum(self.blank, _TINY))
        if not chars:
            return float(blank.sum())
        steps = len(blank)
        states = 2 * len(chars) + 1
        if len(chars) > steps:
            return float(np.log(_TINY) * len(chars))  # more characters than steps: no alignment
        emissions = np.empty((states, steps))
        emissions[0::2] = blank
        for index, char in enumerate(chars):
            emissions[2 * index + 1] = np.log(np.maximum(self._char_probability(char), _TINY))
        # A state may skip the blank before it only between two different characters.
        skips = np.zeros(states, dtype=bool)
        for index in range(1, len(chars)):
            skips[2 * index + 1] = chars[index] != chars[index - 1]
        alpha = np.full(states, -np.inf)
        alpha[:2] = emissions[:2, 0]
        for step in range(1, steps):
            stay_or_advance = alpha.copy()
            stay_or_advance[1:] = np.logaddexp(alpha[1:], alpha[:-1])
            skipped = np.full(states, -np.inf)
            skipped[2:] = alpha[:-2]
            advanced = np.where(skips, np.logaddexp(stay_or_advance, skipped), stay_or_advance)
            alpha = advanced + emissions[:, step]
        return float(np.logaddexp(alpha[-1], alpha[-2]))

    def _char_probability(self, char: str) -> np.ndarray:
        """Each step's probability of `char` in either case: its kept classes', else the rest's share."""
        matches = self.chars == char
        kept = (self.probabilities * matches).sum(axis=1)
        return np.where(matches.any(axis=1), kept, self.rest)


def fold_keys(keys: Sequence[str]) -> np.ndarray:
    """The class characters as StepEvidence compares them: small letters, "" for blank and space."""
    return np.array(["" if index == 0 or key.isspace() else key.lower() for index, key in enumerate(keys)])


def with_found_mark(
    likelihood: Callable[[str], float] | None,
    mark: str,
    *,
    at_start: bool,
    confidence: float,
    read_as: str = "",
) -> Callable[[str], float] | None:
    """A line's `likelihood` once a mark found on the paper, not by the recogniser, is written at one end.

    A lone colon after a label (lone_colons.py), a list bullet before the text (bullets.py): the
    recogniser's evidence holds no such mark, and would count it against any text that has it. A
    text with the mark at that end is scored with `read_as` in its place (what the recogniser read
    there: nothing, or the misread a bullet replaced); one without it pays for leaving out what was
    found, as though the mark had been read at the line's `confidence`.
    """
    if likelihood is None:
        return None
    missing = math.log(max(1.0 - confidence, 1e-6))

    def score(text: str) -> float:
        stripped = text.strip()
        if at_start and stripped.startswith(mark):
            return likelihood(read_as + stripped[len(mark) :].lstrip())
        if not at_start and stripped.endswith(mark):
            return likelihood(stripped[: -len(mark)].rstrip() + read_as)
        return likelihood(text) + missing

    return score
