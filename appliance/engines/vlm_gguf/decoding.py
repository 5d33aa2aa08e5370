"""Greedy decoding that verifies drafted tokens in one batch and keeps what the model itself would write.

The loop is ours rather than `Llama.generate(draft_model=...)`: that path sizes its score buffer
from `logits_all`, so it needs n_ctx x n_vocab floats of host memory (2.5 GB at 4k context with a
151k vocabulary) and fails once a prompt passes n_batch without it. Here logits are asked for only
at the positions being verified.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from appliance.engines.vlm_gguf.draft_length import (
    BatchCosts,
    DepthAcceptance,
    DraftLength,
    GroupDraftLengths,
)
from appliance.engines.vlm_gguf.drafts import DraftSource
from appliance.engines.vlm_gguf.loop_guard import LoopGuard


class Target(Protocol):
    """The model being decoded, past its prompt: it appends tokens and forgets the newest ones."""

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        """Feed tokens; return one row of logits per token (shape len(tokens) x n_vocab)."""
        ...

    def rewind(self, count: int) -> None:
        """Forget the last `count` appended tokens (their KV cache cells)."""
        ...

    def is_end(self, token: int) -> bool:
        """Whether the token ends generation (end of turn, end of sequence)."""
        ...


@dataclass(frozen=True)
class DraftPolicy:
    """How many tokens to draft, and when drafting stops paying for a page."""

    k: int = 4  # the first step's drafts, before the page has shown how they fare
    k_min: int = 1
    k_max: int = 16
    # Drafting is switched off for the rest of a page once at least `min_drafted` tokens were
    # proposed and fewer than `min_acceptance` of them were accepted: each rejected token costs a
    # verification slot that a one-token step would not have spent.
    min_acceptance: float = 0.3
    min_drafted: int = 32
    # What a forward pass over b tokens costs, relative; None: measured on the page as it runs.
    batch_cost: Callable[[int], float] | None = None


@dataclass
class DecodeStats:
    """What speculation did on one page; reported in the JSON result and the status API."""

    source: str = "none"
    generated: int = 0
    steps: int = 0  # target forward passes (one per verification batch or single token)
    drafted: int = 0
    accepted: int = 0
    draft_ms: float = 0.0
    target_ms: float = 0.0
    disabled_after: int | None = None  # generated tokens when drafting was switched off
    k_history: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def to_dict(self) -> dict[str, object]:
        decode_s = (self.draft_ms + self.target_ms) / 1000
        acceptance = self.acceptance
        return {
            "draft_source": self.source,
            "generated_tokens": self.generated,
            "target_steps": self.steps,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "acceptance_rate": None if acceptance is None else round(acceptance, 4),
            "tokens_per_step": round(self.generated / self.steps, 3) if self.steps else None,
            "tokens_per_s": round(self.generated / decode_s, 2) if decode_s > 0 else None,
            "draft_ms": round(self.draft_ms, 2),
            "target_ms": round(self.target_ms, 2),
            "draft_disabled_after": self.disabled_after,
            "mean_k": round(sum(self.k_history) / len(self.k_history), 2) if self.k_history else None,
        }


@dataclass
class Generation:
    """Generated tokens with the probability the model gave each, and why generation stopped."""

    tokens: list[int]
    probabilities: list[float]
    stop_reason: str  # "end", "max_tokens", "repetition", "timeout", "stop_string"
    stats: DecodeStats
    # The probability the model gave the end of its text where it chose it (stop_reason "end"):
    # with `probabilities`, how likely the whole read was to it.
    end_probability: float | None = None


# Logits whose maximum lies in this range are exponentiated as they are: float32 neither overflows
# (e^60 times a 152k vocabulary is far below 3.4e38) nor loses the largest terms to underflow.
_UNSHIFTED_RANGE = (-30.0, 60.0)


def _probability(row: np.ndarray, token: int) -> float:
    """Softmax probability of `token` in a logits row, in the row's own float32.

    This runs once per generated token over the whole vocabulary (152k entries), a large part of
    the loop's own time: a float64 copy of the row cost more than the model's forward pass on the
    CPU (bench/README.md, "VLM decoding loop"). Ordinary rows are exponentiated without the usual
    shift by their maximum (the shift is a pass over the row; rows outside _UNSHIFTED_RANGE still
    take it), and summed by einsum, whose vectorised sum is three times numpy's pairwise one here
    (`python -m bench.probability_cost`) and as close (tests/test_vlm_decoding.py holds the result
    to 1e-5 of a float64 softmax).
    """
    top = float(row.max())
    low, high = _UNSHIFTED_RANGE
    weights = np.exp(row) if low < top < high else np.exp(row - top)
    return float(weights[token]) / float(np.einsum("i->", weights))


def _stop_reason(
    tokens: list[int],
    max_tokens: int,
    guard: LoopGuard | None,
    should_stop: Callable[[list[int]], bool] | None,
) -> str | None:
    """Why generation stops after the token just written, if it does (an end token aside)."""
    if len(tokens) >= max_tokens:
        return "max_tokens"
    if guard is not None and guard.looping(tokens):
        return "repetition"
    if should_stop is not None and should_stop(tokens):
        return "stop_string"
    return None


@dataclass
class _Checked:
    """A step's drafts checked against the rows after them: how many were kept, and why writing stops."""

    accepted: int
    stop_reason: str | None
    written_ms: float  # the kept tokens' own work (probability, stop checks): every token pays it once
    end_probability: float | None = None  # where a kept draft was the end of the text


