"""A deterministic toy language model with a KV-cache-like state, for testing decoding without llama.cpp."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class MarkovModel:
    """Next-token logits depend on the last `order` tokens through a fixed random table.

    `append` and `rewind` behave like a llama.cpp context: tokens go in, one logits row per token
    comes out, and the newest tokens can be forgotten. `forward_calls` counts batches fed.
    """

    def __init__(
        self, n_vocab: int = 50, order: int = 2, seed: int = 0, end_token: int | None = None
    ) -> None:
        self.n_vocab = n_vocab
        self.order = order
        self._rng_seed = seed
        self.end_token = end_token
        self.history: list[int] = []
        self.forward_calls = 0
        self.tokens_fed = 0

    def _row(self, context: Sequence[int]) -> np.ndarray:
        key = hash((self._rng_seed, *context[-self.order :])) & 0xFFFFFFFF
        return np.random.default_rng(key).standard_normal(self.n_vocab).astype(np.float32)

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        self.forward_calls += 1
        self.tokens_fed += len(tokens)
        rows = []
        for token in tokens:
            self.history.append(int(token))
            rows.append(self._row(self.history))
        return np.stack(rows)

    def rewind(self, count: int) -> None:
        if count:
            del self.history[-count:]

    def is_end(self, token: int) -> bool:
        return token == self.end_token


class CyclingModel(MarkovModel):
    """Always predicts the token after the last one modulo `period`: a generation that loops forever."""

    def __init__(self, period: int = 5, n_vocab: int = 50) -> None:
        super().__init__(n_vocab=n_vocab)
        self.period = period

    def _row(self, context: Sequence[int]) -> np.ndarray:
        row = np.zeros(self.n_vocab, dtype=np.float32)
        row[(context[-1] + 1) % self.period] = 10.0
        return row
