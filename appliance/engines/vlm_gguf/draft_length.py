"""How many tokens to draft next: the length that should write the most tokens per millisecond.

A step verifies the chosen token and k drafts in one forward pass; it writes the chosen token
and every draft up to the first wrong one. Two things decide the best k, one differing by page and
one by machine, so both are learnt as pages are written (the first per page, starting from the
engine's earlier pages; the second over all the engine's pages):

- how often a draft is right at each depth (the 1st drafted token, the 2nd after a right 1st,
  ...): OCR hints go wrong in bursts (a misread word throws the next few tokens off), so deep
  drafts are right less often than shallow ones and a single acceptance rate overstates them;
- what a forward pass over b tokens costs: on a GPU up to 8 tokens cost little more than one
  (1.1-2.6x on an H200), on a 2-core CPU about half of b times one (bench/README.md).

The expected tokens of a step with k drafts are 1 + a1 + a1*a2 + ... + a1*...*ak (ad: the share of
tries at depth d that were right), its cost c(k + 1); the next k is the one with the most tokens
per cost. Rules of thumb (double k while all are accepted) let k climb to 16 on runs of right
drafts and then pay 16 tokens' verification for every misread word: on the CPU with a hint
corrupted at the ONNX engine's measured rate that made drafting slower than no drafting at all.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Iterator, Sequence

# Counts from earlier in the page fade by this much a step, so a page whose hint turns bad (or
# good) halfway changes k within a dozen or two steps.
_FADE = 0.9
# Timings kept per batch size (the median is used: one slow pass must not steer k).
_SAMPLES = 9
# Every so many steps one draft longer than the best is tried, until its batch size has been
# timed a few times: costs are only known where they were measured, and a size timed once, slowly
# (the page's first pass, say), would otherwise never be tried again.
_PROBE_EVERY = 8
_PROBE_SAMPLES = 3
# A page starts from earlier pages' rates by depth as sure of them as this many steps of its own
# would make it: its own first steps already outweigh them.
_PRIOR_WEIGHT = 3.0


class BatchCosts:
    """What forward passes over b tokens have taken (ms), kept across pages.

    A property of the model, the machine and the settings, not of a page: the engine keeps one for
    its life, so a page (or a line crop, a few dozen tokens) starts from what earlier ones measured.
    """

    def __init__(self) -> None:
        self._timings: dict[int, deque[float]] = {}
        self.observed = 0  # passes timed in all

    def observe(self, batch: int, milliseconds: float) -> None:
        self._timings.setdefault(batch, deque(maxlen=_SAMPLES)).append(milliseconds)
        self.observed += 1

    def samples(self, batch: int) -> int:
        return len(self._timings.get(batch, ()))

    def medians(self) -> dict[int, float]:
        return {size: statistics.median(times) for size, times in self._timings.items()}


class DepthAcceptance:
    """How often drafts were right at each depth, earlier steps fading.

    One per page (or line) as it is written; and one per engine over all its pages, the prior a
    new page starts from (`seeded`): a line of a dozen tokens is written in two or three passes,
    too few to learn its own rates before they would have paid.
    """

    def __init__(self, k_max: int) -> None:
        self.k_max = k_max
        self._tries = [0.0] * (k_max + 1)  # index d: fading count of drafts tried at depth d
        self._right = [0.0] * (k_max + 1)

    @property
    def tried(self) -> bool:
        return self._tries[1] > 0

    def seeded(self, weight: float) -> DepthAcceptance:
        """A fresh record that starts from these rates, as sure of them as `weight` steps would be."""
        seed = DepthAcceptance(self.k_max)
        scale = min(1.0, weight / self._tries[1]) if self.tried else 0.0
        seed._tries = [count * scale for count in self._tries]
        seed._right = [count * scale for count in self._right]
        return seed

    def learn(self, proposed: int, accepted: int) -> None:
        """One step: `proposed` drafts, of which the first `accepted` were right."""
        for depth in range(1, self.k_max + 1):
            self._tries[depth] *= _FADE
            self._right[depth] *= _FADE
        for depth in range(1, min(proposed, accepted + 1, self.k_max) + 1):
            self._tries[depth] += 1
            if depth <= accepted:
                self._right[depth] += 1

    def rates(self, deepest: int) -> Iterator[float]:
        """The rates of depths 1..deepest, each pulled toward the depth above it.

        The first is pulled toward one half; so a depth tried once or never takes its neighbour's
        rate rather than a guess of its own.
        """
        rate, weight = 0.5, 1.0
        for depth in range(1, deepest + 1):
            rate = (self._right[depth] + weight * rate) / (self._tries[depth] + weight)
            weight = 2.0
            yield rate

    def expected(self, deepest: int) -> list[float]:
        """Expected tokens of a step with 0..deepest drafts: 1 + a1 + a1*a2 + ..., built depth by depth."""
        totals, chain = [1.0], 1.0
        for rate in self.rates(deepest):
            chain *= rate
            totals.append(totals[-1] + chain)
        return totals


def estimated_cost(batch: int, known: dict[int, float]) -> float:
    """What a pass over `batch` tokens costs, from the median timings of the sizes measured so far."""
    if not known:
        return float(batch)
    if batch in known:
        return known[batch]
    sizes = sorted(known)
    below = [size for size in sizes if size < batch]
    above = [size for size in sizes if size > batch]
    if below and above:  # between two measured sizes: on the line through them
        low, high = below[-1], above[0]
        return known[low] + (known[high] - known[low]) * (batch - low) / (high - low)
    if above:  # smaller than anything measured: in proportion to the smallest measured
        return known[above[0]] * batch / above[0]
    if len(sizes) >= 2:  # larger: the last measured slope carried on (never falling)
        low, high = sizes[-2], sizes[-1]
        slope = max((known[high] - known[low]) / (high - low), 0.0)
        return known[high] + slope * (batch - high)
    return known[sizes[-1]] * batch / sizes[-1]


class _Lengths:
    """What a page's and a group's draft lengths share: the limits, the pass costs, earlier pages' rates."""

    def __init__(
        self,
        k: int,
        k_min: int,
        k_max: int,
        batch_cost: Callable[[int], float] | None = None,
        costs: BatchCosts | None = None,
        *,
        prior: DepthAcceptance | None = None,
    ) -> None:
        self.k_min, self.k_max = k_min, k_max
        self._first = max(k_min, min(k, k_max))  # the first step's drafts, while no rate is known
        self._fixed_cost = batch_cost  # a known cost model (tests, a site's measurement)
        self._costs = costs if costs is not None else BatchCosts()
        # `prior`: the rates of earlier pages (the caller keeps it); what is learnt here goes in too.
        self._prior = prior
        self._start()

    def _start(self) -> None:
        """Set up what the kind of lengths keeps of its own (called last by __init__)."""

    def _fresh_depths(self) -> DepthAcceptance:
        """A page's (or line's) rates by depth at its start: the prior's, weighted down, or none."""
        return self._prior.seeded(_PRIOR_WEIGHT) if self._prior is not None else DepthAcceptance(self.k_max)

    def _learn(self, depths: DepthAcceptance, proposed: int, accepted: int) -> None:
        depths.learn(proposed, accepted)
        if self._prior is not None:
            self._prior.learn(proposed, accepted)

    def _pricing(self) -> Callable[[int], float]:
        """What a pass over b tokens costs now (the medians taken once: this runs every step)."""
        if self._fixed_cost is not None:
            return self._fixed_cost
        known = self._costs.medians()
        return lambda batch: estimated_cost(batch, known)