def _check_drafts(
    rows: np.ndarray,
    proposal: list[int],
    tokens: list[int],
    probabilities: list[float],
    *,
    is_end: Callable[[int], bool],
    stop_reason: Callable[[list[int]], str | None],
) -> _Checked:
    """Keep drafts while each is the argmax of the row before it (what one-token decoding writes).

    Kept tokens are appended to `tokens` and `probabilities`; `rows[i]` are the logits after the
    i-th token fed (the chosen one, then the drafts).
    """
    choices = rows[: len(proposal)].argmax(axis=1)  # one call for the step, not one a row
    accepted, reason, written_ms, end = 0, None, 0.0, None
    for index, proposed in enumerate(proposal):
        if int(choices[index]) != proposed:
            break
        accepted += 1
        if is_end(proposed):
            reason, end = "end", _probability(rows[index], proposed)
            break
        started = time.perf_counter()
        tokens.append(proposed)
        probabilities.append(_probability(rows[index], proposed))
        reason = stop_reason(tokens)
        written_ms += (time.perf_counter() - started) * 1000
        if reason:
            break
    return _Checked(accepted, reason, written_ms, end)


def _still_drafting(
    stats: DecodeStats, policy: DraftPolicy, proposed: int, accepted: int, written: int
) -> bool:
    """Count a step's drafts; False once too few of them are kept for drafting to pay (DraftPolicy)."""
    stats.drafted += proposed
    stats.accepted += accepted
    if stats.drafted >= policy.min_drafted and stats.accepted < policy.min_acceptance * stats.drafted:
        stats.disabled_after = written
        return False
    return True


# A probability no token has: the log of zero would make a sum -inf.
_TINY = 1e-30


def read_log_likelihood(generation: Generation) -> float | None:
    """How likely the model found its own read: log P of its tokens and its end; None if it did not end."""
    if generation.stop_reason != "end" or generation.end_probability is None:
        return None
    written = np.log(np.maximum(np.asarray(generation.probabilities, dtype=np.float64), _TINY)).sum()
    return float(written + np.log(max(generation.end_probability, _TINY)))


