"""A CUDA build of llama.cpp is imported before numpy in every appliance process; a CPU build is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A stand-in llama_cpp that writes down, when imported, whether numpy was already there.
FAKE_INIT = """
import sys
from pathlib import Path
Path(__file__).with_name("imported").write_text(str("numpy" in sys.modules))
"""


def _fake_llama_cpp(root: Path, cuda: bool) -> Path:
    package = root / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_INIT, encoding="utf-8")
    (package / "lib" / "libggml-base.so").write_bytes(b"")
    if cuda:
        (package / "lib" / "libggml-cuda.so").write_bytes(b"")
    return package / "imported"


def _start_appliance(root: Path, **env: str) -> None:
    """A fresh interpreter that imports the appliance, then numpy, as every entry point does."""
    environment = {key: value for key, value in os.environ.items() if key != "LLAMA_CPP_LIB_PATH"}
    environment["PYTHONPATH"] = os.pathsep.join([str(root), str(Path(__file__).parent.parent)])
    environment.update(env)
    subprocess.run(
        [sys.executable, "-c", "import appliance.cli, numpy"], env=environment, check=True, timeout=120
    )


def test_a_cuda_build_is_imported_before_numpy(tmp_path: Path) -> None:
    record = _fake_llama_cpp(tmp_path, cuda=True)
    _start_appliance(tmp_path)
    assert record.read_text() == "False"  # imported, and numpy was not loaded yet


def test_a_cpu_build_is_left_to_load_when_it_is_used(tmp_path: Path) -> None:
    record = _fake_llama_cpp(tmp_path, cuda=False)
    _start_appliance(tmp_path)
    assert not record.exists()


def test_the_preload_can_be_switched_off(tmp_path: Path) -> None:
    record = _fake_llama_cpp(tmp_path, cuda=True)
    _start_appliance(tmp_path, OCR_APPLIANCE_NO_LLAMA_PRELOAD="1")
    assert not record.exists()


def test_the_library_folder_llama_cpp_is_told_to_use_counts(tmp_path: Path) -> None:
    record = _fake_llama_cpp(tmp_path, cuda=False)
    libraries = tmp_path / "elsewhere"
    libraries.mkdir()
    (libraries / "libggml-cuda.so.0").write_bytes(b"")
    _start_appliance(tmp_path, LLAMA_CPP_LIB_PATH=str(libraries))
    assert record.read_text() == "False"
