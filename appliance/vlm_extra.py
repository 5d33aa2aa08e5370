"""Whether the optional `vlm` extra (llama-cpp-python) is installed, and the error when a config needs it.

llama-cpp-python compiles llama.cpp from source for minutes, so `make setup` leaves it out and the
VLM is off by default; a config that sets engine.vlm_gguf must then fail at once with what to run,
not with an ImportError deep inside a worker.
"""

from __future__ import annotations

import importlib.util

from appliance.config import AppConfig
from appliance.errors import ConfigError

INSTALL_HINT = "install the vlm extra: make vlm"


def llama_cpp_installed() -> bool:
    """Whether llama_cpp can be imported (found without importing it, which loads llama.cpp)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken half-install
        return False


def require_vlm_runtime(config: AppConfig, source: object = "config") -> None:
    """Raise ConfigError when the config asks for engine.vlm_gguf and llama_cpp is not installed."""
    if config.engine.vlm_gguf is not None and not llama_cpp_installed():
        raise ConfigError(
            f"{source}: engine.vlm_gguf is set but llama-cpp-python is not installed; {INSTALL_HINT}"
        )
