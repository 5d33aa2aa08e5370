"""`models verify`'s proof that the CUDA provider really runs here: one inference, and what ran it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appliance.engines.ppocr_onnx.cuda_driver import read_driver_version
from appliance.engines.ppocr_onnx.sessions import CUDA, ProviderChoice, cuda_usable, probe_provider


def smallest_model(paths: Mapping[str, Path]) -> Path:
    """The smallest ONNX file of an engine's models: the cheapest one to run a probe on."""
    models = [path for path in paths.values() if path.suffix == ".onnx"]
    if not models:
        raise ValueError("the engine has no ONNX model to probe")
    return min(models, key=lambda path: path.stat().st_size)


def check_cuda(requested: ProviderChoice, model: Path) -> dict[str, Any]:
    """Run `model` once on the CUDA provider unless the config asks for the CPU; the report says how it went.

    `ok` is False when CUDA was wanted (`cuda`, or `auto` with onnxruntime-gpu installed) and the
    inference did not run on it; `reason` then says why.
    """
    if requested == "cpu":
        return {"requested": requested, "checked": False, "ok": True, "reason": "provider: cpu"}
    if not cuda_usable():
        return {
            "requested": requested,
            "checked": False,
            "ok": requested == "auto",
            "reason": "this onnxruntime build has no CUDA provider (onnxruntime-gpu is not installed)",
        }
    driver = read_driver_version()
    probe = probe_provider(model, "cuda")
    ok = probe.provider == CUDA and probe.error is None
    return {
        "requested": requested,
        "checked": True,
        "ok": ok,
        "driver": None if driver is None else str(driver),
        "model": model.name,
        "provider": probe.provider,
        "inference_ms": None if probe.inference_ms is None else round(probe.inference_ms, 2),
        "reason": probe.error,
    }
