"""The learning rate's schedule: warm-up, then the cosine to its floor by step or by the run's minutes."""

from __future__ import annotations

import pytest

from train.schedule import FLOOR, ByTime, by_steps, cosine


def test_the_cosine_runs_from_the_peak_to_the_floor_and_stays_there() -> None:
    assert cosine(0.0) == pytest.approx(1.0)
    assert cosine(0.5) == pytest.approx((1.0 + FLOOR) / 2)
    assert cosine(1.0) == pytest.approx(FLOOR)
    assert cosine(1.7) == pytest.approx(FLOOR)  # past the end: the floor, not back up
    assert cosine(-0.2) == pytest.approx(1.0)


def test_by_steps_warms_up_linearly_then_ends_the_cosine_at_its_total() -> None:
    factor = by_steps(total=1100, warmup=100)
    assert factor(0) == pytest.approx(0.01)
    assert factor(49) == pytest.approx(0.5)
    assert factor(100) == pytest.approx(1.0)
    assert factor(600) == pytest.approx(cosine(0.5))
    assert factor(1100) == pytest.approx(FLOOR)
    assert factor(2100) == pytest.approx(FLOOR)


def test_by_time_reaches_the_floor_when_the_run_stops_whatever_the_steps() -> None:
    # Two boxes, one three times as fast: after the same warm-up, the same rate at the same time.
    slow, fast = ByTime(warmup=10), ByTime(warmup=10)
    assert slow.factor(4, now=3.0, stop=100.0) == pytest.approx(0.5)  # warming up: by step
    assert slow.factor(10, now=10.0, stop=100.0) == pytest.approx(1.0)  # the cosine starts here
    assert fast.factor(10, now=10.0, stop=100.0) == pytest.approx(1.0)
    assert slow.factor(100, now=55.0, stop=100.0) == pytest.approx(cosine(0.5))
    assert fast.factor(300, now=55.0, stop=100.0) == pytest.approx(cosine(0.5))
    assert slow.factor(190, now=100.0, stop=100.0) == pytest.approx(FLOOR)
    # The stop moves as the step's and the evaluation's times are learnt: the share of the way
    # from the warm-up's end to it is what counts.
    assert fast.factor(500, now=70.0, stop=130.0) == pytest.approx(cosine(0.5))
    assert fast.factor(900, now=140.0, stop=130.0) == pytest.approx(FLOOR)
