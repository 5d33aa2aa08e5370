"""The cascade inside the daemon: per profile, its result in the JSON, its figures in the status API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.api import convert
from appliance.config import (
    AppConfig,
    CascadeConfig,
    HotFolderConfig,
    IntakeConfig,
    JobsConfig,
    PathsConfig,
    ProfileConfig,
    RepairConfig,
    VlmGgufConfig,
    load_config,
)
from appliance.control import Control
from appliance.errors import ConfigError
from tests.fakes import engines as fakes
from tests.polling import DaemonThread, png_bytes, wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"


def _config(root: Path, mode: str) -> AppConfig:
    folder = HotFolderConfig(
        path=root / "in",
        output_dir=root / "out",
        archive_dir=root / "archive",
        failed_dir=root / "failed",
        review_dir=root / "review",
        profile="forms",
    )
    return AppConfig(
        paths=PathsConfig(state_dir=root / "state"),
        hot_folders=(folder,),
        profiles={"forms": ProfileConfig(cascade=CascadeConfig(mode=mode, min_confidence=0.9))},  # type: ignore[arg-type]
        engine={"vlm_gguf": VlmGgufConfig(model_dir=FIXTURES / "qwen2vl")},  # type: ignore[arg-type]
        intake=IntakeConfig(settle_seconds=0.2, min_free_mb=0.0),
        jobs=JobsConfig(retry_backoff_seconds=0.0, workers=1),
        repair=RepairConfig(field_profile="none"),
    )


def _result(root: Path) -> dict[str, object]:
    results = list((root / "out").glob("*.json"))
    assert len(results) == 1
    return json.loads(results[0].read_text())  # type: ignore[no-any-return]


def test_an_unsure_page_is_read_again_by_the_vlm_and_counted_in_the_status(tmp_path: Path) -> None:
    config = _config(tmp_path, "below_threshold")
    with DaemonThread(config, fakes.unsure_engine_with_vlm) as running:
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / "form.png").write_bytes(png_bytes())
        control = Control(running.daemon)
        assert wait_for(lambda: control.status().vlm_decoding.get("pages", 0) >= 1)
        assert wait_for(lambda: bool(list((tmp_path / "out").glob("*.json"))))
        status = control.status()
    result = _result(tmp_path)
    page = result["pages"][0]  # type: ignore[index]
    assert page["engine_details"]["cascade"]["route"] == "vlm"
    lines = [line for block in page["blocks"] for line in block["lines"]]
    assert [(line["text"], line["engine"]) for line in lines] == [("INVOICE 42", "vlm_gguf")]
    assert status.vlm_decoding["pages"] == 1
    message = convert.status(status)
    assert message.HasField("vlm_decoding")
    assert message.vlm_decoding.pages == 1


def test_a_failing_vlm_leaves_the_onnx_read_and_counts_a_fallback(tmp_path: Path) -> None:
    config = _config(tmp_path, "always")
    with DaemonThread(config, fakes.unsure_engine_with_crashing_vlm) as running:
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / "form.png").write_bytes(png_bytes())
        control = Control(running.daemon)
        assert wait_for(lambda: control.status().vlm_decoding.get("fallbacks", 0) >= 1)
        status = control.status()
    outputs = list((tmp_path / "out").glob("*.json")) or list((tmp_path / "review").glob("*/*.json"))
    result = json.loads(outputs[0].read_text())
    page = result["pages"][0]
    assert page["engine_details"]["cascade"]["route"] == "onnx_fallback"
    lines = [line for block in page["blocks"] for line in block["lines"]]
    assert [line["text"] for line in lines] == ["INV0ICE 42"]
    assert status.vlm_decoding.get("fallbacks") == 1


def test_a_cascade_without_a_vlm_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("profiles:\n  default:\n    cascade:\n      mode: always\n")
    with pytest.raises(ConfigError, match=r"engine\.vlm_gguf is not set"):
        load_config(path)
