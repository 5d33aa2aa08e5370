"""Result files: JSON valid against the schema, text in reading order, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from appliance.config import RasterizeConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.outputs.atomic import write_atomic
from appliance.outputs.json_result import result_schema, validate_result
from appliance.outputs.writer import write_outputs
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests.fakes.engines import FixedTextEngine


def test_real_result_validates_and_carries_what_sites_need(
    engine: PpocrOnnxEngine, receipt_png: Path
) -> None:
    document = DocumentProcessor(engine, Rasterizer(RasterizeConfig())).process(receipt_png)
    paths = write_outputs(document, receipt_png.parent / "out", receipt_png.name, ["json", "text"])
    result = json.loads(paths["json"].read_text(encoding="utf-8"))
    validate_result(result)
    assert result["schema_version"] == "1.0"
    assert result["source"]["media_type"] == "image/png"
    assert len(result["source"]["sha256"]) == 64
    assert result["engine"]["name"] == "ppocr_onnx"
    assert {m["role"] for m in result["engine"]["models"]} == {"det", "cls", "rec"}
    page = result["pages"][0]
    assert page["width"] == 860
    assert set(page["timings_ms"]) >= {"rasterize", "det", "cls", "rec", "layout"}
    texts = [line["text"] for block in page["blocks"] for line in block["lines"]]
    assert "TOTAL" in texts
    assert 0.9 < result["confidence"] <= 1
    text = paths["text"].read_text(encoding="utf-8")
    assert text.splitlines()[0] == "CORNER BAKERY SDN BHD"
    assert "TOTAL 40.17" in text.splitlines()


def test_schema_rejects_a_result_missing_fields(engine: PpocrOnnxEngine, receipt_png: Path) -> None:
    result = DocumentProcessor(engine, Rasterizer(RasterizeConfig())).process(receipt_png).to_dict()
    del result["pages"][0]["blocks"][0]["lines"][0]["char_confidences"]
    with pytest.raises(jsonschema.ValidationError):
        validate_result(result)
    jsonschema.Draft202012Validator.check_schema(result_schema())


def test_multi_page_text_separates_pages_with_form_feed(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "two.tiff"
    pages = [Image.new("RGB", (300, 200), "white"), Image.new("RGB", (300, 200), "white")]
    pages[0].save(path, save_all=True, append_images=pages[1:])
    document = DocumentProcessor(FixedTextEngine("PAGE"), Rasterizer(RasterizeConfig())).process(path)
    paths = write_outputs(document, tmp_path / "out", path.name, ["text", "json"])
    assert paths["text"].read_text(encoding="utf-8") == "PAGE\n\fPAGE\n"
    assert json.loads(paths["json"].read_text(encoding="utf-8"))["page_count"] == 2


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new content")
    assert target.read_bytes() == b"new content"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "result.json"
    write_atomic(target, b"old")

    def broken_replace(self: Path, other: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
