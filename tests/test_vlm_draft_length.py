"""The draft length follows what drafts earn at each depth and what verifying them costs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from appliance.engines.vlm_gguf.draft_length import (
    BatchCosts,
    DepthAcceptance,
    DraftLength,
    GroupDraftLengths,
)


def gpu_like(batch: int) -> float:
    return 1 + 0.1 * (batch - 1)


def _feed(lengths: DraftLength, steps: int, right_until: int) -> None:
    """Steps whose drafts are right up to depth `right_until` and wrong just after it."""
    for _ in range(steps):
        proposed = lengths.k
        lengths.observe(proposed, min(right_until, proposed), 1 + proposed, 1.0)


def test_drafts_that_keep_being_right_grow_long_where_verifying_is_cheap() -> None:
    lengths = DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like)
    _feed(lengths, 30, right_until=99)
    assert lengths.k == 16
    assert lengths.acceptance(16) > 0.9


def test_drafts_wrong_after_two_tokens_stay_short() -> None:
    lengths = DraftLength(k=8, k_min=1, k_max=16, batch_cost=gpu_like)
    _feed(lengths, 30, right_until=2)
    assert lengths.acceptance(1) > 0.9
    assert lengths.acceptance(3) < 0.3
    assert lengths.k in (2, 3)  # the third is tried now and then: it is cheap


def test_where_each_token_costs_a_full_pass_drafts_stay_at_one() -> None:
    # k tokens verified cost k single steps: even drafts right 96% of the time save nothing.
    lengths = DraftLength(k=4, k_min=1, k_max=16, batch_cost=float)
    _feed(lengths, 30, right_until=99)
    assert lengths.k == 1
    assert lengths.expected_tokens(1) / lengths.cost(2) > lengths.expected_tokens(4) / lengths.cost(5)


def test_an_unmeasured_longer_draft_is_tried_until_its_cost_is_known() -> None:
    lengths = DraftLength(k=1, k_min=1, k_max=16)
    for _ in range(64):
        k = lengths.k
        # Passes over up to 4 tokens cost 1 ms, then every token 1 ms more; drafts always right.
        lengths.observe(k, k, 1 + k, 1.0 + max(0, k - 3))
    assert lengths.k == 3  # found by trying, kept because it is the cheapest per token
    assert lengths.cost(5) == 2.0  # the longer one was timed (unmeasured, it would be taken as 1)


def test_a_page_whose_drafts_turn_bad_shortens_them_within_a_few_dozen_steps() -> None:
    lengths = DraftLength(k=4, k_min=1, k_max=16, batch_cost=gpu_like)
    _feed(lengths, 100, right_until=99)
    assert lengths.k == 16
    _feed(lengths, 40, right_until=0)
    assert lengths.k == 1


def test_costs_are_the_measured_medians_with_lines_between_and_beyond() -> None:
    lengths = DraftLength(k=4, k_min=1, k_max=16)
    for milliseconds in (2.0, 2.0, 50.0):  # one slow pass does not move the median
        lengths.observe(0, 0, 1, milliseconds)
    for _ in range(3):
        lengths.observe(4, 4, 5, 4.0)
    assert lengths.cost(1) == 2.0
    assert lengths.cost(5) == 4.0
    assert lengths.cost(3) == pytest.approx(3.0)  # on the line between 1 and 5
    assert lengths.cost(9) == pytest.approx(6.0)  # the last slope carried on
    lengths = DraftLength(k=4, k_min=1, k_max=16)
    lengths.observe(4, 4, 5, 10.0)
    assert lengths.cost(2) == pytest.approx(4.0)  # below the one measured size: in proportion


def test_an_untried_depth_takes_the_rate_of_the_depth_above() -> None:
    lengths = DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like)
    for _ in range(10):
        lengths.observe(2, 1, 3, 1.0)
    assert lengths.acceptance(3) == lengths.acceptance(2)
    assert lengths.acceptance(2) < lengths.acceptance(1)


def test_costs_measured_on_one_page_serve_the_next() -> None:
    costs = BatchCosts()
    first = DraftLength(k=4, k_min=1, k_max=16, costs=costs)
    for _ in range(3):
        first.observe(4, 4, 5, 4.0)
    second = DraftLength(k=4, k_min=1, k_max=16, costs=costs)
    assert second.cost(5) == 4.0
    assert DraftLength(k=4, k_min=1, k_max=16).cost(5) == 5.0  # knowing nothing: b tokens cost b


def _group_pass(
    lengths: GroupDraftLengths, lines: list[int], right_until: dict[int, int], cost: Callable[[int], float]
) -> dict[int, int]:
    """One pass of lines side by side; line i's drafts are right up to depth right_until[i]."""
    chosen = lengths.lengths(lines, len(lines))
    for line, k in chosen.items():
        lengths.learn(line, k, min(right_until[line], k))
    lengths.observe_pass(len(lines) + sum(chosen.values()), cost(len(lines) + sum(chosen.values())))
    return chosen


