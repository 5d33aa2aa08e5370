"""Builds the engines a configuration names, looked up by name in a registry of loaders.

Adding an engine is registering a loader here (`register_engine`, `register_second_reader`);
each loader imports its engine's module when it is called, so onnxruntime and llama.cpp load
only in a process that uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.config import EngineConfig
from appliance.engines.base import Engine, PageText, SecondReader

# A reading engine's loader gets the whole engine config (its own section is in there);
# a second reader's loader gets it too, with the share of the VRAM budget of one worker.
EngineLoader = Callable[[EngineConfig], Engine]
SecondReaderLoader = Callable[[EngineConfig, int], SecondReader]

_ENGINES: dict[str, EngineLoader] = {}
_SECOND_READERS: dict[str, SecondReaderLoader] = {}


def register_engine(name: str) -> Callable[[EngineLoader], EngineLoader]:
    """Register the loader of the reading engine `engine.name` selects."""

    def add(loader: EngineLoader) -> EngineLoader:
        _ENGINES[name] = loader
        return loader

    return add


def register_second_reader(name: str) -> Callable[[SecondReaderLoader], SecondReaderLoader]:
    """Register the loader of a second reader, used when the config has a section of that name."""

    def add(loader: SecondReaderLoader) -> SecondReaderLoader:
        _SECOND_READERS[name] = loader
        return loader

    return add


def engine_names() -> tuple[str, ...]:
    """The reading engines this build can load."""
    return tuple(_ENGINES)


@register_engine("ppocr_onnx")
def _ppocr_onnx(config: EngineConfig) -> Engine:
    from appliance.engines.ppocr_onnx import PpocrOnnxEngine  # onnxruntime loads only when used

    return PpocrOnnxEngine(config.ppocr_onnx)


@register_second_reader("vlm_gguf")
def _vlm_gguf(config: EngineConfig, workers: int) -> SecondReader:
    from appliance.engines.vlm_gguf.engine import VlmGgufEngine  # llama.cpp loads only when used

    assert config.vlm_gguf is not None
    share = config.vlm_gguf.vram_budget_mb // max(workers, 1)
    return VlmGgufEngine(config.vlm_gguf.model_copy(update={"vram_budget_mb": share}))


class EnginePair:
    """The engine that reads every page, and the second reader that profiles with a cascade send pages to.

    It reads as its first engine does; the document processor finds the second reader here and
    builds a cascade for the profile. Both live in one worker process, so a page's image is never
    copied between processes and the VLM's memory plan counts once per worker.
    """

    def __init__(self, first: Engine, vlm: SecondReader) -> None:
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


def _second_reader_sections(config: EngineConfig) -> list[str]:
    """The registered second readers the config has a section for."""
    return [name for name in _SECOND_READERS if getattr(config, name, None) is not None]


def build_engine(config: EngineConfig, workers: int = 1) -> Engine:
    """Load and verify the configured engines' models; raises ModelError with what is wrong.

    Every worker process builds its own engines, so the VLM's VRAM budget, which is the
    appliance's, is shared equally among `workers`.
    """
    loader = _ENGINES.get(config.name)
    if loader is None:  # the config schema lists the engines; a registry out of step with it is a bug
        raise ValueError(f"unknown engine {config.name!r}; registered: {', '.join(_ENGINES)}")
    first = loader(config)
    sections = _second_reader_sections(config)
    if not sections:
        return first
    try:
        vlm = _SECOND_READERS[sections[0]](config, workers)
    except BaseException:
        first.close()
        raise
    return EnginePair(first, vlm)


def vlm_of(engine: Engine) -> SecondReader | None:
    """The cascade's second reader held by an engine built here, if any."""
    return engine.vlm if isinstance(engine, EnginePair) else None


__all__ = [
    "EnginePair",
    "build_engine",
    "engine_names",
    "register_engine",
    "register_second_reader",
    "vlm_of",
]