class DraftLength(_Lengths):
    """Learns a page's acceptance by depth (and cost by batch size); proposes the next draft length."""

    def _start(self) -> None:
        self._steps = 0
        self._depths = self._fresh_depths()
        self.k = self.best() if self._depths.tried else self._first

    def observe(self, proposed: int, accepted: int, batch: int, milliseconds: float) -> None:
        """One step: `proposed` drafts of which the first `accepted` were right, `batch` tokens fed."""
        self._costs.observe(batch, milliseconds)
        if not proposed:
            return
        self._learn(self._depths, proposed, accepted)
        self._steps += 1
        best = self.best()
        longer = best + 1
        if (
            self._fixed_cost is None
            and self._steps % _PROBE_EVERY == 0
            and longer <= self.k_max
            and self._costs.samples(longer + 1) < _PROBE_SAMPLES
        ):
            best = longer
        self.k = best

    def acceptance(self, depth: int) -> float:
        """Share of drafts right at `depth`, given every shallower one was."""
        return list(self._depths.rates(depth))[-1]

    def cost(self, batch: int) -> float:
        """What a forward pass over `batch` tokens costs (ms, or the fixed model's unit)."""
        return self._pricing()(batch)

    def expected_tokens(self, k: int) -> float:
        """Tokens a step with k drafts writes on average (the chosen one and the right drafts)."""
        return self._depths.expected(k)[k]

    def best(self) -> int:
        """The draft length with the most expected tokens per unit of cost (the shorter on a tie)."""
        # Runs every step: the medians once, the acceptance chain built once for every depth.
        cost = self._pricing()
        expected = self._depths.expected(self.k_max)
        rates = {k: expected[k] / max(cost(k + 1), 1e-9) for k in range(self.k_min, self.k_max + 1)}
        top = max(rates.values())
        return min(k for k, value in rates.items() if value >= top * 0.999)


