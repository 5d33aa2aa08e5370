"""Named reader presets: what `engine.ppocr_onnx.preset` fills in for the keys a site leaves unset.

A site picks `accurate` or `fast` by name instead of tuning a dozen keys; any key it does set in
its config wins over the preset's value. `auto` takes `accurate` where onnxruntime has a usable
CUDA provider or the process may use at least two cores (on a 2-core box it reads a receipt in
about a second, faster than the best peer at a lower error rate: bench/README.md), and `fast` on
a single core; the engine records which one it took. `custom` applies nothing.
"""

from __future__ import annotations

import os
from typing import Any

from appliance.config import PpocrOnnxConfig

# The figures behind each choice are in bench/README.md ("OCR accuracy and speed").
MIN_CORES_ACCURATE = 2  # `auto` on the CPU: accurate from this many usable cores on
# The INT8 detector shipped in appliance/engines/models/ppocrv6_small_int8 (made by `make
# models-int8`, hash-checked at load like the originals): on 2 cores it takes a third of the FP32
# detector's time and read both sets slightly better (receipts 2.69% -> 2.56% CER, docs_zh 0.83%
# -> 0.80%). Recognition stays FP32: INT8 changes too many of its characters.
_INT8_DETECTOR = {"det": "int8", "cls": "fp32", "rec": "fp32"}
# Static INT8 (QDQ) graphs are CPU kernels: on the CUDA provider the presets keep FP32.
_FP32 = {"det": "fp32", "cls": "fp32", "rec": "fp32"}

PRESETS: dict[str, dict[str, Any]] = {
    # PP-OCRv6 small throughout, its detector at full size, lines padded to its training width.
    "accurate": {
        "models": "ppocrv6_small",
        "precision": _INT8_DETECTOR,
        "det_limit_side_len": 1280,
        "rec_min_width": 320,
    },
    # PP-OCRv6 small with a smaller detector input and short lines padded less.
    "fast": {
        "models": "ppocrv6_small",
        "precision": _INT8_DETECTOR,
        "det_limit_side_len": 960,
        "rec_min_width": 160,
    },
}


def cuda_usable() -> bool:
    """Whether this onnxruntime build offers the CUDA provider (sessions.cuda_usable, loaded late)."""
    from appliance.engines.ppocr_onnx import sessions  # onnxruntime only when a preset is chosen

    return sessions.cuda_usable()


def on_gpu(config: PpocrOnnxConfig) -> bool:
    """Whether the engine's sessions will ask for the CUDA provider."""
    return config.provider == "cuda" or (config.provider == "auto" and cuda_usable())


def preset_name(config: PpocrOnnxConfig) -> str:
    """The preset `config` asks for, with `auto` decided by the machine and the provider setting."""
    if config.preset != "auto":
        return config.preset
    if on_gpu(config):
        return "accurate"
    return "accurate" if len(os.sched_getaffinity(0)) >= MIN_CORES_ACCURATE else "fast"


def apply_preset(config: PpocrOnnxConfig) -> tuple[PpocrOnnxConfig, str]:
    """The config with its preset's values under the keys the site set itself, and the preset's name."""
    name = preset_name(config)
    if name == "custom":
        return config, name
    explicit = config.model_dump(include=config.model_fields_set)
    values = dict(PRESETS[name])
    # The shipped INT8 detector is PP-OCRv6's: a site that picks another set gets its FP32 models.
    if on_gpu(config) or explicit.get("models", values["models"]) != values["models"]:
        values["precision"] = _FP32
    merged = {**config.model_dump(), **values, **explicit}
    return PpocrOnnxConfig.model_validate(merged), name
