"""A CTC recogniser's kept step evidence scores any text of its line: exact CTC, case and spaces aside."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.step_evidence import StepEvidence, fold_keys, with_found_mark
from tests import rendering

KEYS = ["<blank>", "a", "b", "A", " "]


def _brute_force(probabilities: np.ndarray, text: str) -> float:
    """log P(text): every path of classes over the steps, collapsed as CTC collapses it (repeats, blanks)."""
    folded = fold_keys(KEYS)
    target = [char for char in text.lower() if not char.isspace()]
    total = 0.0
    steps, count = probabilities.shape
    for path in itertools.product(range(count), repeat=steps):
        symbols = [str(folded[index]) for index in path]
        collapsed = [symbol for symbol, _ in itertools.groupby(symbols)]
        if [symbol for symbol in collapsed if symbol] == target:
            total += math.prod(probabilities[step, index] for step, index in enumerate(path))
    return math.log(total)


def _random_steps(seed: int, steps: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(len(KEYS)), size=steps)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("text", ["a", "ab", "aa", "ba b", "Ab", "aba"])
def test_the_likelihood_is_the_sum_over_every_alignment(seed: int, text: str) -> None:
    probabilities = _random_steps(seed)
    evidence = StepEvidence.of(probabilities, fold_keys(KEYS), kept=len(KEYS))
    assert evidence.log_likelihood(text) == pytest.approx(_brute_force(probabilities, text), rel=1e-9)


def test_case_and_spaces_do_not_count_and_a_text_longer_than_the_steps_has_no_alignment() -> None:
    evidence = StepEvidence.of(_random_steps(3), fold_keys(KEYS), kept=4)
    assert evidence.log_likelihood("A b") == pytest.approx(evidence.log_likelihood("ab"))
    assert evidence.log_likelihood("abababab") < -50
    assert evidence.log_likelihood("") == pytest.approx(_brute_force(_random_steps(3), ""))


def test_a_character_outside_the_kept_classes_gets_what_they_leave_shared_out() -> None:
    probabilities = np.array([[0.05, 0.9, 0.02, 0.02, 0.01]])  # one step: mostly `a`
    evidence = StepEvidence.of(probabilities, fold_keys(KEYS), kept=1)
    # `a` and `A` fold together, but only `a` was kept; what is left (0.1) goes to each of four others.
    assert evidence.log_likelihood("a") == pytest.approx(math.log(0.9))
    assert evidence.log_likelihood("b") == pytest.approx(math.log(0.1 / 4))


def test_a_mark_found_on_the_paper_is_scored_apart_from_the_recognisers_evidence() -> None:
    scores = {"Item one": -0.5, "- Item one": -20.0}
    bullet = with_found_mark(scores.__getitem__, "•", at_start=True, confidence=0.9)
    assert bullet is not None
    assert bullet("• Item one") == pytest.approx(-0.5)
    assert bullet("Item one") == pytest.approx(-0.5 + math.log(0.1))
    assert bullet("- Item one") == pytest.approx(-20.0 + math.log(0.1))
    assert with_found_mark(None, ":", at_start=False, confidence=0.9) is None


def test_the_engine_scores_its_own_text_above_a_misread_once_asked_to_keep_evidence(
    engine: PpocrOnnxEngine,
) -> None:
    page = rendering.receipt()
    assert all(line.likelihood is None for line in engine.recognize(page.bgr()).lines)
    assert engine.keep_step_evidence(4)
    try:
        lines = engine.recognize(page.bgr()).lines
    finally:
        engine.keep_step_evidence(0)
    scored = [line for line in lines if line.likelihood is not None and len(line.text) >= 4]
    assert len(scored) >= 5
    for line in scored:
        assert line.likelihood is not None
        own = line.likelihood(line.text)
        assert own == pytest.approx(line.likelihood(line.text.swapcase()))
        misread = line.text[:-1] + ("#" if line.text[-1] != "#" else "%")
        assert line.likelihood(misread) < own - 3, line.text
    assert all(line.likelihood is None for line in engine.recognize(page.bgr()).lines)
