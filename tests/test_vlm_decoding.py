"""Speculative greedy decoding: drafts change the speed, never the output; acceptance is counted right."""

from __future__ import annotations

import time

import numpy as np
import pytest

from appliance.engines.vlm_gguf.decoding import (
    DraftPolicy,
    Generation,
    _probability,
    greedy_decode,
    greedy_decode_together,
    read_log_likelihood,
    text_log_likelihood,
)
from appliance.engines.vlm_gguf.draft_length import BatchCosts
from appliance.engines.vlm_gguf.drafts import HintDraft, ModelDraft, TextHintDraft
from appliance.engines.vlm_gguf.loop_guard import LoopGuard
from tests.fakes.language_model import CyclingModel, MarkovModel

PROMPT = [1, 2, 3]
# A GPU's verification cost (one token 1, each more 0.1): what the fakes' own timings are not.
GPU_LIKE = DraftPolicy(batch_cost=lambda batch: 1 + 0.1 * (batch - 1))


def _start(model: MarkovModel) -> np.ndarray:
    return model.append(PROMPT)[-1]


def _plain(max_tokens: int = 60, seed: int = 0) -> list[int]:
    model = MarkovModel(seed=seed)
    return greedy_decode(model, _start(model), max_tokens=max_tokens).tokens


def test_hint_of_the_models_own_output_is_fully_accepted_in_fewer_steps() -> None:
    expected = _plain()
    model = MarkovModel()
    generation = greedy_decode(
        model, _start(model), max_tokens=60, draft=HintDraft(expected), policy=GPU_LIKE
    )
    assert generation.tokens == expected
    stats = generation.stats
    assert stats.drafted > 0
    assert stats.accepted == stats.drafted
    assert stats.acceptance == 1.0
    assert stats.steps < len(expected) / 3  # k grows to 16: many tokens per forward pass
    assert stats.generated == len(expected)


def test_a_corrupted_hint_changes_acceptance_but_not_the_output() -> None:
    expected = _plain()
    hint = list(expected)
    rng = np.random.default_rng(1)
    for index in rng.choice(len(hint), size=12, replace=False):
        hint[index] = (hint[index] + 7) % 50
    model = MarkovModel()
    generation = greedy_decode(model, _start(model), max_tokens=60, draft=HintDraft(hint))
    assert generation.tokens == expected
    assert 0 < generation.stats.accepted < generation.stats.drafted
    # Every rejected token was rewound: the model holds the prompt and the kept tokens, nothing else.
    fed = model.history[len(PROMPT) :]
    assert fed == expected[: len(fed)]
    assert len(fed) >= len(expected) - 1


def test_drafting_is_switched_off_when_acceptance_falls_below_the_threshold() -> None:
    expected = _plain(max_tokens=80)
    garbage = [(token + 13) % 50 for token in expected]  # never what the model writes
    model = MarkovModel()
    policy = DraftPolicy(k=4, min_acceptance=0.3, min_drafted=16)
    generation = greedy_decode(model, _start(model), max_tokens=80, draft=HintDraft(garbage), policy=policy)
    assert generation.tokens == expected
    stats = generation.stats
    assert stats.disabled_after is not None
    # Once off, no more tokens are drafted: what was drafted stays near the switch-off point.
    assert stats.drafted < 16 + 16
    assert stats.steps > len(expected) - stats.accepted - 2


def test_draft_length_adapts_to_acceptance() -> None:
    expected = _plain()
    model = MarkovModel()
    policy = DraftPolicy(k=2, k_max=8, batch_cost=GPU_LIKE.batch_cost)
    generation = greedy_decode(model, _start(model), max_tokens=60, draft=HintDraft(expected), policy=policy)
    assert generation.stats.k_history[0] == 2
    assert max(generation.stats.k_history) == 8


def test_drafts_stay_short_where_verifying_costs_as_much_as_writing() -> None:
    # A CPU-like cost (b tokens cost b) and a hint wrong in bursts: long drafts cannot pay.
    expected = _plain(max_tokens=120)
    hint = list(expected)
    for start in range(10, 120, 15):
        hint[start : start + 3] = [(token + 7) % 50 for token in hint[start : start + 3]]
    model = MarkovModel()
    policy = DraftPolicy(k=4, batch_cost=float)
    generation = greedy_decode(model, _start(model), max_tokens=120, draft=HintDraft(hint), policy=policy)
    assert generation.tokens == expected
    assert max(generation.stats.k_history[1:]) <= 2
    # The same hint with a GPU-like cost drafts further.
    model = MarkovModel()
    policy = DraftPolicy(k=4, batch_cost=GPU_LIKE.batch_cost)
    longer = greedy_decode(model, _start(model), max_tokens=120, draft=HintDraft(hint), policy=policy)
    assert longer.tokens == expected
    assert max(longer.stats.k_history) > 4


