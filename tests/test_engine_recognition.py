"""The recogniser's host steps: a line's input tensor and greedy CTC decoding, against their plain rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from appliance.engines.ppocr_onnx.recognition import ctc_steps, gap_maxima, normalize_into


def _steps_by_loop(best: list[int]) -> list[int]:
    """Greedy CTC as a loop: a step writes when its class is not the blank and not the one before."""
    written, previous = [], -1
    for step, index in enumerate(best):
        if index not in (0, previous):
            written.append(step)
        previous = index
    return written


def test_ctc_steps_drop_blanks_and_merge_repeats() -> None:
    best = np.array([0, 3, 3, 0, 3, 5, 5, 5, 0, 0, 2])
    assert ctc_steps(best).tolist() == [1, 4, 5, 10]
    assert ctc_steps(np.array([4])).tolist() == [0]
    assert ctc_steps(np.zeros(6, dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("seed", range(5))
def test_ctc_steps_match_the_loop_on_random_lines(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        best = np.repeat(rng.integers(0, 4, 60), rng.integers(1, 4, 60))
        assert ctc_steps(best).tolist() == _steps_by_loop(best.tolist())


def test_gap_maxima_take_the_steps_strictly_between_characters() -> None:
    values = np.array([0.9, 0.1, 0.4, 0.2, 0.8, 0.3, 0.7], dtype=np.float32)
    # Characters at steps 0, 3, 4 and 6: gaps 1..2, none, 5..5.
    assert gap_maxima(values, np.array([0, 3, 4, 6])) == [
        0.0,
        float(np.float32(0.4)),
        0.0,
        float(np.float32(0.3)),
    ]
    assert gap_maxima(values, np.array([2])) == [0.0]
    assert gap_maxima(values, np.array([], dtype=np.intp)) == [0.0]


@pytest.mark.parametrize("seed", range(5))
def test_gap_maxima_match_slices_on_random_lines(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        values = rng.random(80).astype(np.float32)
        emitted = np.sort(rng.choice(80, int(rng.integers(2, 40)), replace=False))
        expected = [0.0] + [
            float(values[before + 1 : after].max()) if after - before > 1 else 0.0
            for before, after in itertools.pairwise(emitted)
        ]
        assert gap_maxima(values, emitted) == expected


def test_normalize_into_writes_the_float32_arithmetic_channels_first() -> None:
    line = np.random.default_rng(0).integers(0, 256, (48, 77, 3), dtype=np.uint8)
    tensor = np.zeros((3, 48, 100), dtype=np.float32)
    normalize_into(line, tensor[:, :, :77])
    expected = ((line.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)
    assert np.array_equal(tensor[:, :, :77].view(np.uint32), expected.view(np.uint32))
    assert not tensor[:, :, 77:].any()  # the padding stays blank
