"""The real PP-OCRv5 engine reads pages the tests render, within measured error bounds."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.base import parallel_reads
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx import engine as engine_module
from appliance.engines.ppocr_onnx.engine import pages_in_flight
from appliance.pipeline.layout import order_page
from tests import rendering
from tests.scoring import cer

# Bounds: on these rendered pages the engine measured 0.8% (receipt: "2 x 4.50" read with a
# multiplication sign) and 0.0% (Chinese pages). The bounds leave room for a few characters of
# drift between onnxruntime versions but fail on any real regression (a shifted dictionary, a
# lost line or a broken crop each cost well over 10%).
RECEIPT_CER_BOUND = 0.03
CHINESE_CER_BOUND = 0.02


def _read(engine: PpocrOnnxEngine, image: np.ndarray) -> str:
    return "\n".join(block.text for block in order_page(engine.recognize(image).lines))


def test_reads_english_receipt(engine: PpocrOnnxEngine) -> None:
    page = rendering.receipt()
    assert cer(_read(engine, page.bgr()), page.text) <= RECEIPT_CER_BOUND


def test_reads_chinese_page(engine: PpocrOnnxEngine) -> None:
    page = rendering.chinese_page()
    assert cer(_read(engine, page.bgr()), page.text) <= CHINESE_CER_BOUND


def test_orientation_keeps_long_upright_lines(engine: PpocrOnnxEngine) -> None:
    """Long full-width lines on an upright page are neither flipped nor dropped."""
    page = rendering.long_chinese_lines()
    result = engine.recognize(page.bgr())
    assert len(result.lines) == len(page.lines)
    assert not any(line.rotated_180 for line in result.lines)
    assert cer(_read(engine, page.bgr()), page.text) <= CHINESE_CER_BOUND


def test_upside_down_lines_are_read_flipped(engine: PpocrOnnxEngine) -> None:
    page = rendering.chinese_page()
    upside_down = np.ascontiguousarray(page.bgr()[::-1, ::-1])
    result = engine.recognize(upside_down)
    assert len(result.lines) == len(page.lines)
    assert all(line.rotated_180 for line in result.lines)
    read = "".join(sorted(line.text.replace(" ", "") for line in result.lines))
    expected = "".join(sorted(line.text.replace(" ", "") for line in page.lines))
    assert cer(read, expected) <= CHINESE_CER_BOUND


def test_lines_carry_boxes_words_and_confidences(engine: PpocrOnnxEngine) -> None:
    page = rendering.receipt()
    result = engine.recognize(page.bgr())
    total = next(line for line in result.lines if line.text == "TOTAL")
    expected = next(line for line in page.lines if line.text == "TOTAL")
    # The detected box covers the rendered text box (DB boxes are a little larger).
    x0, y0, x1, y1 = total.box
    ex0, ey0, ex1, ey1 = expected.box
    assert x0 <= ex0 + 3 and y0 <= ey0 + 3 and x1 >= ex1 - 3 and y1 >= ey1 - 3
    assert x1 - x0 < (ex1 - ex0) * 1.5
    assert len(total.char_confidences) == len(total.text)
    assert all(0.0 <= c <= 1.0 for c in total.char_confidences)
    assert total.confidence > 0.9
    # Word boxes split a line at its spaces, left to right, inside the line's box.
    address = next(line for line in result.lines if line.text.startswith("12 JALAN"))
    assert [word.text for word in address.words] == address.text.split()
    lefts = [word.box[0] for word in address.words]
    assert lefts == sorted(lefts)
    for word in address.words:
        assert address.box[0] - 2 <= word.box[0] < word.box[2] <= address.box[2] + 2


def test_blank_page_reads_nothing(engine: PpocrOnnxEngine) -> None:
    blank = np.full((1200, 900, 3), 255, dtype=np.uint8)
    assert engine.recognize(blank).lines == []


def test_reports_the_provider_it_runs_on(engine: PpocrOnnxEngine) -> None:
    description = engine.describe()
    providers = {model["role"]: model["provider"] for model in description["models"]}
    assert providers["det"] == providers["rec"] == providers["cls"] == "CPUExecutionProvider"
    assert "keys" not in providers, "PP-OCRv6's recogniser carries its dictionary: no keys file"


def test_orientation_can_be_switched_off() -> None:
    engine = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", use_line_orientation=False))
    assert "cls" not in engine.providers
    page = rendering.chinese_page()
    assert cer(_read(engine, page.bgr()), page.text) <= CHINESE_CER_BOUND


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_are_configurable(threads: int) -> None:
    engine = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", intra_op_threads=threads, line_parallelism=1))
    # The setting reaches the sessions the engine really runs (not only the config object) ...
    for reader in (engine._detector, engine._recognizer):
        assert reader._session.get_session_options().intra_op_num_threads == threads
    # ... and reading still works with it.
    page = rendering.receipt()
    assert cer(_read(engine, page.bgr()), page.text) <= RECEIPT_CER_BOUND


@pytest.mark.parametrize("setting", [":16:8", None])
def test_the_cublas_workspace_setting_reaches_every_session(
    monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    asked: list[str | None] = []
    real = engine_module.create_session

    def recording(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["cublas_workspace"])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "create_session", recording)
    PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", cublas_workspace_config=setting)).close()
    assert len(asked) == 3 and set(asked) == {setting}  # detector, orientation, recogniser


class _ThreadRecorder:
    """Wraps an onnxruntime session and notes which threads call run()."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.threads: set[int] = set()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return self._session.run(*args, **kwargs)


