"""The committed appliance.v1 modules are what `make proto` generates from the .proto today."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GENERATED = ("appliance_pb2.py", "appliance_pb2.pyi", "appliance_pb2_grpc.py", "appliance_pb2_grpc.pyi")


def test_generated_modules_are_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    bin_dir = Path(sys.executable).parent
    if shutil.which("protoc-gen-mypy", path=str(bin_dir)) is None:
        pytest.skip("mypy-protobuf is not installed (pip install -e '.[dev]')")
    proto = "appliance/api/v1/appliance.proto"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            f"--mypy_grpc_out={tmp_path}",
            proto,
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    for name in GENERATED:
        fresh = (tmp_path / "appliance" / "api" / "v1" / name).read_text(encoding="utf-8")
        committed = (REPO / "appliance" / "api" / "v1" / name).read_text(encoding="utf-8")
        assert fresh == committed, f"appliance/api/v1/{name} is stale: run `make proto` and commit the result"
