"""Where drafted tokens come from: text another engine already read on the page, or a small draft model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np


class DraftSource(Protocol):
    """Proposes the next tokens of a generation; the target model verifies them."""

    name: str

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that may follow `generated` (fewer, or none, when unsure)."""
        ...

    def observe(self, generated: Sequence[int]) -> None:
        """What the target kept after a verification (a model draft rolls its cache back to it)."""
        ...


class HintDraft:
    """Drafts from a hint: the page's text as a cheaper engine read it, in the VLM's own tokens.

    The generated tail is looked up in the hint (longest n-gram first, nearest after the last
    match, as in prompt-lookup decoding) and the hint tokens after it are proposed. When the VLM
    writes what the hint says, it verifies k tokens per forward pass instead of writing one.
    """

    name = "ocr_hint"

    def __init__(self, hint_tokens: Sequence[int], max_ngram: int = 8, min_ngram: int = 1) -> None:
        self._hint = np.asarray(list(hint_tokens), dtype=np.int64)
        self._max_ngram = max_ngram
        self._min_ngram = min_ngram
        self._cursor = 0  # hint position just after the last matched n-gram

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        hint = self._hint
        if k <= 0 or hint.size == 0:
            return []
        if not generated:
            return [int(t) for t in hint[:k]]
        tail = np.asarray(generated[-self._max_ngram :], dtype=np.int64)
        for n in range(min(len(tail), self._max_ngram), self._min_ngram - 1, -1):
            start = self._find(tail[-n:])
            if start is not None:
                self._cursor = start + n
                return [int(t) for t in hint[start + n : start + n + k]]
        return []

    def _find(self, ngram: np.ndarray) -> int | None:
        """Start of the occurrence of `ngram` in the hint nearest at or after the cursor (else before)."""
        n = ngram.size
        if n > self._hint.size:
            return None
        windows = np.lib.stride_tricks.sliding_window_view(self._hint, n)
        matches = np.flatnonzero((windows == ngram).all(axis=1))
        if matches.size == 0:
            return None
        # The generation moves forward through the page: prefer a match that starts where the last
        # one ended, then the nearest later one, then the latest earlier one (a repeated word).
        ahead = matches[matches + n >= self._cursor]
        return int(ahead[0]) if ahead.size else int(matches[-1])

    def observe(self, generated: Sequence[int]) -> None:
        return None


class DraftModel(Protocol):
    """A small text model sharing the target's vocabulary, already fed the prompt's text."""

    def append(self, tokens: Sequence[int]) -> np.ndarray: ...

    def rewind(self, count: int) -> None: ...


class ModelDraft:
    """Drafts by greedy decoding with a small model that shares the target's vocabulary.

    The draft model sees the prompt's text (not the image) and every token the target kept; after a
    verification its cache is rolled back to the tokens the target accepted.
    """

    name = "draft_model"

    def __init__(self, model: DraftModel) -> None:
        self._model = model
        self._fed: list[int] = []  # generated tokens whose cache cells the draft model holds
        self._next_logits: np.ndarray | None = None

    def _sync(self, generated: Sequence[int]) -> np.ndarray | None:
        common = 0
        limit = min(len(self._fed), len(generated))
        while common < limit and self._fed[common] == generated[common]:
            common += 1
        if common < len(self._fed):
            self._model.rewind(len(self._fed) - common)
            del self._fed[common:]
            self._next_logits = None
        missing = list(generated[common:])
        if missing:
            self._next_logits = self._model.append(missing)[-1]
            self._fed.extend(missing)
        return self._next_logits

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        logits = self._sync(generated)
        proposal: list[int] = []
        while logits is not None and len(proposal) < k:
            token = int(np.argmax(logits))
            proposal.append(token)
            if len(proposal) == k:
                break
            logits = self._model.append([token])[-1]
            self._fed.append(token)
            self._next_logits = logits
        return proposal

    def observe(self, generated: Sequence[int]) -> None:
        self._sync(generated)