def test_a_batch_is_timed_without_the_work_of_the_tokens_it_wrote() -> None:
    """Each written token's own work (probability, stop checks) is paid once however it was drafted:
    counted in the step it would make a batch dearer the more of its drafts were right."""
    expected = _plain(max_tokens=30)
    model = MarkovModel()
    costs = BatchCosts()

    def slow_stop_check(_tokens: list[int]) -> bool:
        time.sleep(0.05)  # 50 ms per written token, far above what the toy model's passes take
        return False

    generation = greedy_decode(
        model,
        _start(model),
        max_tokens=30,
        draft=HintDraft(expected),
        should_stop=slow_stop_check,
        costs=costs,
    )
    assert generation.tokens == expected
    assert generation.stats.accepted > 10
    timed = costs.medians()
    assert max(timed) > 2  # batches of several tokens were timed, every draft in them right
    # Counted in, a batch of n right drafts would take n x 50 ms at least; half that leaves room for
    # a loaded machine's slow passes without letting one token's work through.
    assert all(milliseconds < 25 * size for size, milliseconds in timed.items()), timed


def test_a_draft_model_sharing_the_target_is_always_right() -> None:
    expected = _plain()
    target = MarkovModel()
    drafter = MarkovModel()  # the same weights: every proposal is what the target would write
    drafter.append(PROMPT)
    generation = greedy_decode(target, _start(target), max_tokens=60, draft=ModelDraft(drafter))
    assert generation.tokens == expected
    assert generation.stats.acceptance == 1.0
    assert generation.stats.source == "draft_model"


def test_a_different_draft_model_is_verified_and_rolled_back() -> None:
    expected = _plain()
    target = MarkovModel()
    drafter = MarkovModel(seed=5)  # another model: mostly wrong proposals
    drafter.append(PROMPT)
    generation = greedy_decode(target, _start(target), max_tokens=60, draft=ModelDraft(drafter))
    assert generation.tokens == expected
    assert generation.stats.accepted < generation.stats.drafted
    # The draft model's cache holds the prompt and exactly the tokens the target kept (or fewer).
    kept = drafter.history[len(PROMPT) :]
    assert kept == expected[: len(kept)]


def test_end_token_stops_generation_also_inside_a_verified_draft() -> None:
    plain_model = MarkovModel(end_token=None)
    reference = greedy_decode(plain_model, _start(plain_model), max_tokens=40).tokens
    end = reference[25]
    first_end = reference.index(end)
    model = MarkovModel(end_token=end)
    generation = greedy_decode(model, _start(model), max_tokens=40, draft=HintDraft(reference))
    assert generation.stop_reason == "end"
    assert generation.tokens == reference[:first_end]


def test_max_tokens_cuts_exactly() -> None:
    expected = _plain(max_tokens=60)
    model = MarkovModel()
    generation = greedy_decode(model, _start(model), max_tokens=17, draft=HintDraft(expected))
    assert generation.stop_reason == "max_tokens"
    assert generation.tokens == expected[:17]


def test_loop_guard_stops_a_cycling_generation() -> None:
    model = CyclingModel(period=5)
    guard = LoopGuard(max_period=16, min_repeats=4, min_span=40, check_every=1)
    generation = greedy_decode(model, model.append([0])[-1], max_tokens=500, guard=guard)
    assert generation.stop_reason == "repetition"
    assert len(generation.tokens) < 60


def test_loop_guard_leaves_varied_text_alone() -> None:
    guard = LoopGuard(max_period=16, min_repeats=4, min_span=40, check_every=1)
    varied = list(np.random.default_rng(3).integers(0, 50, size=400))
    assert not any(guard.looping(varied[:n]) for n in range(1, len(varied)))
    # A short repeated run (a dotted leader) is not a loop either.
    leader = [*varied[:100], *([7] * 30), *varied[100:140]]
    assert not any(guard.looping(leader[:n]) for n in range(1, len(leader)))


def test_probabilities_are_the_softmax_of_the_chosen_token() -> None:
    model = MarkovModel()
    first = _start(model)
    generation = greedy_decode(model, first, max_tokens=1)
    weights = np.exp(first.astype(np.float64) - first.max())
    assert generation.probabilities[0] == pytest.approx(weights.max() / weights.sum())


