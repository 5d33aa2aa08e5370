"""One file to one Document: source identity, per-page timings, failures with reasons."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image

from appliance.config import RasterizeConfig
from appliance.engines.base import PageText
from appliance.engines.ppocr_onnx.session_server import SessionServerError
from appliance.errors import DocumentError, FailureReason
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests.fakes.engines import FixedTextEngine, OutOfMemoryEngine


class _ServerGone(FixedTextEngine):
    """An engine whose session server went away during a model run."""

    def recognize(self, image: object) -> PageText:
        raise SessionServerError("the session server at /run/s.sock went away during a request: closed")


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


def test_a_session_server_gone_mid_page_is_a_transient_engine_error(tmp_path: Path) -> None:
    path = _tiff(tmp_path / "scan.tif", 1)
    with pytest.raises(DocumentError) as raised:
        DocumentProcessor(_ServerGone(), Rasterizer(RasterizeConfig())).process(path)
    assert raised.value.reason is FailureReason.ENGINE_ERROR
    assert raised.value.transient
    assert raised.value.message.startswith("scan.tif page 1: the session server")


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


def test_route_document_gives_the_daemons_route_and_reasons(tmp_path: Path) -> None:
    from appliance.config import RoutingConfig
    from appliance.pipeline.process import route_document

    path = _tiff(tmp_path / "scan.tif", 1)
    unsure = DocumentProcessor(FixedTextEngine("TOTAL 9.00", 0.4), Rasterizer(RasterizeConfig())).process(
        path
    )
    decision = route_document(unsure, RoutingConfig(audit_rate=0.0))
    assert decision.route == "review"
    assert unsure.routing == {"route": "review", "reasons": decision.reasons}
    assert any("below 0.85" in reason for reason in decision.reasons)
    # A receipt without a date goes to review: the sure one carries its date.
    sure_engine = FixedTextEngine("25/12/2024 TOTAL 9.00", 0.99)
    sure = DocumentProcessor(sure_engine, Rasterizer(RasterizeConfig())).process(path)
    assert route_document(sure, RoutingConfig(audit_rate=0.0)).route == "done"
    assert sure.routing == {"route": "done", "reasons": []}


def test_process_command_writes_the_route_into_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from appliance.cli import main
    from appliance.engines import factory

    monkeypatch.setattr(factory, "build_engine", lambda *_args, **_kw: FixedTextEngine("HELLO", 0.4))
    config = tmp_path / "config.yaml"
    routing = "profiles:\n  default:\n    routing:\n      audit_rate: 0.0\n"
    config.write_text(f"paths:\n  state_dir: {tmp_path / 'state'}\n{routing}", encoding="utf-8")
    path = _tiff(tmp_path / "scan.tif", 1)
    out = tmp_path / "out"
    assert main(["process", str(path), "--out", str(out), "--config", str(config)]) == 0
    result = json.loads((out / "scan.tif.json").read_text(encoding="utf-8"))
    assert result["routing"]["route"] == "review"
    assert any("mean character confidence" in reason for reason in result["routing"]["reasons"])
    assert "route review" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["scan.tif.json", "scan.tif.txt"]  # nothing moved