class GroupDraftLengths(_Lengths):
    """Draft lengths for lines decoded side by side, where one pass verifies every line's drafts.

    A pass's cost is that of all its tokens together, so the lengths are chosen together: each
    line's acceptance by depth is learnt as DraftLength learns a page's, and the drafts likeliest
    to be right, over all the lines, are taken while they raise the expected tokens per unit of
    the pass's cost. A line's deeper draft is never likelier than its shallower ones (each is
    right only if they all are), so taking the likeliest first always takes a line's drafts in
    order. On a GPU, where a pass over a few hundred tokens costs about what one over a few dozen
    does, every line drafts far; on a CPU, where cost follows the tokens, each drafts as it would
    alone. Lines are named by any int (their sequence); each starts from the prior when first seen.
    """

    def _start(self) -> None:
        self._depths: dict[int, DepthAcceptance] = {}
        self._passes = 0

    def _line(self, line: int) -> DepthAcceptance:
        if line not in self._depths:
            self._depths[line] = self._fresh_depths()
        return self._depths[line]

    def lengths(self, drafting: Sequence[int], written: int) -> dict[int, int]:
        """How many tokens each of the `drafting` lines drafts on the next pass.

        `written`: the lines the pass feeds a token each, the drafting ones among them.
        """
        if not drafting:
            return {}
        if not self._passes and not (self._prior is not None and self._prior.tried):
            return dict.fromkeys(drafting, self._first)
        cost = self._pricing()
        counts = dict.fromkeys(drafting, self.k_min)
        likeliest: list[tuple[float, int]] = []  # (chance the draft is right, line), deeper drafts after
        gained = float(written)  # the tokens the pass is expected to write
        deeper = range(self.k_min + 1, self.k_max + 1)
        for line in drafting:
            expected = self._line(line).expected(self.k_max)
            gained += expected[self.k_min] - 1.0
            likeliest.extend((expected[depth] - expected[depth - 1], line) for depth in deeper)
        likeliest.sort(key=lambda item: -item[0])  # stable: a line's depths stay in order on a tie
        batch = written + self.k_min * len(drafting)
        best_rate, best_taken = gained / max(cost(batch), 1e-9), 0
        for taken, (chance, _) in enumerate(likeliest, start=1):
            gained += chance
            rate = gained / max(cost(batch + taken), 1e-9)
            if rate > best_rate * 1.001:
                best_rate, best_taken = rate, taken
        if (
            self._fixed_cost is None
            and self._passes > 0
            and self._costs.observed % _PROBE_EVERY == 0
            and self._costs.samples(batch + best_taken + len(drafting)) < _PROBE_SAMPLES
        ):
            # Now and then one draft more a line, as DraftLength probes one longer: costs are only
            # known where they were measured. Counted over the engine's passes: a group of lines
            # is written in a handful.
            best_taken = min(best_taken + len(drafting), len(likeliest))
        for _, line in likeliest[:best_taken]:
            counts[line] += 1
        return counts

    def observe_pass(self, batch: int, milliseconds: float) -> None:
        """One pass over `batch` tokens (every line's chosen token and drafts) took `milliseconds`."""
        self._costs.observe(batch, milliseconds)
        self._passes += 1

    def learn(self, line: int, proposed: int, accepted: int) -> None:
        """A line's drafts of the pass: `proposed`, of which the first `accepted` were right."""
        if proposed:
            self._learn(self._line(line), proposed, accepted)
