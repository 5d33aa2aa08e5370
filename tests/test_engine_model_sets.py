"""The engine's model sets: PP-OCRv6 with its dictionary from the model, and a second reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from appliance.config import PpocrOnnxConfig, SecondReaderConfig
from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.recognition import LineRead, align_keys, model_keys
from appliance.errors import ModelError
from appliance.pipeline.layout import order_page
from tests import rendering
from tests.scoring import cer


def _v6_rec() -> Path:
    return verify_models(load_manifest(builtin_manifest_path("ppocrv6_small")), None, roles=("rec",))["rec"]


def test_the_v6_dictionary_comes_from_the_model_with_blank_first_and_space_last() -> None:
    keys = model_keys(_v6_rec())
    assert len(keys) == 18_710
    assert keys[0] == "blank"
    assert keys[-1] == " "
    assert "A" in keys and "手" in keys
    assert align_keys(keys, 18_710, "test") == keys


def test_a_dictionary_that_does_not_fit_the_head_is_refused() -> None:
    keys = model_keys(_v6_rec())
    with pytest.raises(ModelError, match="18709 entries but the recognition model has 18710"):
        align_keys(keys[:-1], 18_710, "the dictionary")


def test_a_recogniser_without_a_dictionary_is_refused(tmp_path: Path) -> None:
    model = onnx.load(str(_v6_rec()))
    del model.metadata_props[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(model, str(bare))
    with pytest.raises(ModelError, match="no `character` dictionary"):
        model_keys(bare)


def test_the_default_engine_is_ppocrv6_and_reads_receipts_with_their_spaces(engine: PpocrOnnxEngine) -> None:
    described = engine.describe()
    assert described["manifest"] == "ppocrv6-small"
    assert described["classes"] == 18_710
    page = rendering.receipt()
    text = "\n".join(block.text for block in order_page(engine.recognize(page.bgr()).lines))
    assert cer(text, page.text) <= 0.03
    assert "CORNER BAKERY SDN BHD" in text, "words keep their spaces"


def test_the_previous_generation_can_still_be_chosen() -> None:
    engine = PpocrOnnxEngine(PpocrOnnxConfig(models="ppocrv5_mobile", provider="cpu"))
    assert engine.describe()["manifest"] == "ppocrv5-mobile"
    assert engine.describe()["classes"] == 18_385
    page = rendering.receipt()
    text = "\n".join(block.text for block in order_page(engine.recognize(page.bgr()).lines))
    assert cer(text, page.text) <= 0.03
    engine.close()


def test_derived_precision_sets_are_refused_for_a_set_they_were_not_made_from(tmp_path: Path) -> None:
    config = PpocrOnnxConfig(provider="cpu", variant_dir=tmp_path, precision={"det": "int8"})
    with pytest.raises(ModelError, match="derived sets are made from ppocrv5_mobile only"):
        PpocrOnnxEngine(config)


class _FixedRecognizer:
    """Stands in for the second recogniser: every crop reads as the same text and confidence."""

    def __init__(self, text: str, confidence: float) -> None:
        self.read: list[np.ndarray] = []
        self._text, self._confidence = text, confidence

    def recognize(self, crops: list[np.ndarray]) -> list[LineRead]:
        self.read.extend(crops)
        return [
            LineRead(self._text, [self._confidence] * len(self._text), [0.5] * len(self._text)) for _ in crops
        ]


@pytest.fixture(scope="module")
def second_reader_engine() -> PpocrOnnxEngine:
    loaded = PpocrOnnxEngine(
        PpocrOnnxConfig(provider="cpu", second_reader=SecondReaderConfig(min_confidence=1.0))
    )
    yield loaded  # type: ignore[misc]
    loaded.close()


def test_the_second_reader_reads_only_unsure_lines_and_keeps_the_more_confident_read(
    second_reader_engine: PpocrOnnxEngine,
) -> None:
    page = rendering.receipt().bgr()
    first = second_reader_engine.recognize(page)
    assert first.details["second_reader"]["lines_read"] == len(first.lines), "every line is below 1.0"
    assert "rec2" in first.timings_ms
    assert [model["role"] for model in second_reader_engine.describe()["models"]][-1] == "rec2"

    surer = _FixedRecognizer("SURE", 0.999_999)
    second_reader_engine._second = surer  # type: ignore[assignment]
    assert {line.text for line in second_reader_engine.recognize(page).lines} == {"SURE"}
    assert surer.read, "the unsure lines' crops went to the second reader"

    unsure = _FixedRecognizer("GUESS", 0.01)
    second_reader_engine._second = unsure  # type: ignore[assignment]
    texts = {line.text for line in second_reader_engine.recognize(page).lines}
    assert "GUESS" not in texts
    assert "TOTAL" in texts
