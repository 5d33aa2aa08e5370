"""GGUF OCR vision-language models on llama.cpp, with speculative decoding from drafts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # llama_cpp loads only when the engine is built
    from appliance.engines.vlm_gguf.engine import VlmGgufEngine

__all__ = ["VlmGgufEngine"]


def __getattr__(name: str) -> object:
    if name == "VlmGgufEngine":
        from appliance.engines.vlm_gguf.engine import VlmGgufEngine

        return VlmGgufEngine
    raise AttributeError(name)
