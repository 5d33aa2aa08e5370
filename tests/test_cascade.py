"""The engine cascade: which pages the VLM reads again, its draft, its boxes, and every way it falls back."""

from __future__ import annotations

import numpy as np

from appliance.config import CascadeConfig
from appliance.document import Line
from appliance.engines.base import PageText
from appliance.engines.vlm_gguf.output import make_line
from appliance.pipeline.cascade import Cascade, place_lines
from tests.fakes.engines import FakeVlmReader

PAGE = np.full((400, 300, 3), 255, dtype=np.uint8)


def _onnx_line(text: str, y: float, confidence: float) -> Line:
    line = make_line(text, [confidence] * len(text), (20.0, y, 220.0, y + 20.0), engine="ppocr_onnx")
    return line


def _first_read(confidence: float) -> PageText:
    return PageText(
        lines=[
            _onnx_line("TOTAL 12.5O", 200.0, confidence),
            _onnx_line("ACME STORE", 20.0, confidence),
            _onnx_line("TEA 3.00", 100.0, confidence),
        ],
        timings_ms={"det": 5.0},
    )


def test_off_and_confident_pages_keep_the_onnx_read_without_calling_the_vlm() -> None:
    reader = FakeVlmReader(["X"])
    for config, confidence in (
        (CascadeConfig(mode="off"), 0.5),
        (CascadeConfig(mode="below_threshold"), 0.95),
    ):
        result = Cascade(reader, config).refine(PAGE, _first_read(confidence))
        assert [line.engine for line in result.lines] == ["ppocr_onnx"] * 3
        assert result.details["cascade"]["vlm_used"] is False
    assert reader.hints == []


def test_an_unsure_page_is_read_again_with_the_onnx_text_in_reading_order_as_the_draft() -> None:
    reader = FakeVlmReader(["ACME STORE", "TEA 3.00", "TOTAL 12.50"])
    result = Cascade(reader, CascadeConfig(mode="below_threshold", min_confidence=0.9)).refine(
        PAGE, _first_read(0.6)
    )
    assert reader.hints == ["ACME STORE\nTEA 3.00\nTOTAL 12.5O"]
    assert [line.text for line in result.lines] == ["ACME STORE", "TEA 3.00", "TOTAL 12.50"]
    assert all(line.engine == "vlm_gguf" for line in result.lines)
    # Each VLM line sits where the ONNX engine found it (the corrected total included).
    assert [line.box[1] for line in result.lines] == [20.0, 100.0, 200.0]
    assert result.details["cascade"]["route"] == "vlm"
    assert result.details["vlm_gguf"]["acceptance_rate"] == 0.8
    assert result.timings_ms["det"] == 5.0 and result.timings_ms["vlm_decode"] == 1.0


def test_always_reads_confident_pages_too() -> None:
    reader = FakeVlmReader(["ACME STORE"])
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.99))
    assert result.details["cascade"]["vlm_used"] is True
    assert len(reader.hints) == 1


def test_a_vlm_failure_keeps_the_onnx_read_and_says_why() -> None:
    reader = FakeVlmReader([], outcome="crash")
    first = _first_read(0.5)
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, first)
    assert [line.text for line in result.lines] == [line.text for line in first.lines]
    assert result.details["cascade"]["route"] == "onnx_fallback"
    assert "llama_decode failed" in result.details["cascade"]["error"]
    assert any("the ONNX read stands" in warning for warning in result.warnings)


def test_a_stopped_generation_keeps_the_onnx_read_and_sends_the_page_to_review() -> None:
    for outcome in ("timeout", "repetition", "max_tokens"):
        reader = FakeVlmReader(["ACME"], outcome=outcome)
        result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.5))
        assert all(line.engine == "ppocr_onnx" for line in result.lines)
        assert result.details["cascade"]["route"] == "onnx_fallback"
        assert result.review_reasons, outcome


def test_unmatched_vlm_lines_sit_between_their_matched_neighbours() -> None:
    onnx = [_onnx_line("FIRST LINE", 10.0, 0.9), _onnx_line("LAST LINE", 110.0, 0.9)]
    vlm = [
        make_line(text, [0.9] * len(text), (0, 0, 1, 1))
        for text in ("FIRST LINE", "something the onnx engine missed", "and more", "LAST LINE")
    ]
    placed = place_lines(vlm, onnx)
    assert [line.box[1] for line in placed] == [10.0, 30.0, 70.0, 110.0]
    assert placed[1].box[3] == 70.0  # the two missed lines share the gap 30..110 evenly
    assert [line.text for line in placed] == [line.text for line in vlm]


def test_a_repeated_line_matches_in_order() -> None:
    onnx = [
        _onnx_line("SUBTOTAL", 10.0, 0.9),
        _onnx_line("TAX", 40.0, 0.9),
        _onnx_line("SUBTOTAL", 70.0, 0.9),
    ]
    vlm = [make_line(t, [0.9] * len(t), (0, 0, 1, 1)) for t in ("SUBTOTAL", "TAX", "SUBTOTAL")]
    assert [line.box[1] for line in place_lines(vlm, onnx)] == [10.0, 40.0, 70.0]


def test_an_empty_vlm_answer_on_a_page_with_text_keeps_the_onnx_read() -> None:
    reader = FakeVlmReader([])
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.5))
    assert [line.engine for line in result.lines] == ["ppocr_onnx"] * 3
    assert result.details["cascade"] == {
        "vlm_used": True,
        "why": "profile reads every page with the VLM",
        "route": "onnx_fallback",
        "error": "VLM stopped: empty answer",
    }
