"""Teacher-forced answer tokens swapped at random, so the reader learns to read past a wrong one.

In training every answer token is predicted from the true tokens before it; in reading, from the
reader's own, which may be wrong. A reader that leans on the token before (the text's prior) more
than on the line's pixels then follows its own slip (`OFF JLN` read `OFFICIA`). Swapping a share of
the answer tokens the model is given, while the targets stay true, makes the pixels the surer
guide. Torch-free so that the test environment can check it.
"""

from __future__ import annotations

import numpy as np

from train.model import IGNORE


def swap_answer_tokens(
    input_ids: np.ndarray, labels: np.ndarray, share: float, rng: np.random.Generator
) -> np.ndarray:
    """`input_ids` with about `share` of its answer tokens replaced by other answer tokens of the batch.

    `labels` is `input_ids` with IGNORE over each prompt and the padding (`PromptFormat.example`).
    Only tokens that are followed by a scored one are swapped: each line's last token (its end
    marker) predicts nothing, and the prompt and image tokens are never touched. Replacements are
    drawn from the batch's own answer tokens, so they are characters lines hold, in their
    frequencies; one that draws the token it replaces leaves it as it was.
    """
    if share <= 0.0:
        return input_ids
    swappable = labels != IGNORE
    swappable[:, :-1] &= labels[:, 1:] != IGNORE
    swappable[:, -1] = False
    positions = np.flatnonzero(swappable.reshape(-1) & (rng.random(labels.size) < share))
    pool = input_ids[swappable]
    if positions.size == 0 or pool.size == 0:
        return input_ids
    swapped = input_ids.copy()
    swapped.reshape(-1)[positions] = rng.choice(pool, size=positions.size)
    return swapped