def test_lines_side_by_side_draft_far_where_a_pass_costs_alike_and_a_bad_line_stays_short() -> None:
    # Passes cost the same up to 256 tokens (a GPU's launch-bound passes for a small model).
    lengths = GroupDraftLengths(k=4, k_min=1, k_max=16)
    right = {0: 99, 1: 99, 2: 99, 3: 0}
    for _ in range(40):
        chosen = _group_pass(lengths, [0, 1, 2, 3], right, lambda batch: 1.0 + max(0, batch - 256) * 0.01)
    assert [chosen[line] for line in (0, 1, 2)] == [16, 16, 16]
    # The line whose drafts are never right gets fewer: it adds tokens to the pass for nothing.
    assert chosen[3] < 16


def test_lines_side_by_side_draft_as_alone_where_each_token_costs_a_pass() -> None:
    lengths = GroupDraftLengths(k=4, k_min=1, k_max=16, batch_cost=float)
    right = {0: 99, 1: 99, 2: 99}
    for _ in range(30):
        chosen = _group_pass(lengths, [0, 1, 2], right, float)
    assert chosen == {0: 1, 1: 1, 2: 1}


def test_lines_side_by_side_keep_drafts_shortest_where_they_earn_least() -> None:
    # Cost grows with the pass: drafts go to the lines whose drafts are right, in depth order.
    lengths = GroupDraftLengths(k=4, k_min=1, k_max=16, batch_cost=lambda batch: 1 + 0.1 * (batch - 1))
    right = {0: 99, 1: 2}
    for _ in range(30):
        chosen = _group_pass(lengths, [0, 1], right, float)
    assert chosen[0] == 16
    assert chosen[1] in (2, 3)


def test_lines_side_by_side_draft_from_the_first_pass_and_nothing_for_lines_not_drafting() -> None:
    lengths = GroupDraftLengths(k=4, k_min=1, k_max=16)
    assert lengths.lengths([0, 2], 3) == {0: 4, 2: 4}
    assert lengths.lengths([], 3) == {}


def test_a_page_starts_from_earlier_pages_rates_and_adds_its_own_to_them() -> None:
    prior = DepthAcceptance(16)
    first = DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like, prior=prior)
    _feed(first, 30, right_until=99)
    # A new page whose hint has been right so far drafts far from its first step, not from k.
    second = DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like, prior=prior)
    assert second.k == 16
    # Its own steps soon outweigh the prior: drafts wrong from the first token shorten it.
    _feed(second, 10, right_until=0)
    assert second.k == 1
    # And what it saw goes into the prior: the next page starts shorter than the second did.
    assert DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like, prior=prior).k < 16
    assert DraftLength(k=2, k_min=1, k_max=16, batch_cost=gpu_like).k == 2  # no prior: k


def test_lines_side_by_side_start_from_earlier_lines_rates() -> None:
    prior = DepthAcceptance(16)
    first = GroupDraftLengths(k=4, k_min=1, k_max=16, batch_cost=gpu_like, prior=prior)
    for _ in range(20):
        _group_pass(first, [0, 1], {0: 99, 1: 99}, gpu_like)
    later = GroupDraftLengths(k=4, k_min=1, k_max=16, batch_cost=gpu_like, prior=prior)
    assert later.lengths([0, 1], 2) == {0: 16, 1: 16}
