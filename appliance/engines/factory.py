"""Builds the engines a configuration names: the ONNX reader and, where installed, the cascade's VLM."""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.config import EngineConfig
from appliance.engines.base import Engine, PageText


class EnginePair:
    """The ONNX engine that reads every page, and the VLM that profiles with a cascade send pages to.

    It reads as its first engine does; the document processor finds the VLM here and builds a
    cascade for the profile. Both live in one worker process, so a page's image is never copied
    between processes and the VLM's memory plan counts once per worker.
    """

    def __init__(self, first: Engine, vlm: Any) -> None:
        self.first = first
        self.vlm = vlm
        self.name = first.name

    def describe(self) -> dict[str, Any]:
        return {**self.first.describe(), "vlm": self.vlm.describe()}

    def recognize(self, image: np.ndarray) -> PageText:
        return self.first.recognize(image)

    def close(self) -> None:
        try:
            self.vlm.close()
        finally:
            self.first.close()


def build_engine(config: EngineConfig, workers: int = 1) -> Engine:
    """Load and verify the configured engines' models; raises ModelError with what is wrong.

    Every worker process builds its own engines, so the VLM's VRAM budget, which is the
    appliance's, is shared equally among `workers`.
    """
    if config.name != "ppocr_onnx":  # unreachable: the config schema lists engines
        raise ValueError(f"unknown engine {config.name!r}")
    from appliance.engines.ppocr_onnx import PpocrOnnxEngine  # onnxruntime loads only when used

    first = PpocrOnnxEngine(config.ppocr_onnx)
    if config.vlm_gguf is None:
        return first
    try:
        from appliance.engines.vlm_gguf.engine import VlmGgufEngine  # llama.cpp loads only when used

        share = config.vlm_gguf.vram_budget_mb // max(workers, 1)
        vlm = VlmGgufEngine(config.vlm_gguf.model_copy(update={"vram_budget_mb": share}))
    except BaseException:
        first.close()
        raise
    return EnginePair(first, vlm)


def vlm_of(engine: Engine) -> Any | None:
    """The cascade's VLM held by an engine built here, if any."""
    return engine.vlm if isinstance(engine, EnginePair) else None


__all__ = ["EnginePair", "build_engine", "vlm_of"]
