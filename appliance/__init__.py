"""Offline OCR appliance: hot-folder intake, quantized OCR engines, repaired and routed results."""

from appliance.llama_preload import make_cxx_runtime_global

# First thing in every process (daemon, workers, CLI), before llama.cpp loads: see llama_preload.
make_cxx_runtime_global()

__version__ = "0.1.0"
