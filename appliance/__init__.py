"""Offline OCR appliance: hot-folder intake, quantized OCR engines, repaired and routed results."""

import os

from appliance.llama_preload import make_cxx_runtime_global

# onnxruntime 1.29+ on Linux starts 1DS telemetry at initialisation (a DNS lookup of
# mobile.events.data.microsoft.com, seen by tests/test_offline.py); only this variable, set before
# onnxruntime loads in each process, keeps it from starting. disable_telemetry_events() is too late.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

# First thing in every process (daemon, workers, CLI), before llama.cpp loads: see llama_preload.
make_cxx_runtime_global()

__version__ = "0.1.0"
