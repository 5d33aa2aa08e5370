"""The VRAM plan: what is given up first when a model does not fit its budget, and that it says so."""

from __future__ import annotations

from appliance.engines.vlm_gguf.memory import MiB, ModelShape, plan_memory

# Roughly a 1B OCR VLM: 28 layers, 8 KV heads of 128, a 151k vocabulary.
SHAPE = ModelShape(
    weights_bytes=1_000 * MiB,
    projector_bytes=400 * MiB,
    draft_bytes=0,
    n_layer=28,
    n_head_kv=8,
    head_dim=128,
    n_vocab=151_936,
)


def test_a_model_that_fits_is_fully_offloaded_with_an_f16_cache() -> None:
    plan = plan_memory(SHAPE, budget_mb=16_384, want_ctx=8192, min_ctx=4096, gpu=True)
    assert plan.fits
    assert plan.n_gpu_layers == SHAPE.n_layer + 1
    assert plan.kv_type == "f16"
    assert plan.n_ctx == 8192
    assert plan.notes == []
    # f16 cache: 2 (K and V) x 28 layers x 8 heads x 128 x 2 bytes = 112 KiB per token.
    assert abs(plan.estimate_mb["kv_cache"] - 8192 * 112 / 1024) < 1
    assert sum(plan.estimate_mb.values()) <= 16_384


def test_a_tight_budget_takes_the_q8_cache_first() -> None:
    plan = plan_memory(SHAPE, budget_mb=5_000, want_ctx=32_768, min_ctx=4096, gpu=True)
    assert plan.fits
    assert plan.kv_type == "q8_0"
    assert plan.n_ctx == 32_768
    assert plan.n_gpu_layers == SHAPE.n_layer + 1
    assert any("f16 KV cache" in note for note in plan.notes)


def test_a_tighter_budget_then_shortens_the_context() -> None:
    plan = plan_memory(SHAPE, budget_mb=3_500, want_ctx=32_768, min_ctx=4096, gpu=True)
    assert plan.fits
    assert plan.kv_type == "q8_0"
    assert 4096 <= plan.n_ctx < 32_768
    assert plan.n_gpu_layers == SHAPE.n_layer + 1
    assert any("context shortened" in note for note in plan.notes)
    assert sum(plan.estimate_mb.values()) <= 3_500


def test_a_budget_below_the_weights_leaves_layers_on_the_cpu_and_says_how_many() -> None:
    plan = plan_memory(SHAPE, budget_mb=1_500, want_ctx=4096, min_ctx=4096, gpu=True)
    assert plan.fits
    assert 0 < plan.n_gpu_layers < SHAPE.n_layer
    assert any("left on the CPU" in note for note in plan.notes)
    assert sum(plan.estimate_mb.values()) <= 1_500


def test_a_fixed_cache_type_is_kept() -> None:
    plan = plan_memory(SHAPE, budget_mb=5_000, want_ctx=32_768, min_ctx=4096, gpu=True, kv_type="f16")
    assert plan.kv_type == "f16"


def test_without_gpu_offload_everything_runs_on_the_cpu() -> None:
    plan = plan_memory(SHAPE, budget_mb=8_192, want_ctx=4096, min_ctx=4096, gpu=False)
    assert plan.n_gpu_layers == 0
    assert plan.estimate_mb["weights"] == 0
    assert "CPU" in plan.notes[0]


def test_the_image_encoders_working_memory_is_planned_for() -> None:
    # At 4,096 tokens the f16 plan without the image needs about 1000 + 400 + 448 + 329 + 600 MiB.
    without = plan_memory(SHAPE, budget_mb=3_000, want_ctx=4096, min_ctx=4096, gpu=True)
    assert without.kv_type == "f16"
    assert without.estimate_mb["image_encoder"] == 0
    # A 1,600-token page image adds its encoder's buffers (0.36 MiB a token, measured): the same
    # budget now takes the q8_0 cache and a few layers left on the CPU.
    with_image = plan_memory(SHAPE, budget_mb=3_000, want_ctx=4096, min_ctx=4096, gpu=True, image_tokens=1600)
    assert abs(with_image.estimate_mb["image_encoder"] - 1600 * 0.36) < 1
    assert with_image.kv_type == "q8_0"
    assert with_image.n_gpu_layers < SHAPE.n_layer
    assert sum(with_image.estimate_mb.values()) <= 3_000
    on_cpu = plan_memory(SHAPE, budget_mb=3_000, want_ctx=4096, min_ctx=4096, gpu=False, image_tokens=1600)
    assert on_cpu.estimate_mb["image_encoder"] == 0
