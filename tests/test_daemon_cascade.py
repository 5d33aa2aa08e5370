"""The cascade inside the daemon: per profile, its result in the JSON, its figures in the status API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
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
from appliance.engines.base import PageText
from appliance.errors import ConfigError
from tests.fakes import engines as fakes
from tests.polling import DaemonThread, png_bytes, wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"
GIB = 2**30


class GpuVlmReader(fakes.FakeVlmReader):
    """A VLM stand-in on a GPU: each page reports the card's memory in use after it, as vlm_gguf does."""

    def __init__(self, readings: list[int]) -> None:
        super().__init__(["INVOICE 42"])
        self.readings = readings

    def describe(self) -> dict[str, Any]:
        before, after = self.readings[0] - GIB, self.readings[0]
        memory = {"before_load_bytes": before, "after_load_bytes": after, "peak_bytes": after}
        return {**super().describe(), "gpu_memory": {**memory, "budget_bytes": 4 * GIB}}

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        page = super().read(image, hint, deadline)
        used = self.readings[min(len(self.hints), len(self.readings)) - 1]
        page.details[self.name]["gpu_memory_used_bytes"] = used
        return page


def unsure_engine_with_gpu_vlm() -> Any:
    """The ONNX stand-in of the cascade tests with a VLM whose pages say 7 GiB, then 6 GiB in use."""
    from appliance.engines.factory import EnginePair

    return EnginePair(fakes.FixedTextEngine("INV0ICE 42", confidence=0.5), GpuVlmReader([7 * GIB, 6 * GIB]))


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


def _drop(root: Path, name: str = "form.png", size: tuple[int, int] | None = None) -> None:
    """A rendered page put in the hot folder (sizes differ so that files are not duplicates)."""
    (root / "in").mkdir(exist_ok=True)
    (root / "in" / name).write_bytes(png_bytes() if size is None else png_bytes(size=size))


def _read_results(root: Path, pattern: str = "*.png.json") -> list[Path]:
    """The JSON results written, whether to the output folder or to a review folder."""
    return sorted([*(root / "out").glob(pattern), *(root / "review").glob(f"*/{pattern}")])


def _result(root: Path) -> dict[str, object]:
    results = list((root / "out").glob("*.json"))
    assert len(results) == 1
    return json.loads(results[0].read_text())  # type: ignore[no-any-return]


def test_an_unsure_page_is_read_again_by_the_vlm_and_counted_in_the_status(tmp_path: Path) -> None:
    config = _config(tmp_path, "below_threshold")
    with DaemonThread(config, fakes.unsure_engine_with_vlm) as running:
        _drop(tmp_path)
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
    # A VLM on the CPU reports no GPU memory, so neither does the status.
    assert status.gpu_memory_used_bytes is None and status.gpu_memory_budget_bytes is None
    assert not message.HasField("gpu_memory_used_bytes")


def test_the_status_reports_the_highest_gpu_memory_the_pages_saw_and_the_vlm_budget(tmp_path: Path) -> None:
    config = _config(tmp_path, "always")
    with DaemonThread(config, unsure_engine_with_gpu_vlm) as running:
        control = Control(running.daemon)
        status = control.status()
        assert status.gpu_memory_used_bytes is None  # no page read yet
        assert status.gpu_memory_budget_bytes == 8192 * 2**20  # the configured budget, all workers'
        _drop(tmp_path, "first.png")
        _drop(tmp_path, "second.png", size=(330, 200))
        assert wait_for(lambda: control.status().vlm_decoding.get("pages", 0) >= 2)
        status = control.status()
    assert status.gpu_memory_used_bytes == 7 * GIB  # the first page's, not the last one's
    pages = [json.loads(path.read_text())["pages"][0] for path in (tmp_path / "out").glob("*.json")]
    assert sorted(page["engine_details"]["vlm_gguf"]["gpu_memory_used_bytes"] for page in pages) == [
        6 * GIB,
        7 * GIB,
    ]
    message = convert.status(status)
    assert message.gpu_memory_used_bytes == 7 * GIB
    assert message.gpu_memory_budget_bytes == 8192 * 2**20