class TextHintDraft:
    """Drafts from a hint aligned by text, not tokens: robust to the model splitting words its own way.

    A model may write "Hel" + "lo" where its tokenizer would write "Hello"; a token n-gram lookup
    then finds nothing, though the text agrees. Here the generated text's tail is found in the hint
    (near where the last match ended) and the hint text after it is tokenized afresh, so the
    proposal starts exactly where the generation stands.

    Where the model corrects a misread ("TOTAL" where the hint says "T0TAL"), no long tail matches
    until the generation is past the misread by the shortest tail. Then a short tail of the newest
    text (4, 2, then 1 byte) is looked up only close to where the hint should stand (as far past the
    last match as the generation is): most misreads swap a few characters for as many others, so
    drafting resumes a character or two after the correction. Measured with `python -m
    bench.hint_drafting` on the ONNX engine's text of real receipts, this raised the tokens written
    per forward pass from 2.65 to 4.88.
    """

    name = "ocr_hint"

    def __init__(
        self,
        hint: str,
        piece: Callable[[int], bytes],
        tokenize: Callable[[str], list[int]],
        *,
        tails: tuple[int, ...] = (48, 24, 12, 6),
        near_tails: tuple[int, ...] = (4, 2, 1),
        near: int = 6,
    ) -> None:
        self._hint = hint.encode("utf-8")
        self._piece = piece
        self._tokenize = tokenize
        self._tails = tails
        self._near_tails = near_tails  # looked up only within `near` bytes of the expected position
        self._near = near
        self._text = bytearray()  # the generated text so far (generation only ever grows)
        self._seen = 0  # generated tokens already spelled into _text
        self._cursor = 0  # hint byte offset just after the last aligned tail
        self._cursor_text = 0  # length of the generated text when that tail was aligned

    def _catch_up(self, generated: Sequence[int]) -> None:
        for token in generated[self._seen :]:
            self._text.extend(self._piece(token))
        self._seen = len(generated)

    def _position(self) -> int | None:
        """Hint offset where the generation stands, or None when the tail is not in the hint."""
        if not self._text:
            return 0
        for length in self._tails:
            tail = bytes(self._text[-length:])
            if len(tail) < min(length, len(self._text)):
                continue
            # Search from a little before the cursor: the generation moves forward through the page.
            found = self._hint.find(tail, max(0, self._cursor - len(tail) - 64))
            if found < 0:
                found = self._hint.find(tail)
            if found >= 0:
                self._cursor = found + len(tail)
                self._cursor_text = len(self._text)
                return self._cursor
        return self._near_position() if self._cursor_text else None

    def _near_position(self) -> int | None:
        """Where a short tail of the text matches nearest the expected hint offset, if close to it.

        Short tails are ambiguous over a whole hint, so they are looked up only within `near` bytes
        of the expected offset; the long tails' cursor stays where it was until one of them matches.
        """
        expected = self._cursor + len(self._text) - self._cursor_text
        for length in self._near_tails:
            tail = bytes(self._text[-length:])
            if len(tail) < length:
                continue
            start = max(0, expected - length - self._near)
            region = self._hint[start : expected + self._near]
            ends = []
            index = region.find(tail)
            while index >= 0:
                ends.append(start + index + length)
                index = region.find(tail, index + 1)
            if ends:
                return min(ends, key=lambda end: abs(end - expected))
        return None

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        if k <= 0:
            return []
        self._catch_up(generated)
        position = self._position()
        if position is None or position >= len(self._hint):
            return []
        # Enough text for k tokens; a fragment cut mid-word would end in a token the model never
        # writes there, so the last token is dropped unless the fragment reaches the hint's end.
        fragment = self._hint[position : position + 16 * (k + 1)]
        reaches_end = position + len(fragment) >= len(self._hint)
        text = fragment.decode("utf-8", errors="ignore")
        tokens = self._tokenize(text)
        if not reaches_end:
            tokens = tokens[:-1]
        return tokens[:k]

    def observe(self, generated: Sequence[int]) -> None:
        return None