@pytest.mark.parametrize("offset", [0.0, -80.0, 70.0])
@pytest.mark.parametrize("scale", [0.0, 1.0, 4.0, 30.0])
def test_probability_in_float32_agrees_with_a_float64_softmax(scale: float, offset: float) -> None:
    # A real vocabulary's width; flat, ordinary, peaked and very peaked rows, also far from zero
    # (the rows that must be shifted by their maximum first).
    row = (np.random.default_rng(7).standard_normal(151_936) * scale + offset).astype(np.float32)
    row[4321] += 12.0
    weights = np.exp(row.astype(np.float64) - row.max())
    for token in (4321, int(np.argmin(row)), 17):
        assert _probability(row, token) == pytest.approx(weights[token] / weights.sum(), rel=1e-5)


def test_hint_draft_follows_the_cursor_through_repeated_words() -> None:
    hint = [10, 11, 12, 10, 11, 13, 14]
    draft = HintDraft(hint, max_ngram=2)
    assert draft.propose([], 3) == [10, 11, 12]
    assert draft.propose([10, 11, 12], 2) == [10, 11]
    assert draft.propose([10, 11, 12, 10, 11], 2) == [13, 14]
    assert draft.propose([99], 2) == []


def _chars(text: str) -> list[int]:
    """A toy tokenizer: one token per character (its code point)."""
    return [ord(char) for char in text]


def test_text_hint_aligns_by_text_when_the_model_splits_words_its_own_way() -> None:
    pieces = {1: b"HEL", 2: b"LO", 3: b" W"}  # the model's own tokens, not the tokenizer's
    draft = TextHintDraft("HELLO WORLD", lambda token: pieces[token], _chars)
    assert draft.propose([], 3) == _chars("HEL")
    # After "HEL" + "LO" the hint continues with " WORLD": proposed afresh from the text.
    assert draft.propose([1, 2], 4) == _chars(" WOR")
    assert draft.propose([1, 2, 3], 20) == _chars("ORLD")
    # A generation that left the hint gets no proposal.
    pieces[4] = b"XYZXYZ"
    assert draft.propose([1, 2, 3, 4], 4) == []


def test_text_hint_drops_a_token_cut_by_the_fragment_end() -> None:
    # A tokenizer that merges "AB" pairs: a fragment ending inside a pair would end on "A" alone.
    def pairs(text: str) -> list[int]:
        return [
            ord(text[i]) * 1000 + (ord(text[i + 1]) if i + 1 < len(text) else 0)
            for i in range(0, len(text), 2)
        ]

    hint = "AB" * 100
    draft = TextHintDraft(hint, lambda token: b"", pairs)
    proposal = draft.propose([], 2)
    assert proposal == [ord("A") * 1000 + ord("B")] * 2


def test_text_hint_resumes_right_after_the_model_corrects_a_misread() -> None:
    hint = "SUBTOTAL 12.50\nTAX 1.00\nT0TAL 13.50\nCASH 20.00"  # the ONNX engine read 0 for O
    draft = TextHintDraft(hint, lambda token: chr(token).encode(), _chars)
    assert draft.propose(_chars("SUBTOTAL 12.50\nTAX 1.00\nT"), 2) == _chars("0T")
    # The model writes "O", which is nowhere near in the hint: nothing to propose yet.
    assert draft.propose(_chars("SUBTOTAL 12.50\nTAX 1.00\nTO"), 4) == []
    # Two letters later no long tail of the generation is in the hint either (each holds the "O"),
    # but "TA" is, right where the hint should stand: drafting resumes inside the word.
    assert draft.propose(_chars("SUBTOTAL 12.50\nTAX 1.00\nTOTA"), 4) == _chars("L 13")
    assert draft.propose(_chars("SUBTOTAL 12.50\nTAX 1.00\nTOTAL 13"), 3) == _chars(".50")


def test_text_hint_ignores_a_short_match_far_from_where_the_hint_should_be() -> None:
    hint = "INVOICE 2291\nITEM A 10.00\nITEM B 20.00\nTOTAL 30.00\nTHANK YOU QZ7 END"
    draft = TextHintDraft(hint, lambda token: chr(token).encode(), _chars)
    assert draft.propose(_chars("INVOICE 2291\nIT"), 2) == _chars("EM")
    # The model leaves the hint ("QZ" is in it, but at its far end): nothing is proposed.
    assert draft.propose(_chars("INVOICE 2291\nITQZ"), 4) == []


