"""When the daemon runs a session server: jobs.session_server, the number of workers, the provider."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from appliance.config import AppConfig, parse_config
from appliance.engines import shared_sessions
from appliance.engines.ppocr_onnx.cuda_driver import DriverVersion


def _config(switch: str, workers: int = 2, provider: str = "auto", **engine: Any) -> AppConfig:
    return parse_config(
        {
            "jobs": {"session_server": switch, "workers": workers},
            "engine": {"ppocr_onnx": {"provider": provider, **engine}},
        }
    )


@pytest.fixture
def gpu_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime-gpu installed and a driver that runs it."""
    monkeypatch.setattr(shared_sessions, "gpu_runtime_installed", lambda: True)
    monkeypatch.setattr(shared_sessions, "driver_usable", lambda: True)


@pytest.fixture
def cpu_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU build of onnxruntime, no NVIDIA driver."""
    monkeypatch.setattr(shared_sessions, "gpu_runtime_installed", lambda: False)
    monkeypatch.setattr(shared_sessions, "driver_usable", lambda: False)


@pytest.mark.parametrize("provider", ["auto", "cuda", "cpu"])
def test_off_never_runs_one(gpu_box: None, provider: str) -> None:
    assert not shared_sessions.wants_session_server(_config("off", workers=4, provider=provider))


@pytest.mark.parametrize(("workers", "provider"), [(1, "cpu"), (2, "cpu"), (1, "auto"), (3, "cuda")])
def test_on_always_runs_one_for_the_onnx_engine(cpu_box: None, workers: int, provider: str) -> None:
    assert shared_sessions.wants_session_server(_config("on", workers=workers, provider=provider))


def test_on_runs_one_for_the_onnx_engine_paired_with_a_second_reader(cpu_box: None) -> None:
    config = _config("on").model_copy(update={"engine": parse_config({"engine": {"onnx_reader": {}}}).engine})
    assert config.engine.second_readers() == ("onnx_reader",)
    assert shared_sessions.wants_session_server(config)


def test_no_engine_but_the_onnx_engine_is_served(cpu_box: None) -> None:
    config = _config("on")
    other = config.model_copy(update={"engine": config.engine.model_copy(update={"name": "another"})})
    assert not shared_sessions.wants_session_server(other)


def test_a_socket_set_by_hand_is_the_sites_own_server(gpu_box: None) -> None:
    for switch in ("on", "auto"):
        assert not shared_sessions.wants_session_server(_config(switch, session_server="/run/s.sock"))


def test_auto_runs_one_for_several_workers_on_cuda(gpu_box: None) -> None:
    assert shared_sessions.wants_session_server(_config("auto", workers=2, provider="auto"))
    assert shared_sessions.wants_session_server(_config("auto", workers=2, provider="cuda"))


def test_auto_runs_none_for_one_worker(gpu_box: None) -> None:
    assert not shared_sessions.wants_session_server(_config("auto", workers=1, provider="cuda"))


def test_auto_runs_none_on_the_cpu(gpu_box: None) -> None:
    assert not shared_sessions.wants_session_server(_config("auto", workers=2, provider="cpu"))


def test_auto_runs_none_without_the_cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_sessions, "gpu_runtime_installed", lambda: False)
    monkeypatch.setattr(shared_sessions, "driver_usable", lambda: True)
    assert not shared_sessions.wants_session_server(_config("auto", workers=2))


def test_auto_runs_none_where_the_driver_cannot_run_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_sessions, "gpu_runtime_installed", lambda: True)
    monkeypatch.setattr(shared_sessions, "driver_usable", lambda: False)
    assert not shared_sessions.wants_session_server(_config("auto", workers=2))


def test_provider_cuda_needs_no_look_at_the_box(monkeypatch: pytest.MonkeyPatch) -> None:
    def asked() -> bool:
        raise AssertionError("provider cuda: the box need not be looked at")

    monkeypatch.setattr(shared_sessions, "gpu_runtime_installed", asked)
    monkeypatch.setattr(shared_sessions, "driver_usable", asked)
    assert shared_sessions.wants_session_server(_config("auto", workers=2, provider="cuda"))


def test_the_cuda_build_is_found_among_the_installed_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"onnxruntime": "1.31.1"}

    def version(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert not shared_sessions.gpu_runtime_installed()
    installed["onnxruntime-gpu"] = "1.31.1"
    assert shared_sessions.gpu_runtime_installed()


@pytest.mark.parametrize(
    ("version", "usable"),
    [(DriverVersion(580, 95, 5), True), (DriverVersion(570, 86, 15), False), (None, False)],
)
def test_the_driver_must_run_cuda_13(
    monkeypatch: pytest.MonkeyPatch, version: DriverVersion | None, usable: bool
) -> None:
    monkeypatch.setattr(shared_sessions, "read_driver_version", lambda: version)
    assert shared_sessions.driver_usable() is usable


def _with_vlm(switch: str, serve_vlm: str, device: str = "auto", workers: int = 2) -> AppConfig:
    return parse_config(
        {
            "jobs": {"session_server": switch, "workers": workers, "serve_vlm": serve_vlm},
            "engine": {"vlm_gguf": {"device": device}},
        }
    )


@pytest.mark.parametrize(("device", "served"), [("auto", True), ("gpu", True), ("cpu", False)])
def test_auto_serves_the_vlm_where_it_may_use_a_gpu(gpu_box: None, device: str, served: bool) -> None:
    config = _with_vlm("auto", "auto", device)
    assert shared_sessions.wants_session_server(config)
    assert shared_sessions.serves_vlm(config) is served


def test_the_vlm_is_served_only_where_the_session_server_runs(gpu_box: None) -> None:
    assert shared_sessions.serves_vlm(_with_vlm("on", "on", "cpu"))
    assert not shared_sessions.serves_vlm(_with_vlm("on", "off", "gpu"))
    assert not shared_sessions.serves_vlm(_with_vlm("off", "on", "gpu"))
    assert not shared_sessions.serves_vlm(_with_vlm("auto", "on", "gpu", workers=1))  # no server
    assert not shared_sessions.serves_vlm(_config("on"))  # no VLM


def test_served_by_points_the_vlm_at_the_server_only_where_it_serves_it(
    gpu_box: None, tmp_path: Path
) -> None:
    socket = tmp_path / "sessions.sock"
    served = shared_sessions.served_by(_with_vlm("on", "on"), socket)
    assert served.engine.ppocr_onnx.session_server == socket
    assert served.engine.vlm_gguf is not None and served.engine.vlm_gguf.session_server == socket
    kept = shared_sessions.served_by(_with_vlm("on", "off"), socket)
    assert kept.engine.ppocr_onnx.session_server == socket
    assert kept.engine.vlm_gguf is not None and kept.engine.vlm_gguf.session_server is None
