"""The learning rate's schedule: a linear warm-up, then a cosine down to 5%, over steps or over minutes."""

from __future__ import annotations

import math
from collections.abc import Callable

FLOOR = 0.05  # the cosine ends at this share of the peak rate


def cosine(progress: float) -> float:
    """The rate's factor `progress` of the way down the cosine (clipped to 0-1): 1 down to FLOOR."""
    done = min(1.0, max(0.0, progress))
    return FLOOR + (1.0 - FLOOR) * 0.5 * (1.0 + math.cos(math.pi * done))


def by_steps(total: int, warmup: int) -> Callable[[int], float]:
    """The factor at each step of a schedule `total` steps long, its first `warmup` rising linearly."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return cosine((step - warmup) / max(1, total - warmup))

    return factor


class ByTime:
    """The warm-up over steps, then the cosine over the time from its end to the run's stop.

    A schedule in steps ends where the box's speed puts it: a faster box trains on at the floor
    rate after it, a slower one stops mid-way down. Over time, the rate reaches the floor as the
    run's minutes end, on any box; runs on boxes of different speeds take the same path by time,
    not by step.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self._cosine_from: float | None = None  # when the warm-up ended (a monotonic time)

    def factor(self, step: int, now: float, stop: float) -> float:
        """The factor for `step` at time `now`, the run to stop at time `stop` (both monotonic seconds)."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self._cosine_from is None:
            self._cosine_from = now
        return cosine((now - self._cosine_from) / max(stop - self._cosine_from, 1e-9))
