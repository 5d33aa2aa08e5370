"""Answer tokens swapped in teacher forcing: only answer tokens, about the share asked, labels kept."""

from __future__ import annotations

import numpy as np

from train.model import IGNORE
from train.swapped_tokens import swap_answer_tokens

PAD = 0
EOS = 9


def _batch() -> tuple[np.ndarray, np.ndarray]:
    # Two lines: a prompt of 5 tokens (ids 100-104), an answer, the end marker, then padding.
    prompt = [100, 101, 102, 103, 104]
    answers = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4], [5, 6, 7]]
    length = len(prompt) + max(len(a) for a in answers) + 1
    ids = np.full((2, length), PAD, np.int64)
    labels = np.full((2, length), IGNORE, np.int64)
    for row, answer in enumerate(answers):
        x = [*prompt, *answer, EOS]
        ids[row, : len(x)] = x
        labels[row, len(prompt) : len(x)] = [*answer, EOS]
    return ids, labels


def test_nothing_is_swapped_at_a_share_of_zero() -> None:
    ids, labels = _batch()
    assert swap_answer_tokens(ids, labels, 0.0, np.random.default_rng(1)) is ids


def test_only_answer_tokens_before_the_end_marker_change() -> None:
    ids, labels = _batch()
    rng = np.random.default_rng(3)
    changed = np.zeros(ids.shape, bool)
    for _ in range(200):
        changed |= swap_answer_tokens(ids, labels, 0.5, rng) != ids
    swappable = (labels != IGNORE) & (ids != EOS)
    assert changed[swappable].any()
    assert not changed[~swappable].any()  # prompt, end markers and padding untouched
    assert np.array_equal(labels, _batch()[1])


def test_replacements_are_the_batchs_answer_tokens() -> None:
    ids, labels = _batch()
    swapped = swap_answer_tokens(ids, labels, 1.0, np.random.default_rng(4))
    answer_tokens = set(ids[(labels != IGNORE) & (ids != EOS)].tolist())
    replaced = swapped[(swapped != ids)]
    assert replaced.size > 0
    assert set(replaced.tolist()) <= answer_tokens  # never a prompt id, the end marker or padding


def test_about_the_share_asked_is_swapped() -> None:
    ids, labels = _batch()
    swappable = ((labels != IGNORE) & (ids != EOS)).sum()
    rng = np.random.default_rng(5)
    # A drawn replacement may equal the token it replaces (29 in 225 here, from the tokens' counts),
    # so fewer tokens change than are drawn: 0.2 * (1 - 29/225) = 0.174 expected.
    changed = sum(int((swap_answer_tokens(ids, labels, 0.2, rng) != ids).sum()) for _ in range(2000))
    share = changed / (2000 * swappable)
    assert 0.2 * 0.75 < share < 0.2 * 0.95
