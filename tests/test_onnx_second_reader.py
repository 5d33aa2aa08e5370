"""An ONNX recogniser as the cascade's second reader: its config, its reads, and the cascade through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from appliance.config import (
    AppConfig,
    CascadeConfig,
    EngineConfig,
    OnnxReaderConfig,
    PpocrOnnxConfig,
    RasterizeConfig,
    parse_config,
)
from appliance.document import Line
from appliance.engines.base import PageText
from appliance.engines.factory import build_engine, second_reader_of
from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader
from appliance.engines.text_lines import make_line
from appliance.errors import ConfigError
from appliance.pipeline.cascade import Cascade
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from appliance.variants import variant_cascade_config, variant_engine_config
from tests import rendering

V6_REC_SHA256 = "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884"


def _lines_cascade(**keys: object) -> dict[str, object]:
    return {"cascade": {"mode": "below_threshold", "unit": "lines", **keys}}


def test_the_old_second_reader_key_is_refused_with_the_keys_that_replace_it() -> None:
    raw = {"engine": {"ppocr_onnx": {"second_reader": {"models": "ppocrv5_mobile", "min_confidence": 0.95}}}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    message = str(error.value)
    assert "engine.ppocr_onnx: second_reader was replaced" in message
    assert "engine.onnx_reader.models" in message and "reader: onnx_reader" in message


def test_a_cascade_names_a_second_reader_that_is_loaded() -> None:
    assert AppConfig().engine.second_readers() == (), "the default configuration loads no second reader"
    with pytest.raises(ConfigError, match="no second reader is set"):
        parse_config({"profiles": {"default": _lines_cascade()}})
    with pytest.raises(ConfigError, match=r"reader is 'onnx_reader' but engine\.onnx_reader is not set"):
        parse_config({"profiles": {"default": _lines_cascade(reader="onnx_reader")}})
    both = {"vlm_gguf": {"model_dir": "/nonexistent"}, "onnx_reader": {}}
    with pytest.raises(ConfigError, match="reader must name one of vlm_gguf, onnx_reader"):
        parse_config({"engine": both, "profiles": {"default": _lines_cascade()}})
    with pytest.raises(ConfigError, match=r"unit must be 'lines' with the onnx_reader"):
        parse_config(
            {"engine": {"onnx_reader": {}}, "profiles": {"default": {"cascade": {"mode": "always"}}}}
        )
    config = parse_config(
        {"engine": both, "profiles": {"default": _lines_cascade(reader="onnx_reader", min_confidence=0.93)}}
    )
    assert config.engine.second_readers() == ("vlm_gguf", "onnx_reader")


def test_a_variant_with_a_second_reader_is_an_onnx_reader_and_a_line_cascade() -> None:
    spec = "fp32+models=ppocrv5_mobile+second_reader=ppocrv6_small@0.93+keep=more_confident"
    engine = variant_engine_config(EngineConfig(), spec)
    assert engine.ppocr_onnx.models == "ppocrv5_mobile"
    assert engine.onnx_reader == OnnxReaderConfig(models="ppocrv6_small")
    assert variant_cascade_config(spec) == CascadeConfig(
        mode="below_threshold", unit="lines", min_confidence=0.93, reader="onnx_reader", keep="more_confident"
    )
    assert variant_cascade_config("det=int8+preset=fast") is None
    assert variant_engine_config(EngineConfig(), "det=int8+preset=fast").onnx_reader is None


@pytest.fixture(scope="module")
def reader() -> Iterator[OnnxLineReader]:
    loaded = OnnxLineReader(OnnxReaderConfig(provider="cpu", intra_op_threads=1))
    yield loaded
    loaded.close()


def _unsure(text: str, box: tuple[float, float, float, float]) -> Line:
    line = make_line(text, [0.4] * len(text), box, "ppocr_onnx")
    x0, y0, x1, y1 = box
    line.polygon = ((x0, y0), (x1, y0), (x1, y1), (x0, y1))
    return line


def test_the_reader_reads_a_line_crop_as_one_line_and_describes_its_verified_model(
    reader: OnnxLineReader,
) -> None:
    page = rendering.render_lines([[(20, "TOTAL 40.17")]], width=400)
    x0, y0, x1, y1 = (int(value) for value in page.lines[0].box)
    crop = np.ascontiguousarray(page.bgr()[y0 - 4 : y1 + 4, x0 - 4 : x1 + 4])  # as the detector cuts it
    read = reader.read(crop, hint="T0TAL 4O.17")
    assert [line.text for line in read.lines] == ["TOTAL 40.17"]
    assert read.lines[0].engine == "onnx_reader" and read.lines[0].confidence > 0.9
    assert read.details == {"onnx_reader": {"lines_read": 1}} and read.timings_ms["rec2"] > 0
    # A crop far taller than wide holds vertical text: it is turned a quarter before reading.
    turned = reader.read(np.ascontiguousarray(np.rot90(crop, -1)))
    assert [line.text for line in turned.lines] == ["TOTAL 40.17"]
    model = reader.describe()["models"][0]
    assert model["sha256"] == V6_REC_SHA256 and model["provider"] == "CPUExecutionProvider"


def test_the_cascade_replaces_unsure_lines_with_the_readers_reads_of_their_crops(
    reader: OnnxLineReader,
) -> None:
    page = rendering.receipt()
    # A first read that got every line wrong, unsure, in the right boxes (the glyphs' own).
    first = PageText(lines=[_unsure(line.text.replace("O", "0"), line.box) for line in page.lines])
    config = CascadeConfig(mode="below_threshold", unit="lines", reader="onnx_reader")
    result = Cascade(reader, config).refine(page.bgr(), first)
    right = [line for line, truth in zip(result.lines, page.lines, strict=True) if line.text == truth.text]
    assert len(right) >= len(page.lines) - 2, [line.text for line in result.lines]
    assert {line.engine for line in right} == {"onnx_reader"}
    assert [line.box for line in result.lines] == [line.box for line in first.lines]


def test_a_profile_reads_through_the_onnx_reader_end_to_end(tmp_path: Path) -> None:
    page = rendering.render_lines(rendering.RECEIPT_ROWS[:6], width=860)
    path = tmp_path / "receipt.png"
    page.image.save(path)
    config = EngineConfig(
        ppocr_onnx=PpocrOnnxConfig(provider="cpu", models="ppocrv5_mobile", preset="custom"),
        onnx_reader=OnnxReaderConfig(provider="cpu"),
    )
    engine = build_engine(config)
    try:
        assert second_reader_of(engine, "onnx_reader") is not None
        cascade = CascadeConfig(mode="always", unit="lines", reader="onnx_reader")
        document = DocumentProcessor(engine, Rasterizer(RasterizeConfig()), cascade=cascade).process(path)
    finally:
        engine.close()
    lines = [line for block in document.pages[0].blocks for line in block.lines]
    assert lines and {line.engine for line in lines} == {"onnx_reader"}
    assert "CORNER BAKERY SDN BHD" in {line.text for line in lines}
    assert document.pages[0].engine_details["cascade"]["reader"] == "onnx_reader"
    assert "onnx_reader" in document.engine["second_readers"]


def test_the_old_keys_explicit_null_still_loads_as_no_second_reader() -> None:
    config = parse_config({"engine": {"ppocr_onnx": {"second_reader": None, "preset": "fast"}}})
    assert config.engine.ppocr_onnx.preset == "fast" and config.engine.second_readers() == ()


def test_the_reader_keeps_step_evidence_when_asked_and_scores_its_own_read_highest(
    reader: OnnxLineReader,
) -> None:
    page = rendering.receipt()
    box = page.lines[0].box
    crop = page.bgr()[int(box[1]) - 4 : int(box[3]) + 4, max(0, int(box[0]) - 4) : int(box[2]) + 4]
    assert reader.read(crop).lines[0].likelihood is None
    assert reader.keep_step_evidence(4)
    try:
        line = reader.read(crop).lines[0]
    finally:
        reader.keep_step_evidence(0)
    assert line.likelihood is not None
    assert line.likelihood(line.text) > line.likelihood(line.text.replace(line.text[0], "#", 1)) + 3
