"""The train modules run in the training environment import without the appliance's own stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# What the appliance installs and the training environment (train/requirements.txt and torch) lacks.
APPLIANCE_ONLY = ("scipy", "onnxruntime", "grpc", "llama_cpp", "jsonschema")


# Those of train/README's `../venv-train/bin/python -m ...` commands that import without torch.
@pytest.mark.parametrize(
    "module", ["train.ensemble", "train.eval_lines", "train.grow", "train.probe_faces", "train.render"]
)
def test_imports_without_the_appliance_stack(module: str) -> None:
    blocked = f"import sys; sys.modules.update(dict.fromkeys({APPLIANCE_ONLY!r})); import {module}"
    run = subprocess.run(
        [sys.executable, "-c", blocked],
        check=False,
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