def test_lines_read_side_by_side_read_the_same() -> None:
    """Lines spread over single-threaded runs give the reads of one line at a time."""
    serial = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", intra_op_threads=2, line_parallelism=1))
    parallel = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", intra_op_threads=2, line_parallelism=3))
    assert parallel.describe()["line_parallelism"] == 3
    # On the CPU a page's lines already use the cores: a worker reads one job at a time.
    assert parallel.describe()["parallel_reads"] == parallel_reads(parallel) == 1
    options = {
        name: reader._session.get_session_options().intra_op_num_threads
        for name, reader in (("det", parallel._detector), ("rec", parallel._recognizer))
    }
    assert options == {"det": 2, "rec": 1}
    assert parallel._orientation is not None
    assert parallel._orientation._session.get_session_options().intra_op_num_threads == 1
    recorder = _ThreadRecorder(parallel._recognizer._session)
    parallel._recognizer._session = recorder
    orientation = _ThreadRecorder(parallel._orientation._session)
    parallel._orientation._session = orientation
    try:
        for image in (
            rendering.receipt().bgr(),
            np.ascontiguousarray(rendering.chinese_page().bgr()[::-1, ::-1]),
        ):
            expected = serial.recognize(image).lines
            got = parallel.recognize(image).lines
            assert [line.text for line in got] == [line.text for line in expected]
            assert [line.rotated_180 for line in got] == [line.rotated_180 for line in expected]
            for mine, theirs in zip(got, expected, strict=True):
                assert mine.char_confidences == pytest.approx(theirs.char_confidences, abs=1e-5)
        assert len(recorder.threads) > 1 and threading.get_ident() not in recorder.threads
        assert len(orientation.threads) > 1
    finally:
        serial.close()
        parallel.close()


def test_a_worker_reads_two_pages_at_once_only_on_cuda_with_its_own_sessions(tmp_path: Path) -> None:
    """Through a session server the pages in flight come from the workers, one page each."""
    assert pages_in_flight(on_cuda=True, session_server=None) == 2
    assert pages_in_flight(on_cuda=True, session_server=tmp_path / "sessions.sock") == 1
    assert pages_in_flight(on_cuda=False, session_server=None) == 1
