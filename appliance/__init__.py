"""Offline OCR appliance: hot-folder intake, quantized OCR engines, repaired and routed results."""

from appliance.llama_preload import preload_llama_cpp

# First thing in every process (daemon, workers, CLI): see llama_preload for why.
preload_llama_cpp()

__version__ = "0.1.0"
