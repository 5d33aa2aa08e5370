"""The llama.cpp context wrapper: logits rows come back in batch order, across n_batch chunks too."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from appliance.engines.vlm_gguf import runtime

MODEL = Path(__file__).parent / "fixtures" / "vlm" / "lightonocr" / "model-f32.gguf"
SETTINGS = runtime.ContextSettings(n_ctx=256, n_batch=32, n_threads=1, kv_type="f16", flash_attention=True)


def _last_row(model: runtime.TextModel, tokens: list[int]) -> np.ndarray:
    context = runtime.Context(model, SETTINGS)
    try:
        return context.append(tokens, logits=False)[-1]
    finally:
        context.close()


def test_every_row_is_its_own_tokens_logits_across_batches() -> None:
    model = runtime.TextModel(MODEL, n_gpu_layers=0)
    try:
        tokens = [int(t) for t in np.random.default_rng(0).integers(10, model.n_vocab, 50)]
        context = runtime.Context(model, SETTINGS)
        try:
            rows = context.append(tokens)  # 32 + 18 tokens: two llama_decode calls
            assert rows.shape == (50, model.n_vocab)
            assert context.position == 50
            only_last = context.append(tokens[:3], logits=False)
            assert only_last.shape == (1, model.n_vocab)
        finally:
            context.close()
        # The same batches fed asking only for the last row give the same numbers (to rounding:
        # the output layer runs on 32 rows or on one; a CUDA build sends the 32-row product to the
        # GPU even with no layer offloaded, 5e-3 apart on an H200), and neighbouring rows are far apart.
        tolerance = 2e-2 if runtime.supports_gpu() else 1e-4
        np.testing.assert_allclose(rows[31], _last_row(model, tokens[:32]), atol=tolerance)
        np.testing.assert_allclose(rows[49], _last_row(model, tokens), atol=tolerance)
        assert np.abs(rows[30] - rows[31]).max() > 0.1
    finally:
        model.close()


def test_sequences_fed_together_give_every_row_of_each_and_forget_their_newest_cells() -> None:
    model = runtime.TextModel(MODEL, n_gpu_layers=0)
    settings = runtime.ContextSettings(
        n_ctx=256, n_batch=32, n_threads=1, kv_type="f16", flash_attention=True, n_seq_max=2
    )
    rng = np.random.default_rng(1)
    first, second = ([int(t) for t in rng.integers(10, model.n_vocab, size)] for size in (20, 25))
    tolerance = 2e-2 if runtime.supports_gpu() else 1e-4
    try:
        context = runtime.Context(model, settings)
        try:
            # 45 tokens of two sequences: two llama_decode calls, each part's rows in its own block.
            rows = context.feed_sequences([(0, 0, first), (1, 0, second)], every_row=True)
            assert [block.shape for block in rows] == [(20, model.n_vocab), (25, model.n_vocab)]
            np.testing.assert_allclose(rows[0][-1], _last_row(model, first), atol=tolerance)
            np.testing.assert_allclose(rows[1][9], _last_row(model, second[:10]), atol=tolerance)
            # Sequence 1 forgets its last 15 cells (drafts rejected) and is fed something else in
            # their place: its logits are those of the kept tokens and the new ones alone.
            context.forget(1, 10)
            other = [int(t) for t in rng.integers(10, model.n_vocab, 5)]
            (last,) = context.feed_sequences([(1, 10, other)])
            np.testing.assert_allclose(last, _last_row(model, second[:10] + other), atol=tolerance)
        finally:
            context.close()
    finally:
        model.close()
