"""Fits a VLM into a VRAM budget: how many layers on the GPU, how long a context, which KV cache type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MiB = 1024 * 1024
KvType = Literal["f16", "q8_0"]
# Bytes per cached element: q8_0 stores 32 values in 34 bytes.
_KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32}
# The image encoder's working memory per image token, on the GPU while a page is encoded. Measured
# on an H200 at LightOnOCR-2-1B's shapes (1,024-wide vision, 2x2 merge): the card's peak over a page
# of 1,551 image tokens was 549-563 MiB above the other terms, whatever the weights' quantization
# and the KV cache's size (bench/README.md, "VLM on the GPU"); 0.36 MiB a token.
_IMAGE_ENCODER_BYTES_PER_TOKEN = 0.36 * MiB


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs to know about the models, read from their GGUF headers."""

    weights_bytes: int  # the text model's file
    projector_bytes: int  # the mmproj's file (kept on the GPU with the model when offloaded)
    draft_bytes: int  # a draft model's file, 0 without one
    n_layer: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    draft_kv_bytes_per_token: int = 0

    def kv_bytes_per_token(self, kv_type: KvType) -> float:
        return 2 * self.n_layer * self.n_head_kv * self.head_dim * _KV_BYTES[kv_type]


@dataclass
class MemoryPlan:
    """The settings chosen, what they should cost, and every step taken to make them fit."""

    n_gpu_layers: int
    n_ctx: int
    kv_type: KvType
    estimate_mb: dict[str, float]
    budget_mb: int
    fits: bool
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "n_gpu_layers": self.n_gpu_layers,
            "n_ctx": self.n_ctx,
            "kv_cache_type": self.kv_type,
            "budget_mb": self.budget_mb,
            "estimate_mb": {key: round(value, 1) for key, value in self.estimate_mb.items()},
            "fits": self.fits,
            "notes": list(self.notes),
        }


def _estimate(
    shape: ModelShape,
    *,
    n_ctx: int,
    kv_type: KvType,
    layers_on_gpu: int,
    n_ubatch: int,
    overhead_mb: float,
    image_tokens: int,
) -> dict[str, float]:
    share = layers_on_gpu / shape.n_layer if shape.n_layer else 1.0
    kv = shape.kv_bytes_per_token(kv_type) * n_ctx * share
    # Compute buffers grow with the micro-batch: the logits of a full batch plus activations. The
    # image encoder's grow with the image; the fixed overhead is the CUDA context and libraries.
    compute = n_ubatch * shape.n_vocab * 4 + n_ubatch * 64 * 1024
    return {
        "weights": shape.weights_bytes * share / MiB,
        "projector": shape.projector_bytes / MiB if layers_on_gpu else 0.0,
        "draft": (shape.draft_bytes + shape.draft_kv_bytes_per_token * n_ctx) / MiB if layers_on_gpu else 0.0,
        "kv_cache": kv / MiB,
        "compute": compute / MiB if layers_on_gpu else 0.0,
        "image_encoder": image_tokens * _IMAGE_ENCODER_BYTES_PER_TOKEN / MiB if layers_on_gpu else 0.0,
        "overhead": overhead_mb if layers_on_gpu else 0.0,
    }


def plan_memory(
    shape: ModelShape,
    budget_mb: int,
    want_ctx: int,
    min_ctx: int,
    *,
    gpu: bool,
    kv_type: KvType | Literal["auto"] = "auto",
    n_ubatch: int = 512,
    overhead_mb: float = 600.0,
    image_tokens: int = 0,
) -> MemoryPlan:
    """Choose settings that fit `budget_mb`, giving up the cheapest thing first.

    Order: full offload at the wanted context with an f16 cache; then a q8_0 cache (halves the
    cache, costs little accuracy); then a shorter context, down to what one page needs; then layers
    left on the CPU. Each step taken is written into the plan's notes, so a site sees why its
    pages read slower than the card could.
    """
    kv_types: list[KvType] = ["f16", "q8_0"] if kv_type == "auto" else [kv_type]
    if not gpu:
        return MemoryPlan(
            n_gpu_layers=0,
            n_ctx=want_ctx,
            kv_type=kv_types[0],
            estimate_mb=_estimate(
                shape,
                n_ctx=want_ctx,
                kv_type=kv_types[0],
                layers_on_gpu=0,
                n_ubatch=n_ubatch,
                overhead_mb=overhead_mb,
                image_tokens=image_tokens,
            ),
            budget_mb=budget_mb,
            fits=True,
            notes=["no GPU offload available: the model runs on the CPU"],
        )
    notes: list[str] = []
    total_layers = shape.n_layer + 1  # llama.cpp counts the output layer as one more

    def total(n_ctx: int, kv: KvType, layers: int) -> tuple[dict[str, float], bool]:
        estimate = _estimate(
            shape,
            n_ctx=n_ctx,
            kv_type=kv,
            layers_on_gpu=min(layers, shape.n_layer),
            n_ubatch=n_ubatch,
            overhead_mb=overhead_mb,
            image_tokens=image_tokens,
        )
        return estimate, sum(estimate.values()) <= budget_mb

    for kv in kv_types:
        estimate, fits = total(want_ctx, kv, total_layers)
        if fits:
            return MemoryPlan(total_layers, want_ctx, kv, estimate, budget_mb, True, notes)
        notes.append(f"{kv} KV cache at n_ctx={want_ctx} needs {sum(estimate.values()):.0f} MiB")
    kv = kv_types[-1]
    n_ctx = want_ctx
    while n_ctx > min_ctx:
        n_ctx = max(min_ctx, n_ctx // 2)
        estimate, fits = total(n_ctx, kv, total_layers)
        if fits:
            notes.append(f"context shortened to {n_ctx} tokens to fit {budget_mb} MiB")
            return MemoryPlan(total_layers, n_ctx, kv, estimate, budget_mb, True, notes)
    for layers in range(shape.n_layer, -1, -1):
        estimate, fits = total(n_ctx, kv, layers)
        if fits:
            notes.append(
                f"{shape.n_layer - layers} of {shape.n_layer} layers left on the CPU to fit {budget_mb} MiB"
            )
            return MemoryPlan(layers, n_ctx, kv, estimate, budget_mb, True, notes)
    estimate, _ = total(n_ctx, kv, 0)
    notes.append(f"even with every layer on the CPU the GPU share exceeds {budget_mb} MiB")
    return MemoryPlan(0, n_ctx, kv, estimate, budget_mb, False, notes)