def test_a_failing_vlm_leaves_the_onnx_read_and_counts_a_fallback(tmp_path: Path) -> None:
    config = _config(tmp_path, "always")
    with DaemonThread(config, fakes.unsure_engine_with_crashing_vlm) as running:
        _drop(tmp_path)
        control = Control(running.daemon)
        assert wait_for(lambda: control.status().vlm_decoding.get("fallbacks", 0) >= 1)
        status = control.status()
    outputs = _read_results(tmp_path)
    result = json.loads(outputs[0].read_text())
    page = result["pages"][0]
    assert page["engine_details"]["cascade"]["route"] == "onnx_fallback"
    lines = [line for block in page["blocks"] for line in block["lines"]]
    assert [line["text"] for line in lines] == ["INV0ICE 42"]
    assert status.vlm_decoding.get("fallbacks") == 1


def test_a_cascade_without_a_vlm_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("profiles:\n  default:\n    cascade:\n      mode: always\n")
    with pytest.raises(ConfigError, match=r"no second reader is set \(engine\.vlm_gguf or"):
        load_config(path)


def test_a_vlm_that_kills_its_worker_costs_the_second_reading_not_the_document(tmp_path: Path) -> None:
    config = _config(tmp_path, "always")
    with DaemonThread(config, fakes.unsure_engine_with_aborting_vlm) as running:
        _drop(tmp_path)
        control = Control(running.daemon)
        assert wait_for(lambda: control.status().vlm_decoding.get("fallbacks", 0) >= 1, timeout=60)
        status = control.status()
        restarts = running.daemon.stats.worker_restarts
    outputs = _read_results(tmp_path)
    assert len(outputs) == 1 and not list((tmp_path / "failed").glob("*.json"))
    page = json.loads(outputs[0].read_text())["pages"][0]
    cascade = page["engine_details"]["cascade"]
    assert cascade["route"] == "onnx_fallback"
    assert cascade["error"] == "VLM skipped: the previous attempt lost its worker: worker killed by SIGABRT"
    assert any("VLM skipped" in warning for warning in page["warnings"])
    lines = [line for block in page["blocks"] for line in block["lines"]]
    assert [line["text"] for line in lines] == ["INV0ICE 42"]
    assert restarts == 1  # one attempt lost with the VLM, the next one read without it
    assert status.vlm_decoding.get("fallbacks") == 1
    assert status.vlm_disabled is None and not convert.status(status).HasField("vlm_disabled")


def test_after_three_documents_in_a_row_lose_their_worker_the_vlm_is_left_out(tmp_path: Path) -> None:
    config = _config(tmp_path, "always")
    with DaemonThread(config, fakes.unsure_engine_with_aborting_vlm) as running:
        control = Control(running.daemon)

        def fallbacks() -> float:
            return control.status().vlm_decoding.get("fallbacks", 0)

        for index in range(4):  # one after the other, each a different file
            _drop(tmp_path, f"form{index}.png", size=(330 + 10 * index, 200))
            assert wait_for(lambda done=index + 1: fallbacks() >= done, timeout=60)
        restarts = running.daemon.stats.worker_restarts
        status = control.status()
    assert status.vlm_disabled is not None and status.vlm_disabled.startswith("VLM disabled until restart")
    assert convert.status(status).vlm_disabled == status.vlm_disabled
    assert restarts == 3  # the fourth document never reached the VLM
    results = _read_results(tmp_path)
    assert len(results) == 4
    last = json.loads(next(path for path in results if path.name == "form3.png.json").read_text())
    assert last["pages"][0]["engine_details"]["cascade"]["error"].startswith(
        "VLM skipped: VLM disabled until restart: 3 documents in a row lost their worker"
    )


def test_only_a_cascade_that_reads_with_the_vlm_counts_as_calling_it() -> None:
    from appliance.config import parse_config
    from appliance.daemon import _calls_vlm

    lines = {"mode": "below_threshold", "unit": "lines"}
    onnx_only = parse_config({"engine": {"onnx_reader": {}}, "profiles": {"default": {"cascade": lines}}})
    assert not _calls_vlm(onnx_only, onnx_only.profile("default"))  # no VLM breaker for ONNX re-reads
    both = parse_config(
        {
            "engine": {"onnx_reader": {}, "vlm_gguf": {"model_dir": "/nonexistent"}},
            "profiles": {
                "default": {"cascade": {**lines, "reader": "onnx_reader"}},
                "vlm": {"cascade": {**lines, "reader": "vlm_gguf"}},
                "plain": {},
            },
        }
    )
    assert not _calls_vlm(both, both.profile("default"))
    assert _calls_vlm(both, both.profile("vlm"))
    assert not _calls_vlm(both, both.profile("plain"))
