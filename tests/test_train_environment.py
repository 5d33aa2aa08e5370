"""The train modules run in the training environment import without the appliance's own stack."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
# What the appliance installs and the training environment (train/requirements.txt and torch) lacks.
APPLIANCE_ONLY = ("scipy", "onnxruntime", "grpc", "llama_cpp", "jsonschema")
# Modules that import torch at once: this environment has none, so their imports are not tried here.
NEEDS_TORCH = {"train.train_vlm", "train.step"}


def _run_in_training_environment() -> list[str]:
    """The modules train/README runs as `../venv-train/bin/python -m MODULE`."""
    text = (ROOT / "train" / "README.md").read_text(encoding="utf-8")
    return sorted(set(re.findall(r"venv-train/bin/python\s+-m\s+(train\.\w+)", text)))


def test_the_readme_names_modules_run_in_the_training_environment() -> None:
    assert {"train.ensemble", "train.eval_lines", "train.train_vlm"} <= set(_run_in_training_environment())


@pytest.mark.parametrize("module", [m for m in _run_in_training_environment() if m not in NEEDS_TORCH])
def test_imports_without_the_appliance_stack(module: str) -> None:
    blocked = f"import sys; sys.modules.update(dict.fromkeys({APPLIANCE_ONLY!r})); import {module}"
    run = subprocess.run(
        [sys.executable, "-c", blocked], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
