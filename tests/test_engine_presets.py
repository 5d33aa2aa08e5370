"""Reader presets: a named bundle of engine keys, under the keys a site sets itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import PpocrOnnxConfig, load_config
from appliance.engines.ppocr_onnx import PpocrOnnxEngine, presets
from appliance.engines.ppocr_onnx.presets import PRESETS, apply_preset, preset_name


def test_a_named_preset_fills_the_keys_left_unset() -> None:
    config, name = apply_preset(PpocrOnnxConfig(preset="fast"))
    assert name == "fast"
    assert config.det_limit_side_len == PRESETS["fast"]["det_limit_side_len"]
    accurate, _ = apply_preset(PpocrOnnxConfig(preset="accurate"))
    assert accurate.det_limit_side_len > config.det_limit_side_len
    assert accurate.rec_min_width > config.rec_min_width


def test_keys_the_site_sets_win_over_the_preset(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "version: 1\n"
        "engine: {ppocr_onnx: {preset: accurate, det_limit_side_len: 736, second_reader: null}}\n",
        encoding="utf-8",
    )
    config, name = apply_preset(load_config(path).engine.ppocr_onnx)
    assert name == "accurate"
    assert config.det_limit_side_len == 736
    assert "second_reader" not in config.model_fields_set, "the old key's explicit null is dropped"
    assert config.models == "ppocrv6_small"


def test_custom_applies_nothing() -> None:
    config = PpocrOnnxConfig(preset="custom", det_limit_side_len=1280)
    assert apply_preset(config) == (config, "custom")


@pytest.mark.parametrize(
    ("provider", "cuda", "cores", "expected"),
    [
        ("auto", True, 1, "accurate"),
        ("cuda", False, 1, "accurate"),
        ("cpu", True, 1, "fast"),
        ("auto", False, 1, "fast"),
        ("auto", False, 2, "accurate"),
        ("cpu", False, 16, "accurate"),
    ],
)
def test_auto_is_accurate_with_a_gpu_or_two_cores_and_fast_on_one(
    monkeypatch: pytest.MonkeyPatch, provider: str, cuda: bool, cores: int, expected: str
) -> None:
    monkeypatch.setattr(presets, "cuda_usable", lambda: cuda)
    monkeypatch.setattr(presets.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert preset_name(PpocrOnnxConfig(provider=provider)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("example", ["config.example.yaml", "systemd/config.yaml"])
def test_the_shipped_configs_leave_the_preset_its_keys(example: str) -> None:
    """A key written out in a shipped config would pin it and silently switch the preset off."""
    config = load_config(Path(__file__).resolve().parent.parent / example).engine.ppocr_onnx
    assert not config.model_fields_set & {key for preset in PRESETS.values() for key in preset}
    fast, _ = apply_preset(config.model_copy(update={"preset": "fast"}))
    assert fast.det_limit_side_len == PRESETS["fast"]["det_limit_side_len"]


def test_a_benchmark_variant_keeps_the_preset_in_charge_of_its_keys() -> None:
    from appliance.config import EngineConfig
    from appliance.variants import variant_engine_config

    fast, name = apply_preset(variant_engine_config(EngineConfig(), "det=int8+preset=fast").ppocr_onnx)
    assert name == "fast"
    assert fast.det_limit_side_len == PRESETS["fast"]["det_limit_side_len"]
    assert fast.precision.det == "int8"
    pinned, _ = apply_preset(
        variant_engine_config(EngineConfig(), "fp32+preset=fast+det_limit=1280").ppocr_onnx
    )
    assert pinned.det_limit_side_len == 1280


def test_the_int8_detector_is_taken_on_the_cpu_with_its_own_set_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presets, "cuda_usable", lambda: False)
    cpu, _ = apply_preset(PpocrOnnxConfig(preset="accurate"))
    assert (cpu.precision.det, cpu.precision.rec) == ("int8", "fp32")
    other_set, _ = apply_preset(PpocrOnnxConfig(preset="accurate", models="ppocrv5_mobile"))
    assert other_set.precision.det == "fp32", "no INT8 set of PP-OCRv5 ships with the appliance"
    monkeypatch.setattr(presets, "cuda_usable", lambda: True)
    gpu, _ = apply_preset(PpocrOnnxConfig(preset="accurate"))
    assert gpu.precision.det == "fp32", "static INT8 graphs are CPU kernels"


def test_the_shipped_int8_detector_loads_hash_checked_from_the_package(engine: PpocrOnnxEngine) -> None:
    models = {model["role"]: model for model in engine.describe()["models"]}
    assert models["det"]["precision"] == "int8"
    assert models["det"]["file"] == "ppocrv6_small_det_int8.onnx"
    assert models["rec"]["precision"] == "fp32"
