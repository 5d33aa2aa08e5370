"""The learning rate's schedule: warm-up, then the cosine to its floor by step or by the run's minutes."""

from __future__ import annotations

import pytest

from train.schedule import FLOOR, RunBudget, by_steps, by_time, cosine


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


class _Clock:
    """A clock set by hand: `now` seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_stops_a_run_early_enough_for_its_export_and_last_evaluation() -> None:
    budget = RunBudget(started=100.0, seconds=480.0, eval_seconds=60.0)
    assert budget.stop() == pytest.approx(100.0 + 480.0 - 20.0 - 60.0 - 5.0)
    budget.eval_seconds, budget.step_seconds = 12.0, 0.1  # as the run times them
    assert budget.stop() == pytest.approx(100.0 + 480.0 - 20.0 - 12.0 - 0.5)


def test_a_run_is_spent_at_its_stop_or_its_step_limit_whichever_comes_first() -> None:
    # Stop at 100 + 480 - 20 - 60 - 5 = 495 s.
    by_time_alone = RunBudget(started=100.0, seconds=480.0, eval_seconds=60.0)
    assert not by_time_alone.spent(10**6, now=495.0)  # no step limit: any number of steps
    assert by_time_alone.spent(1, now=495.5)
    limited = RunBudget(started=100.0, seconds=480.0, eval_seconds=60.0, max_steps=300)
    assert not limited.spent(299, now=200.0)
    assert limited.spent(300, now=200.0)  # the faster card stops at the steps of the slower
    assert limited.spent(12, now=496.0)  # the slower card still stops by the time
    with pytest.raises(ValueError, match="schedule in steps"):
        by_time(10, limited)  # it would stop part of the way down its cosine
    with pytest.raises(ValueError, match="positive"):
        RunBudget(started=0.0, seconds=60.0, max_steps=-1)


def test_by_time_reaches_the_floor_when_the_run_stops_whatever_the_steps() -> None:
    # Two boxes, one three times as fast: after the same warm-up, the same rate at the same time.
    budget = RunBudget(started=0.0, seconds=175.0, eval_seconds=50.0)  # stops at 100 s
    slow_clock, fast_clock = _Clock(), _Clock()
    slow, fast = by_time(10, budget, slow_clock), by_time(10, budget, fast_clock)
    assert slow(4) == pytest.approx(0.5)  # warming up: by step
    slow_clock.now = fast_clock.now = 10.0
    assert slow(10) == pytest.approx(1.0)  # the cosine starts here
    assert fast(10) == pytest.approx(1.0)
    slow_clock.now = fast_clock.now = 55.0
    assert slow(100) == pytest.approx(cosine(0.5))
    assert fast(300) == pytest.approx(cosine(0.5))
    slow_clock.now = 100.0
    assert slow(190) == pytest.approx(FLOOR)
    # The stop moves as the step's and the evaluation's times are learnt: the share of the way
    # from the warm-up's end to it is what counts.
    budget.eval_seconds = 20.0  # the evaluation timed: stops at 130 s
    fast_clock.now = 70.0
    assert fast(500) == pytest.approx(cosine(0.5))
    fast_clock.now = 140.0
    assert fast(900) == pytest.approx(FLOOR)
