"""Builds the engine a configuration names."""

from __future__ import annotations

from appliance.config import EngineConfig
from appliance.engines.base import Engine


def build_engine(config: EngineConfig) -> Engine:
    """Load and verify the configured engine's models; raises ModelError with what is wrong."""
    if config.name == "ppocr_onnx":
        from appliance.engines.ppocr_onnx import PpocrOnnxEngine  # onnxruntime loads only when used

        return PpocrOnnxEngine(config.ppocr_onnx)
    raise ValueError(f"unknown engine {config.name!r}")  # unreachable: the config schema lists engines