class _SideBySide:
    """Several MarkovModels as the sequences of one context: one pass feeds a token to each named."""

    def __init__(self, models: list[MarkovModel]) -> None:
        self.models = models
        self.passes: list[int] = []  # how many sequences each pass fed
        self.batches: list[int] = []  # how many tokens each pass fed, drafts included

    def step(self, tokens: dict[int, list[int]]) -> dict[int, np.ndarray]:
        self.passes.append(len(tokens))
        self.batches.append(sum(len(fed) for fed in tokens.values()))
        return {sequence: self.models[sequence].append(fed) for sequence, fed in tokens.items()}

    def rewind(self, sequence: int, count: int) -> None:
        self.models[sequence].rewind(count)

    def is_end(self, token: int) -> bool:
        return self.models[0].is_end(token)


def test_lines_decoded_side_by_side_write_what_each_writes_alone_in_the_passes_of_the_longest() -> None:
    seeds = [0, 1, 2, 3]
    alone = []
    for seed in seeds:
        model = MarkovModel(seed=seed, end_token=7)
        alone.append(greedy_decode(model, _start(model), max_tokens=60))
    models = [MarkovModel(seed=seed, end_token=7) for seed in seeds]
    target = _SideBySide(models)
    together = greedy_decode_together(target, [_start(model) for model in models], max_tokens=60)
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert [g.probabilities for g in together] == [g.probabilities for g in alone]
    assert [g.stop_reason for g in together] == [g.stop_reason for g in alone]
    lengths = [len(g.tokens) for g in alone]
    assert len(set(lengths)) > 1, "the seeds must give lines of different lengths"
    # One pass per token of the longest line, not one per token of every line; a finished line
    # is no longer fed.
    assert len(target.passes) == max(g.stats.steps for g in alone)
    assert sum(target.passes) == sum(g.stats.steps for g in alone)
    assert [g.stats.steps for g in together] == [g.stats.steps for g in alone]


def test_lines_side_by_side_stop_each_for_its_own_reason() -> None:
    models = [CyclingModel(period=5), MarkovModel(seed=4)]
    guard = LoopGuard(max_period=8, min_repeats=3, min_span=24, check_every=1)
    target = _SideBySide(models)
    together = greedy_decode_together(target, [_start(model) for model in models], max_tokens=40, guard=guard)
    assert together[0].stop_reason == "repetition"
    assert together[1].stop_reason == "max_tokens"
    assert len(together[1].tokens) == 40
    assert len(together[0].tokens) < 40


def test_lines_side_by_side_stop_together_at_the_deadline() -> None:
    models = [MarkovModel(seed=0), MarkovModel(seed=1)]
    together = greedy_decode_together(
        _SideBySide(models), [_start(model) for model in models], max_tokens=60, deadline=time.monotonic() - 1
    )
    assert [g.stop_reason for g in together] == ["timeout", "timeout"]
    assert [len(g.tokens) for g in together] == [1, 1]


def _corrupted(tokens: list[int], wrong: int, seed: int) -> list[int]:
    """The tokens with `wrong` of them changed: a hint as a first engine with misreads gives it."""
    hint = list(tokens)
    rng = np.random.default_rng(seed)
    for index in rng.choice(len(hint), size=wrong, replace=False):
        hint[index] = (hint[index] + 7) % 50
    return hint


def test_lines_side_by_side_with_drafts_write_what_each_writes_alone_in_fewer_passes() -> None:
    seeds = [0, 1, 2, 3]
    alone = [_plain(max_tokens=60, seed=seed) for seed in seeds]
    # Right drafts, drafts with misreads, none at all, and drafts that are never right.
    drafts = [
        HintDraft(alone[0]),
        HintDraft(_corrupted(alone[1], 8, seed=1)),
        None,
        HintDraft([(token + 13) % 50 for token in alone[3]]),
    ]
    models = [MarkovModel(seed=seed) for seed in seeds]
    target = _SideBySide(models)
    together = greedy_decode_together(
        target, [_start(model) for model in models], max_tokens=60, drafts=drafts, policy=GPU_LIKE
    )
    assert [g.tokens for g in together] == alone
    stats = [g.stats for g in together]
    # The undrafted line takes a pass a token (its last one is written, not fed); the others ride
    # along while it writes.
    assert len(target.passes) == stats[2].steps == len(alone[2]) - 1
    assert stats[0].accepted == stats[0].drafted > 0 and stats[0].steps < len(alone[0]) / 3
    assert 0 < stats[1].accepted < stats[1].drafted and stats[1].steps < len(alone[1])
    assert stats[2].drafted == 0 and stats[2].source == "none"
    assert stats[3].accepted == 0 and stats[3].steps == len(alone[3]) - 1
    assert max(target.batches) > len(seeds)  # drafts rode in the passes
    # Every rejected draft was rewound: each model holds its prompt and its kept tokens only.
    for model, tokens in zip(models, alone, strict=True):
        fed = model.history[len(PROMPT) :]
        assert fed == tokens[: len(fed)] and len(fed) >= len(tokens) - 1


