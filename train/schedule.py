"""The learning rate's schedule: a linear warm-up, then a cosine down to 5%, over steps or over minutes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

FLOOR = 0.05  # the cosine ends at this share of the peak rate


def cosine(progress: float) -> float:
    """The rate's factor `progress` of the way down the cosine (clipped to 0-1): 1 down to FLOOR."""
    done = min(1.0, max(0.0, progress))
    return FLOOR + (1.0 - FLOOR) * 0.5 * (1.0 + math.cos(math.pi * done))


def _warm_up(step: int, warmup: int) -> float:
    return (step + 1) / warmup


def by_steps(total: int, warmup: int) -> Callable[[int], float]:
    """The factor at each step of a schedule `total` steps long, its first `warmup` rising linearly."""

    def factor(step: int) -> float:
        if step < warmup:
            return _warm_up(step, warmup)
        return cosine((step - warmup) / max(1, total - warmup))

    return factor


@dataclass
class RunBudget:
    """When a run must stop training: its end less what the checkpoint, export and last evaluation take.

    `started` and the stop are monotonic seconds. The evaluation's and a step's seconds are
    updated as the run times them (the trainer reads its held-out lines once before the first
    step, so the evaluation is timed before anything asks for the stop), and the stop moves with
    them.
    """

    started: float
    seconds: float
    eval_seconds: float = 0.0
    step_seconds: float = 1.0
    max_steps: int = 0  # stop at this step even with time left (0: the time alone)

    def __post_init__(self) -> None:
        if self.max_steps < 0:
            raise ValueError(f"a step limit of {self.max_steps}: give a positive one, or 0 for none")

    def stop(self) -> float:
        # 20 s for the checkpoint and the export (about 15), and five steps' slack.
        return self.started + self.seconds - 20.0 - self.eval_seconds - 5 * self.step_seconds

    def spent(self, step: int, now: float) -> bool:
        """Whether the run must stop training after `step` steps at monotonic time `now`."""
        return now > self.stop() or 0 < self.max_steps <= step


def by_time(
    warmup: int, budget: RunBudget, clock: Callable[[], float] = time.monotonic
) -> Callable[[int], float]:
    """The warm-up over steps, then the cosine over the time from its end to the budget's stop.

    A schedule in steps ends where the box's speed puts it: a faster box trains on at the floor
    rate after it, a slower one stops mid-way down. Over time, the rate reaches the floor as the
    run stops, on any box; runs on boxes of different speeds take the same path by time, not by
    step. The stop is read at every step, since it moves as the run times its steps. A budget
    with a step limit is refused: the run would stop there, part of the way down.
    """
    if budget.max_steps:
        raise ValueError(
            "a time schedule ends at the time's stop; a step limit goes with a schedule in steps"
        )
    cosine_from: float | None = None  # when the warm-up ended

    def factor(step: int) -> float:
        nonlocal cosine_from
        if step < warmup:
            return _warm_up(step, warmup)
        now = clock()
        if cosine_from is None:
            cosine_from = now
        return cosine((now - cosine_from) / max(budget.stop() - cosine_from, 1e-9))

    return factor
