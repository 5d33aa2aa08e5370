"""On a CUDA build of llama.cpp, loads its libraries before anything imports numpy.

On the GPU test machine (an H200, CUDA 13, llama-cpp-python 0.3.36 built for sm_90) every
llama_model_load_from_file died with SIGSEGV in a process that had imported numpy (or OpenCV)
before llama_cpp, with layers offloaded or not, and worked in every process that imported
llama_cpp first (bench/README.md, "VLM on the GPU"; llama-cpp-python issues #1581 and #1903
report the same). The appliance's processes import numpy early and everywhere, so the package
does this first thing. A CPU build was never seen to crash and is left alone: importing it costs
a few hundred milliseconds that a CLI call should not pay.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# Set (to anything) to skip the preload, e.g. to show the crash it avoids.
DISABLE_VARIABLE = "OCR_APPLIANCE_NO_LLAMA_PRELOAD"


def cuda_build_installed() -> bool:
    """Whether the installed llama_cpp carries ggml's CUDA backend (found without importing it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return False
    folders = [Path(location) / "lib" for location in spec.submodule_search_locations]
    override = os.environ.get("LLAMA_CPP_LIB_PATH")  # llama_cpp loads from here when it is set
    if override:
        folders.insert(0, Path(override))
    return any(any(folder.glob("libggml-cuda*")) for folder in folders if folder.is_dir())


def preload_llama_cpp() -> bool:
    """Import llama_cpp now if that can still come before numpy; True if it did."""
    if os.environ.get(DISABLE_VARIABLE) or "numpy" in sys.modules or "llama_cpp" in sys.modules:
        return False
    if not cuda_build_installed():
        return False
    import llama_cpp  # noqa: F401  (its libraries load here, numpy after them)

    return True
