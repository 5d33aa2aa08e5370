"""The engine boundary: engines built by name from a registry, the second reader typed, details read typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from appliance.config import EngineConfig, OnnxReaderConfig, VlmGgufConfig
from appliance.engines import factory
from appliance.engines.base import Engine, SecondReader, parallel_reads
from appliance.engines.details import CascadeRecord, ReadFigures
from appliance.errors import ModelError
from appliance.pipeline.cascade import decoding_totals, gpu_memory_peak
from tests.fakes.engines import FakeVlmReader, FixedTextEngine

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test are undone after it."""
    monkeypatch.setattr(factory, "_ENGINES", dict(factory._ENGINES))
    monkeypatch.setattr(factory, "_SECOND_READERS", dict(factory._SECOND_READERS))


def test_the_configured_name_is_looked_up_in_the_registry(registry: None) -> None:
    built: list[EngineConfig] = []

    @factory.register_engine("ppocr_onnx")
    def fake(config: EngineConfig) -> Engine:
        built.append(config)
        return FixedTextEngine("FROM THE REGISTRY")

    engine = factory.build_engine(EngineConfig())

    assert isinstance(engine, FixedTextEngine) and built == [EngineConfig()]
    assert factory.vlm_of(engine) is None


def test_an_unregistered_name_is_refused_with_the_names_that_are(registry: None) -> None:
    config = EngineConfig.model_construct(name="tesseract")  # past the schema, as a stale build would be
    with pytest.raises(ValueError, match="unknown engine 'tesseract'; registered: ppocr_onnx"):
        factory.build_engine(config)


