"""On a CUDA build of llama.cpp, makes the C++ runtime global before llama.cpp's libraries load.

On the GPU test machine (an H200, CUDA 13, llama-cpp-python 0.3.36 built for sm_90 from the
sdist) `libggml-cuda.so` defines and exports its own copy of parts of libstdc++ (`std::locale`'s
internals, `std::ostream::sentry`, `codecvt`: seen in native stacks of the crashes). ctypes loads
llama.cpp's libraries RTLD_LOCAL, and the dynamic linker then binds std:: calls to whichever
copy comes first in the loading library's scope, so the two copies' state gets mixed:
- numpy or OpenCV imported first (they load libstdc++ themselves): llama_model_load_from_file
  died with SIGSEGV in `std::ostream` inside ggml-cuda's copy (printing the model's info);
- llama_cpp imported first: libstdc++ was bound to ggml-cuda's copy of `std::locale::_Impl`, and
  OpenCV's first cv2.cvtColor aborted with "free(): invalid pointer" in its destructor.
With the system libstdc++ loaded RTLD_GLOBAL first (or promoted to global, when numpy already
loaded it), every library's std:: calls bind to that one runtime, in either import order
(bench/README.md, "VLM on the GPU"). A CPU build exports no such symbols and is left alone.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path

# Set (to anything) to skip this, e.g. to show the crashes it avoids.
DISABLE_VARIABLE = "OCR_APPLIANCE_NO_LLAMA_PRELOAD"
# The soname libllama and libmtmd are linked against (DT_NEEDED), so dlopen finds the same file.
CXX_RUNTIME = "libstdc++.so.6"


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


def make_cxx_runtime_global() -> bool:
    """Load (or promote) libstdc++ into the global scope when a CUDA build is installed; True if done.

    Must run before llama_cpp is imported: a library already loaded keeps the bindings it got.
    """
    if os.environ.get(DISABLE_VARIABLE) or not cuda_build_installed():
        return False
    try:
        ctypes.CDLL(CXX_RUNTIME, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError:  # no libstdc++ on this machine: then no llama.cpp build runs here either
        return False
    return True
