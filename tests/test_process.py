"""One file to one Document: source identity, per-page timings, failures with reasons."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image

from appliance.config import RasterizeConfig
from appliance.errors import DocumentError, FailureReason
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests.fakes.engines import FixedTextEngine, OutOfMemoryEngine


def _tiff(path: Path, pages: int) -> Path:
    images = [Image.new("RGB", (200, 100), "white") for _ in range(pages)]
    images[0].save(path, save_all=True, append_images=images[1:])
    return path


def test_document_records_source_and_every_page(tmp_path: Path) -> None:
    path = _tiff(tmp_path / "scan.tif", 3)
    engine = FixedTextEngine("PAGE TEXT")
    document = DocumentProcessor(engine, Rasterizer(RasterizeConfig())).process(path)
    assert document.source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert document.source.size == path.stat().st_size
    assert document.source.media_type == "image/tiff"
    assert [page.index for page in document.pages] == [0, 1, 2]
    assert engine.pages_seen == 3
    assert document.timings_ms["total"] >= document.timings_ms["rasterize"] >= 0


def test_out_of_memory_becomes_an_engine_error(tmp_path: Path) -> None:
    path = _tiff(tmp_path / "scan.tif", 1)
    with pytest.raises(DocumentError) as raised:
        DocumentProcessor(OutOfMemoryEngine(), Rasterizer(RasterizeConfig())).process(path)
    assert raised.value.reason is FailureReason.ENGINE_ERROR
    assert "out of memory" in raised.value.message


def test_stop_request_interrupts_between_pages(tmp_path: Path) -> None:
    path = _tiff(tmp_path / "scan.tif", 5)
    engine = FixedTextEngine()
    calls = {"n": 0}

    def stop_after_two() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    with pytest.raises(InterruptedError):
        DocumentProcessor(engine, Rasterizer(RasterizeConfig())).process(path, should_stop=stop_after_two)
    assert engine.pages_seen == 2


def test_unsupported_file_fails_before_the_engine_runs(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just text", encoding="utf-8")
    engine = FixedTextEngine()
    with pytest.raises(DocumentError) as raised:
        DocumentProcessor(engine, Rasterizer(RasterizeConfig())).process(path)
    assert raised.value.reason is FailureReason.UNSUPPORTED_FORMAT
    assert engine.pages_seen == 0