def test_a_second_reader_is_paired_with_the_first_and_given_a_workers_share(
    registry: None, tmp_path: Path
) -> None:
    shares: list[int] = []
    closed: list[str] = []

    class Reader(FakeVlmReader):
        def close(self) -> None:
            closed.append("vlm")

    factory.register_engine("ppocr_onnx")(lambda _config: FixedTextEngine())

    @factory.register_second_reader("vlm_gguf")
    def fake_vlm(config: EngineConfig, workers: int) -> SecondReader:
        assert config.vlm_gguf is not None
        shares.append(config.vlm_gguf.vram_budget_mb // workers)
        return Reader(["HELLO"])

    config = EngineConfig(vlm_gguf=VlmGgufConfig(model_dir=tmp_path, vram_budget_mb=6000))
    engine = factory.build_engine(config, workers=3)

    vlm = factory.vlm_of(engine)
    assert isinstance(vlm, Reader) and shares == [2000]
    assert engine.describe()["vlm"]["name"] == "vlm_gguf"
    engine.close()
    assert closed == ["vlm"]


class _Reader(FakeVlmReader):
    """A second reader of a given name that records its closing."""

    def __init__(self, name: str, closed: list[str]) -> None:
        super().__init__(["HELLO"])
        self.name = name
        self._closed = closed

    def close(self) -> None:
        self._closed.append(self.name)


def test_every_configured_second_reader_is_built_and_found_by_name(registry: None, tmp_path: Path) -> None:
    closed: list[str] = []
    factory.register_engine("ppocr_onnx")(lambda _config: FixedTextEngine())
    factory.register_second_reader("vlm_gguf")(lambda _config, _workers: _Reader("vlm_gguf", closed))
    factory.register_second_reader("onnx_reader")(lambda _config, _workers: _Reader("onnx_reader", closed))
    config = EngineConfig(vlm_gguf=VlmGgufConfig(model_dir=tmp_path), onnx_reader=OnnxReaderConfig())

    engine = factory.build_engine(config)

    onnx = factory.second_reader_of(engine, "onnx_reader")
    assert onnx is not None and onnx.name == "onnx_reader"
    assert factory.vlm_of(engine) is factory.second_reader_of(engine, "vlm_gguf")
    assert set(engine.describe()["second_readers"]) == {"vlm_gguf", "onnx_reader"}
    engine.close()
    assert closed == ["vlm_gguf", "onnx_reader"]


def test_a_second_reader_that_fails_to_load_closes_what_was_built(registry: None, tmp_path: Path) -> None:
    closed: list[str] = []

    class First(FixedTextEngine):
        def close(self) -> None:
            closed.append("first")

    def broken(_config: EngineConfig, _workers: int) -> SecondReader:
        raise ModelError("onnx_reader: the recogniser's sha256 does not match")

    factory.register_engine("ppocr_onnx")(lambda _config: First())
    factory.register_second_reader("vlm_gguf")(lambda _config, _workers: _Reader("vlm_gguf", closed))
    factory.register_second_reader("onnx_reader")(broken)
    config = EngineConfig(vlm_gguf=VlmGgufConfig(model_dir=tmp_path), onnx_reader=OnnxReaderConfig())

    with pytest.raises(ModelError, match="sha256"):
        factory.build_engine(config)
    assert closed == ["vlm_gguf", "first"]


def test_the_onnx_reader_alone_is_the_engines_second_reader(registry: None) -> None:
    factory.register_engine("ppocr_onnx")(lambda _config: FixedTextEngine())
    factory.register_second_reader("onnx_reader")(lambda _config, _workers: _Reader("onnx_reader", []))

    engine = factory.build_engine(EngineConfig(onnx_reader=OnnxReaderConfig()))

    assert factory.second_reader_of(engine) is factory.second_reader_of(engine, "onnx_reader")
    assert factory.second_reader_of(engine, "vlm_gguf") is None
    assert engine.describe()["second_readers"]["onnx_reader"]["name"] == "onnx_reader"


def test_the_registry_loads_no_engine_runtime_until_an_engine_is_built() -> None:
    program = (
        "import sys, appliance.engines.factory, appliance.pipeline.cascade, appliance.pipeline.read_job\n"
        "print(sorted(m for m in ('onnxruntime', 'llama_cpp') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"


# What the daemon's own process imports to decide about the session server and to start it: the
# ONNX engine's folder is entered (its __init__ runs) without loading onnxruntime, which on a GPU
# box would give the daemon a CUDA context of its own beside the server's.
DAEMON_MODULES = (
    "appliance.daemon",
    "appliance.workers",
    "appliance.session_server_keeper",
    "appliance.engines.factory",
    "appliance.engines.shared_sessions",
    "appliance.engines.ppocr_onnx.cuda_driver",
    "appliance.engines.ppocr_onnx.session_server",
)


def test_the_daemon_imports_no_onnxruntime() -> None:
    program = (
        f"import sys, {', '.join(DAEMON_MODULES)}\n"
        "print(sorted(m for m in ('onnxruntime', 'llama_cpp') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"


def test_the_onnx_engine_is_still_imported_from_its_folder_by_name() -> None:
    from appliance.engines import ppocr_onnx
    from appliance.engines.ppocr_onnx.engine import PpocrOnnxEngine

    assert ppocr_onnx.PpocrOnnxEngine is PpocrOnnxEngine
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        ppocr_onnx.nothing  # noqa: B018


def _page(route: str | None = None, kept: list[str] | None = None, **vlm: Any) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if route is not None:
        details["cascade"] = {"route": route, "lines_kept": kept or []}
    if vlm:
        details["vlm_gguf"] = vlm
    return details


def test_engine_details_are_read_through_typed_views() -> None:
    page = _page("vlm_lines", ["line 2: VLM stopped: timeout"], generated_tokens=12, stop_reason="timeout")

    figures = ReadFigures.of(page)
    record = CascadeRecord.of(page)

    assert figures is not None and figures.cut_short and figures.decoding["generated_tokens"] == 12.0
    assert figures.gpu_memory_used_bytes is None
    assert record is not None and record.fallbacks == 1
    assert ReadFigures.of(_page("vlm")) is None and CascadeRecord.of({}) is None


def test_decoding_sums_and_the_memory_peak_over_pages() -> None:
    pages = [
        _page("vlm", generated_tokens=10, accepted_tokens=4, gpu_memory_used_bytes=7),
        _page("onnx_fallback"),
        _page("vlm_lines", ["a", "b"], generated_tokens=5, gpu_memory_used_bytes=9),
        {},
    ]

    totals = decoding_totals(pages)

    assert totals["pages"] == 2 and totals["generated_tokens"] == 15 and totals["accepted_tokens"] == 4
    assert totals["fallbacks"] == 3
    assert gpu_memory_peak(pages) == 9 and gpu_memory_peak([{}]) is None
    assert "fallbacks" not in decoding_totals([_page("vlm", generated_tokens=1)])


class _TwoAtOnce(FixedTextEngine):
    parallel_reads = 2


class _OneAtATimeReader(FakeVlmReader):
    parallel_reads = 1


def test_a_pair_reads_as_many_pages_at_once_as_its_first_engine_unless_a_reader_says_fewer() -> None:
    assert parallel_reads(FixedTextEngine()) == 1  # an engine that does not say reads one at a time
    assert parallel_reads(factory.EnginePair(_TwoAtOnce(), FakeVlmReader(["A"]))) == 2
    assert parallel_reads(factory.EnginePair(_TwoAtOnce(), _OneAtATimeReader(["A"]))) == 1


@pytest.mark.parametrize(
    ("cores", "workers", "configured", "threads", "budget"),
    [(8, 2, 0, 4, 3000), (8, 3, 0, 2, 2000), (2, 4, 0, 1, 1500), (8, 2, 3, 3, 3000)],
)
def test_the_vlm_of_each_worker_gets_its_share_of_the_card_and_of_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, workers: int, configured: int, threads: int, budget: int
) -> None:
    """threads 0: the cores shared among the copies reading at once; a number set is kept as it is."""
    monkeypatch.setattr(factory.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    vlm = VlmGgufConfig(
        model_dir=REPO / "tests" / "fixtures" / "vlm" / "qwen2vl",
        device="cpu",
        vram_budget_mb=6000,
        threads=configured,
    )
    reader = factory.build_second_reader(EngineConfig(vlm_gguf=vlm), "vlm_gguf", workers)
    try:
        described = reader.describe()
        assert (described["threads"], described["memory_plan"]["budget_mb"]) == (threads, budget)
    finally:
        reader.close()
