"""CUDA provider preparation (driver check, pip CUDA libraries) and `models verify`'s proof, with fakes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from appliance import cli
from appliance.config import DEFAULT_CUBLAS_WORKSPACE, PpocrOnnxConfig
from appliance.engines.ppocr_onnx import cuda_driver, default_model_dir, sessions
from appliance.engines.ppocr_onnx.cuda_driver import (
    DriverVersion,
    driver_problem,
    parse_proc_version,
    parse_smi_version,
    read_driver_version,
)
from appliance.engines.ppocr_onnx.provider_check import check_cuda, smallest_model
from appliance.engines.ppocr_onnx.sessions import (
    CPU,
    CUBLAS_WORKSPACE_VARIABLE,
    CUDA,
    apply_cublas_workspace,
    create_session,
    probe_provider,
)
from appliance.errors import ExitCode, ProviderError

MODEL = default_model_dir() / "ppocrv5_cls.onnx"

OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 10:03:24 UTC 2025\nGCC version:  gcc version 12.2.0\n"
)
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 00:36:16 UTC 2025\n"


# --- the driver's version -------------------------------------------------------------------------


def test_proc_version_of_open_and_proprietary_modules() -> None:
    assert parse_proc_version(OPEN_MODULE) == DriverVersion(580, 159, 4)
    assert parse_proc_version(PROPRIETARY) == DriverVersion(570, 86, 15)
    assert str(parse_proc_version(OPEN_MODULE)) == "580.159.04"


def test_unreadable_version_texts_give_none() -> None:
    assert parse_proc_version("") is None
    assert parse_proc_version("GCC version: gcc 12.2.0\n") is None
    assert (
        parse_smi_version("NVIDIA-SMI has failed because it couldn't communicate with the driver\n") is None
    )


def test_smi_output_gives_the_first_gpus_version() -> None:
    assert parse_smi_version("580.95.05\n580.95.05\n") == DriverVersion(580, 95, 5)
    assert parse_smi_version("535.104\n") == DriverVersion(535, 104, None)


def test_the_kernel_modules_file_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROPRIETARY, encoding="utf-8")
    monkeypatch.setattr(cuda_driver, "_query_smi", lambda: "580.95.05\n")
    assert read_driver_version(proc) == DriverVersion(570, 86, 15)


def test_nvidia_smi_answers_where_the_file_is_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_driver, "_query_smi", lambda: "580.95.05\n")
    assert read_driver_version(tmp_path / "missing") == DriverVersion(580, 95, 5)
    monkeypatch.setattr(cuda_driver, "_query_smi", lambda: None)
    assert read_driver_version(tmp_path / "missing") is None


def test_a_driver_older_than_580_is_named_with_the_fix() -> None:
    problem = driver_problem(DriverVersion(570, 86, 15))
    assert problem is not None
    assert "570.86.15 is older than 580" in problem
    assert "provider: cpu" in problem
    assert driver_problem(DriverVersion(580, 65, 6)) is None
    assert driver_problem(DriverVersion(590, 1, None)) is None
    assert "no NVIDIA driver found" in (driver_problem(None) or "")


# --- fakes of onnxruntime-gpu on a box with no GPU ------------------------------------------------


@dataclass
class FakeInput:
    name: str
    shape: list[Any]
    type: str = "tensor(float)"


class FakeSession:
    """An InferenceSession that says it runs on `runs_on` and records what it was given."""

    created: list[dict[str, Any]] = []  # noqa: RUF012 - shared record of the test's sessions
    runs_on = CUDA
    fails_at_run = False

    def __init__(self, model: object, sess_options: object = None, providers: object = None) -> None:
        FakeSession.created.append({"model": model, "providers": providers, "options": sess_options})

    def get_providers(self) -> list[str]:
        return [self.runs_on, CPU] if self.runs_on == CUDA else [CPU]

    def get_inputs(self) -> list[FakeInput]:
        return [FakeInput("x", ["batch", 3, 80, "width"])]

    def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.fails_at_run:
            raise RuntimeError("CUDA failure 999: unknown error")
        assert feeds["x"].shape == (1, 3, 80, 32)
        return [np.zeros((1, 2), dtype=np.float32)]


@pytest.fixture
def gpu_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """onnxruntime-gpu with a CUDA provider and a 580 driver; yields the order of preload and sessions."""
    events: list[str] = []
    FakeSession.created = []
    FakeSession.runs_on = CUDA
    FakeSession.fails_at_run = False

    class RecordingSession(FakeSession):
        def __init__(self, model: object, sess_options: object = None, providers: object = None) -> None:
            events.append("session")
            super().__init__(model, sess_options, providers)

    def preload_dlls() -> None:
        events.append("preload")
        print("Failed to load libcudnn.so.9: not found")  # what onnxruntime prints for a missing library

    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(ort, "preload_dlls", preload_dlls, raising=False)
    monkeypatch.setattr(ort, "InferenceSession", RecordingSession)
    monkeypatch.setattr(sessions, "read_driver_version", lambda: DriverVersion(580, 159, 4))
    monkeypatch.setattr(cuda_driver, "_query_smi", lambda: "580.159.04\n")
    monkeypatch.setattr(cuda_driver, "PROC_VERSION", Path("/nonexistent/nvidia/version"))
    # A CUDA session sets cuBLAS's workspace variable in this process: restored after the test.
    monkeypatch.setenv(CUBLAS_WORKSPACE_VARIABLE, "unset")
    monkeypatch.delenv(CUBLAS_WORKSPACE_VARIABLE)
    sessions.prepare_cuda.cache_clear()
    yield events
    sessions.prepare_cuda.cache_clear()


def test_pip_cuda_libraries_are_preloaded_before_the_first_cuda_session(
    gpu_build: list[str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _, info = create_session(MODEL, "cuda", 1, 1)
    create_session(MODEL, "cuda", 1, 1)
    assert gpu_build == ["preload", "session", "session"]  # once per process, before any session
    assert info.provider == CUDA
    assert info.fallback_reason is None
    # preload_dlls' print() goes to the log: stdout may be `models verify`'s JSON.
    assert capsys.readouterr().out == ""
    assert "libcudnn.so.9" in caplog.text


def test_cuda_sessions_get_the_arena_cap(gpu_build: list[str]) -> None:
    create_session(MODEL, "auto", 1, 1, gpu_mem_limit_mb=512)
    providers = FakeSession.created[-1]["providers"]
    name, options = providers[0]
    assert name == CUDA
    assert options["gpu_mem_limit"] == str(512 * 1024 * 1024)
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    assert providers[1] == CPU


@pytest.fixture
def arena_registrations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The calls onnxruntime's create_and_register_allocator_v2 receives, in a process with none yet."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(sessions, "_shared_arena", {})
    monkeypatch.setattr(ort, "create_and_register_allocator_v2", lambda *args: calls.append(args))
    return calls


def _uses_env_allocators(options: ort.SessionOptions) -> bool:
    try:
        return options.get_session_config_entry("session.use_env_allocators") == "1"
    except RuntimeError:  # onnxruntime raises for a key that was never set
        return False


def test_cuda_sessions_share_one_arena_registered_once(
    gpu_build: list[str], arena_registrations: list[tuple[Any, ...]]
) -> None:
    _, first = create_session(MODEL, "cuda", 1, 1, gpu_mem_limit_mb=512, shared_arena=True)
    _, second = create_session(MODEL, "cuda", 1, 1, gpu_mem_limit_mb=512, shared_arena=True)
    assert len(arena_registrations) == 1  # one arena for the process, not one per session
    provider, memory, _, arena = arena_registrations[0]
    assert provider == CUDA
    assert (memory.name, memory.device_id, memory.allocator_type) == (
        "Cuda",
        0,
        ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
    )
    assert arena.max_mem == 512 * 1024 * 1024
    assert arena.arena_extend_strategy == 1  # kSameAsRequested
    assert all(_uses_env_allocators(created["options"]) for created in FakeSession.created[-2:])
    assert first.shared_arena and second.shared_arena


def test_a_session_keeps_its_own_arena_unless_asked_or_when_registration_fails(
    gpu_build: list[str], arena_registrations: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, info = create_session(MODEL, "cuda", 1, 1)
    assert not arena_registrations and not info.shared_arena
    assert not _uses_env_allocators(FakeSession.created[-1]["options"])

    def refuse(*_args: Any) -> None:
        raise RuntimeError("allocator already registered")

    monkeypatch.setattr(ort, "create_and_register_allocator_v2", refuse)
    _, info = create_session(MODEL, "cuda", 1, 1, shared_arena=True)
    assert not info.shared_arena  # each session then has its own arena, as before, and says so
    assert not _uses_env_allocators(FakeSession.created[-1]["options"])


def test_a_cpu_session_never_registers_the_cuda_arena(arena_registrations: list[tuple[Any, ...]]) -> None:
    _, info = create_session(MODEL, "cpu", 1, 1, shared_arena=True)
    assert not arena_registrations and not info.shared_arena


def test_a_cuda_session_sets_cublas_workspace_unless_the_environment_already_does(
    gpu_build: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_at_preload: list[str | None] = []
    monkeypatch.setattr(
        ort, "preload_dlls", lambda: seen_at_preload.append(os.environ.get(CUBLAS_WORKSPACE_VARIABLE))
    )
    create_session(MODEL, "cuda", 1, 1, cublas_workspace=":4096:8")
    assert os.environ[CUBLAS_WORKSPACE_VARIABLE] == ":4096:8"
    assert seen_at_preload == [":4096:8"]  # set before the CUDA libraries, cuBLAS among them, load
    monkeypatch.setenv(CUBLAS_WORKSPACE_VARIABLE, ":16:8")  # the site's own setting wins
    create_session(MODEL, "cuda", 1, 1, cublas_workspace=":4096:8")
    assert os.environ[CUBLAS_WORKSPACE_VARIABLE] == ":16:8"


def test_cpu_sessions_and_a_null_setting_leave_cublas_as_it_is(gpu_build: list[str]) -> None:
    create_session(MODEL, "cpu", 1, 1, cublas_workspace=":4096:8")
    create_session(MODEL, "cuda", 1, 1, cublas_workspace=None)
    assert CUBLAS_WORKSPACE_VARIABLE not in os.environ


def test_the_cublas_setting_in_effect_is_reported() -> None:
    assert PpocrOnnxConfig().cublas_workspace_config == DEFAULT_CUBLAS_WORKSPACE  # one default
    environ: dict[str, str] = {}
    assert apply_cublas_workspace(None, environ) is None and not environ
    assert apply_cublas_workspace(":4096:8", environ) == ":4096:8"
    assert apply_cublas_workspace(":16:8", environ) == ":4096:8"  # set once; never overwritten


def test_an_old_driver_stops_a_cuda_request_with_its_reason(
    gpu_build: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "read_driver_version", lambda: DriverVersion(550, 54, 14))
    with pytest.raises(ProviderError, match=r"550\.54\.14 is older than 580"):
        create_session(MODEL, "cuda", 1, 1)
    assert gpu_build == []  # neither the libraries nor a CUDA session were tried


def test_an_old_driver_sends_auto_to_the_cpu_with_its_reason(
    gpu_build: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "read_driver_version", lambda: DriverVersion(550, 54, 14))
    _, info = create_session(MODEL, "auto", 1, 1)
    assert FakeSession.created[-1]["providers"] == [CPU]
    assert info.fallback_reason is not None
    assert "older than 580" in info.fallback_reason


# --- models verify's proof ------------------------------------------------------------------------


def test_probe_runs_one_inference_and_reports_the_provider(gpu_build: list[str]) -> None:
    probe = probe_provider(MODEL, "cuda")
    assert probe.provider == CUDA
    assert probe.inference_ms is not None
    assert probe.error is None


def test_check_reports_the_gpu_that_ran_the_inference(gpu_build: list[str]) -> None:
    report = check_cuda("auto", MODEL)
    assert report["ok"] is True
    assert report["checked"] is True
    assert report["provider"] == CUDA
    assert report["driver"] == "580.159.04"
    assert report["model"] == MODEL.name


def test_check_fails_when_the_session_falls_back_to_the_cpu(gpu_build: list[str]) -> None:
    FakeSession.runs_on = CPU
    report = check_cuda("auto", MODEL)
    assert report["ok"] is False
    assert report["provider"] is None
    assert "could not start" in report["reason"]


def test_check_fails_when_the_first_inference_fails(gpu_build: list[str]) -> None:
    FakeSession.fails_at_run = True
    report = check_cuda("cuda", MODEL)
    assert report["ok"] is False
    assert "inference failed: CUDA failure 999" in report["reason"]


def test_check_without_onnxruntime_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CPU])
    assert check_cuda("auto", MODEL)["ok"] is True  # auto on a CPU build: nothing was promised
    report = check_cuda("cuda", MODEL)
    assert report["ok"] is False
    assert "no CUDA provider" in report["reason"]
    assert check_cuda("cpu", MODEL) == {
        "requested": "cpu",
        "checked": False,
        "ok": True,
        "reason": "provider: cpu",
    }


def test_smallest_model_skips_the_dictionary(tmp_path: Path) -> None:
    big, small, keys = tmp_path / "det.onnx", tmp_path / "cls.onnx", tmp_path / "keys.txt"
    big.write_bytes(b"x" * 100)
    small.write_bytes(b"x" * 10)
    keys.write_bytes(b"x")
    assert smallest_model({"det": big, "cls": small, "keys": keys}) == small


class FakeEngine:
    """An engine built without models: what `models verify` describes and probes."""

    name = "ppocr_onnx"
    model_paths = {"cls": MODEL}  # noqa: RUF012

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "models": []}

    def close(self) -> None:
        pass


def test_models_verify_fails_and_says_why_when_cuda_does_not_run(
    gpu_build: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("appliance.engines.factory.build_engine", lambda _config: FakeEngine())
    FakeSession.runs_on = CPU
    code = cli.main(["models", "verify"])
    out, err = capsys.readouterr()
    assert code == ExitCode.MODEL_INVALID
    report = json.loads(out)["cuda_check"]
    assert report["ok"] is False
    assert "the CUDA provider does not run here" in err


def test_models_verify_reports_the_provider_that_ran(
    gpu_build: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("appliance.engines.factory.build_engine", lambda _config: FakeEngine())
    code = cli.main(["models", "verify"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.OK
    report = json.loads(out)["cuda_check"]
    assert report["provider"] == CUDA
    assert report["driver"] == "580.159.04"
