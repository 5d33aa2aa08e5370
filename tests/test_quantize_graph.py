"""The exact FP32 rewrites done before quantization leave the recogniser's output unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from appliance.engines.ppocr_onnx import default_model_dir  # noqa: E402
from appliance.engines.ppocr_onnx.graph import (  # noqa: E402
    fold_affine_into_conv,
    fuse_hard_swish,
    hard_swish_as_clip,
    name_nodes,
)
from quantize.evaluate import cpu_session, edit_distance  # noqa: E402
from quantize.onnx_int8 import prepare  # noqa: E402


def test_edit_distance() -> None:
    assert edit_distance([1, 2, 3], [1, 3]) == 1
    assert edit_distance([], [4, 5]) == 2


def test_folding_is_exact_on_the_orientation_model(tmp_path: Path) -> None:
    source = default_model_dir() / "ppocrv5_cls.onnx"
    prepared = prepare("cls", source, tmp_path)
    tensor = np.random.default_rng(0).standard_normal((2, 3, 80, 160)).astype(np.float32)
    before = cpu_session(source).run(None, {"x": tensor})[0]
    after = cpu_session(prepared.path).run(None, {"x": tensor})[0]
    assert np.abs(before - after).max() < 1e-4


def test_folds_and_names(tmp_path: Path) -> None:
    model = onnx.load(str(default_model_dir() / "ppocrv5_rec.onnx"))
    _, folded = fold_affine_into_conv(model)
    assert folded == 0  # Identity nodes hide the pattern until onnxruntime's basic level removes them
    model.graph.node[0].name = ""
    assert name_nodes(model) == 1
    assert all(node.name for node in model.graph.node)


def test_percentile_calibration_gets_tensors_of_one_shape() -> None:
    from quantize.onnx_int8 import MAX_TILES, same_shape

    pages = [np.ones((1, 3, 1280, 704), np.float32), np.ones((1, 3, 960, 640), np.float32)]
    tiles = same_shape("det", pages)
    assert {tile.shape for tile in tiles} == {(1, 3, 640, 640)}
    lines = [np.ones((8, 3, 48, 900), np.float32)] * 20
    assert len(same_shape("rec", lines)) == MAX_TILES


def test_stem_is_the_first_tenth_of_the_nodes() -> None:
    from quantize.onnx_int8 import stem

    model = onnx.load(str(default_model_dir() / "ppocrv5_cls.onnx"))
    names = stem(model)
    assert names == [node.name for node in model.graph.node][: len(model.graph.node) // 10]


def test_hard_swish_rewrites_are_exact_on_the_orientation_model(tmp_path: Path) -> None:
    prepared = prepare("cls", default_model_dir() / "ppocrv5_cls.onnx", tmp_path).path
    model = onnx.load(str(prepared))
    sigmoids = sum(node.op_type == "HardSigmoid" for node in model.graph.node)
    tensor = np.random.default_rng(1).standard_normal((2, 3, 80, 160)).astype(np.float32) * 3
    reference = cpu_session(prepared).run(None, {"x": tensor})[0]

    fused, count = fuse_hard_swish(model)
    assert count > 0 and sum(node.op_type == "HardSwish" for node in fused.graph.node) == count
    assert sum(node.op_type == "HardSigmoid" for node in fused.graph.node) == sigmoids - count
    onnx.save(fused, str(tmp_path / "fused.onnx"))
    clipped, rewritten = hard_swish_as_clip(fused)
    assert rewritten == count
    assert not any(node.op_type == "HardSwish" for node in clipped.graph.node)
    onnx.checker.check_model(clipped)
    onnx.save(clipped, str(tmp_path / "clipped.onnx"))

    for name in ("fused.onnx", "clipped.onnx"):
        output = cpu_session(tmp_path / name).run(None, {"x": tensor})[0]
        assert np.abs(output - reference).max() < 1e-5
