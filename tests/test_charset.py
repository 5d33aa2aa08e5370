"""A charset cuts the recogniser's head: kept probabilities stay exact, no other character comes out."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine, default_model_dir
from appliance.engines.ppocr_onnx.charset import LATIN, charset_classes, load_charset
from appliance.engines.ppocr_onnx.graph import folded_model, restrict_output_classes
from appliance.engines.ppocr_onnx.recognition import read_keys
from appliance.errors import ModelError
from appliance.pipeline.layout import order_page
from tests import rendering
from tests.scoring import cer

RECEIPT_CER_BOUND = 0.03  # as for the whole dictionary (tests/test_engine_ppocr_onnx.py)


def test_classes_keep_the_blank_first_and_only_allowed_entries() -> None:
    keys = ["blank", "A", "中", "b", "AB", " "]
    assert charset_classes(keys, set("Ab ")) == [0, 1, 3, 5]
    with pytest.raises(ModelError, match="shares no character"):
        charset_classes(keys, {"ж"})


def test_a_charset_file_is_read_and_a_bad_one_refused(tmp_path: Path) -> None:
    digits = tmp_path / "digits.txt"
    digits.write_text("0123456789\n.,\n", encoding="utf-8")
    assert load_charset(str(digits)) == set("0123456789.,")
    assert load_charset("latin") == set(LATIN)
    with pytest.raises(ModelError, match="neither a built-in set"):
        load_charset(str(tmp_path / "missing.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ModelError, match="lists no characters"):
        load_charset(str(empty))


def test_the_cut_head_gives_the_kept_probabilities_renormalised() -> None:
    folder = default_model_dir()
    keys = read_keys(folder / "ppocr_keys_v5.txt")
    kept = charset_classes(keys, set(LATIN))
    full_model, _ = folded_model(folder / "ppocrv5_rec.onnx")
    cut_model = restrict_output_classes(full_model, kept, len(keys))
    page = rendering.render_lines([[(8, "TOTAL 40.17")]], width=240, margin=8, spacing=1.2).bgr()
    line = cv2.resize(page, (round(page.shape[1] * 48 / page.shape[0]), 48))
    tensor = ((line.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]
    full = ort.InferenceSession(full_model, providers=["CPUExecutionProvider"])
    cut = ort.InferenceSession(cut_model, providers=["CPUExecutionProvider"])
    name = full.get_inputs()[0].name
    probabilities = full.run(None, {name: tensor})[0][0]
    restricted = cut.run(None, {name: tensor})[0][0]
    assert restricted.shape == (probabilities.shape[0], len(kept))
    expected = probabilities[:, kept] / probabilities[:, kept].sum(axis=1, keepdims=True)
    assert np.abs(restricted - expected).max() < 1e-4
    with pytest.raises(ValueError, match="classes"):
        restrict_output_classes(full_model, kept, len(keys) - 1)


def test_a_latin_engine_reads_receipts_and_writes_nothing_else(tmp_path: Path) -> None:
    engine = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", charset="latin"))
    assert engine.describe()["charset"] == "latin"
    assert engine.describe()["classes"] < 250  # of 18,710
    page = rendering.receipt()
    lines = engine.recognize(page.bgr()).lines
    read = "\n".join(block.text for block in order_page(lines))
    assert cer(read, page.text) <= RECEIPT_CER_BOUND
    chinese = engine.recognize(rendering.chinese_page().bgr()).lines
    assert all(set(line.text) <= set(LATIN) for line in lines + chinese)
    digits = tmp_path / "digits.txt"
    digits.write_text("0123456789.", encoding="utf-8")
    numeric = PpocrOnnxEngine(
        PpocrOnnxConfig(provider="cpu", charset=str(digits), use_line_orientation=False)
    )
    assert all(set(line.text) <= set("0123456789. ") for line in numeric.recognize(page.bgr()).lines)