def _drafted_from_their_own_text(
    max_tokens: int | list[int],
) -> tuple[list[list[int]], _SideBySide, list[Generation]]:
    """Three lines read side by side, each drafted from what it writes alone (60 tokens)."""
    alone = [_plain(max_tokens=60, seed=seed) for seed in (0, 1, 2)]
    models = [MarkovModel(seed=seed) for seed in (0, 1, 2)]
    target = _SideBySide(models)
    together = greedy_decode_together(
        target,
        [_start(model) for model in models],
        max_tokens=max_tokens,
        drafts=[HintDraft(tokens) for tokens in alone],
        policy=GPU_LIKE,
    )
    return alone, target, together


def test_drafted_lines_side_by_side_finish_in_the_passes_of_the_slowest_line() -> None:
    alone, target, together = _drafted_from_their_own_text(max_tokens=60)
    assert [g.tokens for g in together] == alone
    # Every line's own output as its draft: a few passes write all three lines, not 60.
    assert len(target.passes) < 60 / 4
    assert [g.stop_reason for g in together] == ["max_tokens"] * 3


def test_lines_side_by_side_stop_each_at_its_own_token_limit() -> None:
    alone, _, together = _drafted_from_their_own_text(max_tokens=[9, 60, 23])
    assert [g.stop_reason for g in together] == ["max_tokens"] * 3
    assert [g.tokens for g in together] == [alone[0][:9], alone[1], alone[2][:23]]
    models = [MarkovModel(seed=seed) for seed in (0, 1, 2)]
    with pytest.raises(ValueError, match="3 sequences but 2 token limits"):
        greedy_decode_together(_SideBySide(models), [_start(m) for m in models], max_tokens=[9, 60])


def _teacher_forced(tokens: list[int], seed: int, end: int) -> float:
    """log P of `tokens` and the end under a fresh MarkovModel, fed after the prompt in one batch."""
    model = MarkovModel(seed=seed, end_token=end)
    rows = np.vstack([_start(model)[None, :], model.append(tokens)]) if tokens else _start(model)[None, :]
    return text_log_likelihood(rows, tokens, [end])


@pytest.mark.parametrize("drafted", [False, True])
def test_a_reads_own_likelihood_is_its_tokens_and_end_fed_after_the_prompt(drafted: bool) -> None:
    plain_model = MarkovModel(end_token=None)
    reference = greedy_decode(plain_model, _start(plain_model), max_tokens=40).tokens
    end = reference[25]
    model = MarkovModel(end_token=end)
    draft = HintDraft(reference) if drafted else None
    generation = greedy_decode(model, _start(model), max_tokens=40, draft=draft)
    assert generation.stop_reason == "end"
    assert generation.end_probability is not None and 0 < generation.end_probability < 1
    own = read_log_likelihood(generation)
    assert own == pytest.approx(_teacher_forced(generation.tokens, 0, end), abs=1e-4)
    # Another text is less likely to the model than the one it wrote greedily, token by token.
    other = [*generation.tokens[:-1], (generation.tokens[-1] + 1) % 50]
    assert _teacher_forced(other, 0, end) < own


def test_lines_side_by_side_keep_each_ones_end_probability() -> None:
    seeds = [0, 1, 2]
    models = [MarkovModel(seed=seed, end_token=7) for seed in seeds]
    together = greedy_decode_together(_SideBySide(models), [_start(model) for model in models], max_tokens=60)
    ended = [(seed, g) for seed, g in zip(seeds, together, strict=True) if g.stop_reason == "end"]
    assert ended, "the seeds must give lines that end"
    for seed, generation in ended:
        assert read_log_likelihood(generation) == pytest.approx(
            _teacher_forced(generation.tokens, seed, 7), abs=1e-4
        )


def test_a_read_cut_short_has_no_likelihood_and_rows_must_match_tokens() -> None:
    model = MarkovModel()
    generation = greedy_decode(model, _start(model), max_tokens=5)
    assert generation.stop_reason == "max_tokens"
    assert generation.end_probability is None
    assert read_log_likelihood(generation) is None
    with pytest.raises(ValueError, match="rows of logits"):
        text_log_likelihood(np.zeros((2, 50)), [1, 2], [7])
