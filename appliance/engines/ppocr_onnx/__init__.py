"""PP-OCR v5 and v6 on onnxruntime: detection, line orientation and recognition from verified files."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.engines.ppocr_onnx.engine import PpocrOnnxEngine, default_model_dir

__all__ = ["PpocrOnnxEngine", "default_model_dir"]


def __getattr__(name: str) -> Any:
    """The engine's names, imported on first use (PEP 562).

    Importing a module of this folder runs this file first; the daemon imports the session
    server and cuda_driver.py from here and must not load onnxruntime (and with it, on a GPU
    box, CUDA) in its own process, which only decides about and starts the processes that use it.
    """
    if name in __all__:
        return getattr(importlib.import_module("appliance.engines.ppocr_onnx.engine"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