def text_log_likelihood(logits: np.ndarray, tokens: Sequence[int], end_tokens: Sequence[int]) -> float:
    """The log-probability of `tokens` and then the end of the text, fed after a prompt.

    `logits` has one row more than `tokens`: the row after the prompt, then the row after each
    token. The end is the likeliest of `end_tokens` in the last row (the one the model would write).
    """
    if len(logits) != len(tokens) + 1:
        raise ValueError(f"{len(tokens)} tokens need {len(tokens) + 1} rows of logits, not {len(logits)}")
    rows = np.asarray(logits, dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    log_softmax = rows - top - np.log(np.exp(rows - top).sum(axis=1, keepdims=True))
    written = log_softmax[np.arange(len(tokens)), list(tokens)].sum()
    end = log_softmax[-1, list(end_tokens)].max() if len(end_tokens) else 0.0
    return float(written + end)


def greedy_decode(
    target: Target,
    first_logits: np.ndarray,
    *,
    max_tokens: int,
    draft: DraftSource | None = None,
    policy: DraftPolicy | None = None,
    guard: LoopGuard | None = None,
    deadline: float | None = None,
    should_stop: Callable[[list[int]], bool] | None = None,
    costs: BatchCosts | None = None,
    prior: DepthAcceptance | None = None,
) -> Generation:
    """Generate greedily from `first_logits` (the logits after the prompt).

    `costs`: the step timings of earlier pages on the same model, to choose draft lengths from
    the first step (the caller keeps it; None: this page measures its own). `prior`: how often
    earlier pages' drafts were right by depth, likewise (the page adds its own to it).

    With a draft source, up to k proposed tokens are fed together with the token just chosen; the
    draft tokens are accepted while each equals the argmax of the logits before it, which is what
    one-token greedy decoding would have produced, so the output does not depend on the draft
    (exactly so on f32 models; batched kernels may round differently on quantized ones).
    """
    policy = policy or DraftPolicy()
    stats = DecodeStats(source=draft.name if draft is not None else "none")
    tokens: list[int] = []
    probabilities: list[float] = []
    logits = first_logits
    lengths = DraftLength(policy.k, policy.k_min, policy.k_max, policy.batch_cost, costs, prior=prior)
    drafting = draft is not None

    def stop(written: list[int]) -> str | None:
        return _stop_reason(written, max_tokens, guard, should_stop)

    def finish(reason: str, end: float | None = None) -> Generation:
        stats.generated = len(tokens)
        return Generation(tokens, probabilities, reason, stats, end)

    step_started = time.perf_counter()
    while True:
        token = int(np.argmax(logits))
        if target.is_end(token):
            return finish("end", _probability(logits, token))
        written_started = time.perf_counter()
        tokens.append(token)
        probabilities.append(_probability(logits, token))
        reason = stop(tokens)
        if reason:
            return finish(reason)
        written_ms = (time.perf_counter() - written_started) * 1000
        if deadline is not None and time.monotonic() > deadline:
            return finish("timeout")

        proposal: list[int] = []
        if drafting and draft is not None:
            started = time.perf_counter()
            proposal = draft.propose(tokens, min(lengths.k, max_tokens - len(tokens)))
            stats.draft_ms += (time.perf_counter() - started) * 1000
            stats.k_history.append(lengths.k)

        started = time.perf_counter()
        rows = target.append([token, *proposal])
        stats.target_ms += (time.perf_counter() - started) * 1000
        stats.steps += 1

        checked = _check_drafts(rows, proposal, tokens, probabilities, is_end=target.is_end, stop_reason=stop)
        accepted, stop_reason = checked.accepted, checked.stop_reason
        written_ms += checked.written_ms
        if proposal:
            if accepted < len(proposal) and stop_reason is None:
                target.rewind(len(proposal) - accepted)
            if draft is not None:
                draft.observe(tokens)
            drafting = _still_drafting(stats, policy, len(proposal), accepted, len(tokens))
        if drafting:
            # The whole step counts, not only the forward pass: drafting, checking and rewinding
            # cost per step, and they make fewer, longer steps pay more than the pass alone says.
            # Less the work of each token written (its probability, the loop and stop checks):
            # every token pays that once however it was drafted, so it does not depend on k, and
            # counted in it would make a batch look dearer the more of its drafts were right.
            now = time.perf_counter()
            step_ms = (now - step_started) * 1000 - written_ms
            lengths.observe(len(proposal), accepted, 1 + len(proposal), step_ms)
            step_started = now
        if stop_reason:
            return finish(stop_reason, checked.end_probability)
        logits = rows[accepted]


class Sequences(Protocol):
    """Several sequences past their prompts, decoded side by side: one pass feeds tokens to each."""

    def step(self, tokens: dict[int, list[int]]) -> dict[int, np.ndarray]:
        """Feed tokens to each sequence named; return one row of logits per token fed to each."""
        ...

    def rewind(self, sequence: int, count: int) -> None:
        """Forget the last `count` tokens fed to `sequence` (its rejected drafts)."""
        ...

    def is_end(self, token: int) -> bool:
        """Whether the token ends generation (end of turn, end of sequence)."""
        ...


def greedy_decode_together(
    target: Sequences,
    first_logits: Sequence[np.ndarray],
    *,
    max_tokens: int | Sequence[int],
    drafts: Sequence[DraftSource | None] | None = None,
    policy: DraftPolicy | None = None,
    guard: LoopGuard | None = None,
    deadline: float | None = None,
    should_stop: Callable[[list[int]], bool] | None = None,
    costs: BatchCosts | None = None,
    prior: DepthAcceptance | None = None,
) -> list[Generation]:
    """Generate greedily on sequences 0..n-1 at once, from each one's logits after its prompt.

    Each pass feeds the token just chosen on every sequence still writing, so n short lines cost
    as many passes as the longest of them, not their sum: for a small model a pass is mostly fixed
    cost (launches, host work), whatever its batch. `drafts` gives a sequence a draft source (None:
    it drafts nothing); its drafts ride in the same pass, after its chosen token, and are checked
    as `greedy_decode` checks them, with lengths chosen for the whole pass (GroupDraftLengths;
    `costs` and `prior` as for greedy_decode).
    Each sequence writes what `greedy_decode` would write alone (on f32 models; batched kernels
    may round differently on quantized ones) and stops for the same reasons; `max_tokens` is one
    limit for all, or each sequence's own. A pass's time is shared out equally among the
    sequences in it.
    """
    policy = policy or DraftPolicy()
    count = len(first_logits)
    limits = [max_tokens] * count if isinstance(max_tokens, int) else list(max_tokens)
    if len(limits) != count:
        raise ValueError(f"{count} sequences but {len(limits)} token limits")
    sources = list(drafts) if drafts is not None else [None] * count
    tokens: list[list[int]] = [[] for _ in range(count)]
    probabilities: list[list[float]] = [[] for _ in range(count)]
    stats = [DecodeStats(source=source.name if source else "none") for source in sources]
    reasons: list[str | None] = [None] * count
    ends: list[float | None] = [None] * count
    drafting = [source is not None for source in sources]
    lengths = GroupDraftLengths(policy.k, policy.k_min, policy.k_max, policy.batch_cost, costs, prior=prior)
    logits = dict(enumerate(first_logits))

    stops = [
        functools.partial(_stop_reason, max_tokens=limit, guard=guard, should_stop=should_stop)
        for limit in limits
    ]
    while True:
        pass_started = time.perf_counter()
        written_ms = 0.0  # each written token's own work: it does not depend on the drafts (greedy_decode)
        feed: dict[int, list[int]] = {}
        for sequence, row in logits.items():
            token = int(np.argmax(row))
            if target.is_end(token):
                reasons[sequence], ends[sequence] = "end", _probability(row, token)
                continue
            written_started = time.perf_counter()
            written = tokens[sequence]
            written.append(token)
            probabilities[sequence].append(_probability(row, token))
            reasons[sequence] = stops[sequence](written)
            written_ms += (time.perf_counter() - written_started) * 1000
            if reasons[sequence] is None:
                feed[sequence] = [token]
        if feed and deadline is not None and time.monotonic() > deadline:
            for sequence in feed:
                reasons[sequence] = "timeout"
            feed = {}
        if not feed:
            break
        drafters = [sequence for sequence in feed if drafting[sequence]]
        for sequence, k in lengths.lengths(drafters, len(feed)).items():
            source = sources[sequence]
            assert source is not None  # only drafting sequences are given a length
            started = time.perf_counter()
            proposal = source.propose(tokens[sequence], min(k, limits[sequence] - len(tokens[sequence])))
            stats[sequence].draft_ms += (time.perf_counter() - started) * 1000
            stats[sequence].k_history.append(k)
            feed[sequence].extend(proposal)
        started = time.perf_counter()
        rows = target.step(feed)
        share = (time.perf_counter() - started) * 1000 / len(feed)
        logits = {}
        for sequence, fed in feed.items():
            sequence_stats = stats[sequence]
            sequence_stats.steps += 1
            sequence_stats.target_ms += share
            proposal = fed[1:]
            checked = _check_drafts(
                rows[sequence],
                proposal,
                tokens[sequence],
                probabilities[sequence],
                is_end=target.is_end,
                stop_reason=stops[sequence],
            )
            accepted, reasons[sequence] = checked.accepted, checked.stop_reason
            ends[sequence] = checked.end_probability
            written_ms += checked.written_ms
            if proposal:
                if accepted < len(proposal) and reasons[sequence] is None:
                    target.rewind(sequence, len(proposal) - accepted)
                source = sources[sequence]
                if source is not None:
                    source.observe(tokens[sequence])
                lengths.learn(sequence, len(proposal), accepted)
                drafting[sequence] = _still_drafting(
                    sequence_stats, policy, len(proposal), accepted, len(tokens[sequence])
                )
            if reasons[sequence] is None:
                logits[sequence] = rows[sequence][accepted]
        if drafters:
            # The whole pass counts, less each written token's work, as in greedy_decode.
            pass_ms = (time.perf_counter() - pass_started) * 1000 - written_ms
            lengths.observe_pass(sum(len(fed) for fed in feed.values()), pass_ms)
    generations = []
    for sequence in range(count):
        stats[sequence].generated = len(tokens[sequence])
        reason = reasons[sequence] or "end"
        generations.append(
            Generation(tokens[sequence], probabilities[sequence], reason, stats[sequence], ends[sequence])
        )
    return generations
