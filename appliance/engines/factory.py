"""Builds the engines a configuration names, looked up by name in a registry of loaders.

Adding an engine is registering a loader here (`register_engine`, `register_second_reader`);
each loader imports its engine's module when it is called, so onnxruntime and llama.cpp load
only in a process that uses them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.config import EngineConfig
from appliance.engines.base import Engine, PageText, SecondReader, parallel_reads

# A reading engine's loader gets the whole engine config (its own section is in there);
# a second reader's loader gets it too, and how many copies of it read at once (the workers, or the
# session server's copies), which share the VLM's VRAM budget and the cores.
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
    assert config.vlm_gguf is not None
    if config.vlm_gguf.session_server is not None:  # read in the session server, for every worker
        from appliance.engines.served_reader import ServedReader

        local = config.vlm_gguf.model_copy(update={"session_server": None})  # what the server loads
        built_there = config.model_copy(update={"vlm_gguf": local})
        return ServedReader(config.vlm_gguf.session_server, "vlm_gguf", built_there)
    from appliance.engines.vlm_gguf.engine import VlmGgufEngine  # llama.cpp loads only when used

    copies = max(workers, 1)
    share = config.vlm_gguf.vram_budget_mb // copies
    # The cores shared among the copies that read at once, as the card is: one llama.cpp thread a
    # core in every copy oversubscribed them (on 2 cores, 2 workers reading every receipt line
    # again read 0.19 pages/s that way, 0.62 with one thread each: bench/README.md, "The VLM's
    # threads").
    threads = config.vlm_gguf.threads or max(1, cores() // copies)
    return VlmGgufEngine(config.vlm_gguf.model_copy(update={"vram_budget_mb": share, "threads": threads}))


def cores() -> int:
    """The cores this process may run on (its affinity: a unit's CPUAffinity, a container's cpuset)."""
    return len(os.sched_getaffinity(0))


@register_second_reader("onnx_reader")
def _onnx_reader(config: EngineConfig, workers: int) -> SecondReader:
    from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader  # onnxruntime loads only when used

    assert config.onnx_reader is not None
    return OnnxLineReader(config.onnx_reader)


class EnginePair:
    """The engine that reads every page, and the second readers profiles with a cascade send reads to.

    It reads as its first engine does; the document processor finds a profile's second reader
    here (`second_reader_of`) and builds a cascade for it. All live in one worker process, so a
    page's image is never copied between processes and the VLM's memory plan counts once per worker.
    """

    def __init__(self, first: Engine, *readers: SecondReader) -> None:
        if not readers:
            raise ValueError("an EnginePair needs at least one second reader")
        self.first = first
        self.readers = {reader.name: reader for reader in readers}
        self.name = first.name
        # As many pages at once as the first engine reads well, unless a second reader says fewer:
        # the VLM reads one thing at a time on its one llama.cpp context and needs the GPU memory
        # that a second page in flight would take (4.9-5.2 GB against 3.9 on an H200).
        declared = [parallel_reads(reader) for reader in readers if hasattr(reader, "parallel_reads")]
        self.parallel_reads = min([parallel_reads(first), *declared])

    @property
    def vlm(self) -> SecondReader:
        """The first of the second readers (the VLM, where one is loaded: it is registered first)."""
        return next(iter(self.readers.values()))

    def describe(self) -> dict[str, Any]:
        # "vlm" stays the first reader's description: the status API looks for the VLM's memory there.
        described: dict[str, Any] = {"vlm": self.vlm.describe()}
        if len(self.readers) > 1 or self.vlm.name != "vlm_gguf":
            described["second_readers"] = {name: reader.describe() for name, reader in self.readers.items()}
        return {**self.first.describe(), **described}

    def recognize(self, image: np.ndarray) -> PageText:
        return self.first.recognize(image)

    def close(self) -> None:
        try:
            for reader in self.readers.values():
                reader.close()
        finally:
            self.first.close()


def build_engine(config: EngineConfig, workers: int = 1) -> Engine:
    """Load and verify the configured engines' models; raises ModelError with what is wrong.

    Every worker process builds its own engines, so the VLM's VRAM budget and cores, which are
    the appliance's, are shared equally among `workers`.
    """
    loader = _ENGINES.get(config.name)
    if loader is None:  # the config schema lists the engines; a registry out of step with it is a bug
        raise ValueError(f"unknown engine {config.name!r}; registered: {', '.join(_ENGINES)}")
    first = loader(config)
    readers: list[SecondReader] = []
    try:
        for name in config.second_readers():
            readers.append(build_second_reader(config, name, workers))
    except BaseException:
        for reader in readers:
            reader.close()
        first.close()
        raise
    return EnginePair(first, *readers) if readers else first


def build_second_reader(config: EngineConfig, name: str, workers: int = 1) -> SecondReader:
    """The second reader `name` of `config`, with the VLM's VRAM budget shared among `workers` copies."""
    if name not in _SECOND_READERS:  # as with engines: the schema and the registry disagree
        raise ValueError(f"unknown second reader {name!r}; registered: {', '.join(_SECOND_READERS)}")
    return _SECOND_READERS[name](config, workers)


def second_reader_of(engine: Engine, name: str | None = None) -> SecondReader | None:
    """The second reader `name` held by an engine built here (None: its first one), if it has it."""
    if not isinstance(engine, EnginePair):
        return None
    return engine.vlm if name is None else engine.readers.get(name)


def vlm_of(engine: Engine) -> SecondReader | None:
    """The cascade's second reader held by an engine built here, if any (its first one)."""
    return second_reader_of(engine)


__all__ = [
    "EnginePair",
    "build_engine",
    "build_second_reader",
    "engine_names",
    "register_engine",
    "register_second_reader",
    "second_reader_of",
    "vlm_of",
]
