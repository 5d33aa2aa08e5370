"""With a CUDA build of llama.cpp installed, libstdc++ is made global before llama.cpp loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Imports numpy first (it loads libstdc++ privately), then the appliance as every entry point does,
# and says whether a libstdc++ symbol is now in the global scope (dlopen(NULL) sees only that).
PROBE = """
import ctypes, numpy, appliance.cli
print(hasattr(ctypes.CDLL(None), "_ZNSt6locale7classicEv"), "llama_cpp" in __import__("sys").modules)
"""


def _fake_llama_cpp(root: Path, cuda: bool) -> None:
    package = root / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('only looked at, never imported')\n")
    (package / "lib" / "libggml-base.so").write_bytes(b"")
    if cuda:
        (package / "lib" / "libggml-cuda.so").write_bytes(b"")


def _start_appliance(root: Path, **env: str) -> tuple[bool, bool]:
    """A fresh interpreter: (libstdc++ global, llama_cpp imported)."""
    environment = {key: value for key, value in os.environ.items() if key != "LLAMA_CPP_LIB_PATH"}
    environment["PYTHONPATH"] = os.pathsep.join([str(root), str(Path(__file__).parent.parent)])
    environment.update(env)
    command = [sys.executable, "-c", PROBE]
    done = subprocess.run(command, env=environment, check=True, timeout=120, capture_output=True, text=True)
    made_global, imported = done.stdout.split()
    return made_global == "True", imported == "True"


def test_a_cuda_build_gets_the_cxx_runtime_made_global_even_after_numpy(tmp_path: Path) -> None:
    _fake_llama_cpp(tmp_path, cuda=True)
    assert _start_appliance(tmp_path) == (True, False)  # and llama.cpp itself is not loaded for it


def test_a_cpu_build_is_left_alone(tmp_path: Path) -> None:
    _fake_llama_cpp(tmp_path, cuda=False)
    assert _start_appliance(tmp_path) == (False, False)


def test_it_can_be_switched_off(tmp_path: Path) -> None:
    _fake_llama_cpp(tmp_path, cuda=True)
    assert _start_appliance(tmp_path, OCR_APPLIANCE_NO_LLAMA_PRELOAD="1") == (False, False)


def test_the_library_folder_llama_cpp_is_told_to_use_counts(tmp_path: Path) -> None:
    _fake_llama_cpp(tmp_path, cuda=False)
    libraries = tmp_path / "elsewhere"
    libraries.mkdir()
    (libraries / "libggml-cuda.so.0").write_bytes(b"")
    assert _start_appliance(tmp_path, LLAMA_CPP_LIB_PATH=str(libraries)) == (True, False)
