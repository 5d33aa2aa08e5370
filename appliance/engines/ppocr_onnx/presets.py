"""Named reader presets: what `engine.ppocr_onnx.preset` fills in for the keys a site leaves unset.

A site picks `accurate` or `fast` by name instead of tuning a dozen keys; any key it does set in
its config wins over the preset's value. `auto` takes `accurate` where onnxruntime has a usable
CUDA provider (a GPU has time to spare for the second reader) and `fast` on the CPU, and the
engine records which one it took. `custom` applies nothing: every key is the config's own.
"""

from __future__ import annotations

from typing import Any

from appliance.config import PpocrOnnxConfig

# The figures behind each choice are in bench/README.md ("OCR accuracy and speed").
PRESETS: dict[str, dict[str, Any]] = {
    # PP-OCRv6 small throughout, its detector at full size, lines padded to its training width.
    # No second reader: PP-OCRv5's recogniser reading again the lines PP-OCRv6 is unsure of (below
    # 0.95) made receipts worse (2.69% -> 2.74% CER, 3.51% -> 3.77% counting spaces: it is sure of
    # itself where it runs words together).
    "accurate": {
        "models": "ppocrv6_small",
        "det_limit_side_len": 1280,
        "rec_min_width": 320,
        "second_reader": None,
    },
    # PP-OCRv6 small with a smaller detector input and short lines padded less; no second reader.
    "fast": {
        "models": "ppocrv6_small",
        "det_limit_side_len": 960,
        "rec_min_width": 160,
        "second_reader": None,
    },
}


def cuda_usable() -> bool:
    """Whether this onnxruntime build offers the CUDA provider (the sessions check the rest)."""
    import onnxruntime as ort  # only when a preset must be chosen by the machine

    return "CUDAExecutionProvider" in ort.get_available_providers()


def preset_name(config: PpocrOnnxConfig) -> str:
    """The preset `config` asks for, with `auto` decided by the machine and the provider setting."""
    if config.preset != "auto":
        return config.preset
    if config.provider == "cpu":
        return "fast"
    return "accurate" if config.provider == "cuda" or cuda_usable() else "fast"


def apply_preset(config: PpocrOnnxConfig) -> tuple[PpocrOnnxConfig, str]:
    """The config with its preset's values under the keys the site set itself, and the preset's name."""
    name = preset_name(config)
    if name == "custom":
        return config, name
    explicit = config.model_dump(include=config.model_fields_set)
    merged = {**config.model_dump(), **PRESETS[name], **explicit}
    return PpocrOnnxConfig.model_validate(merged), name
