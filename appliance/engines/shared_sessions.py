"""Whether the daemon's workers share one session server for the ONNX engine's models (jobs.session_server).

Decided in the daemon's own process, which must not load onnxruntime to decide it (that would
give it a CUDA context of its own on a GPU box): the CUDA build is looked for among the installed
distributions and the driver is read from /proc or nvidia-smi (cuda_driver.py), neither imported.
The reading engine's models go to the server, and the VLM where jobs.serve_vlm says
(served_readers.py); another second reader (an ONNX recogniser) keeps its own in each worker.
The server process itself is the engine's (ppocr_onnx/session_server.py), reached from outside
the engines through this module.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from appliance.config import AppConfig, PpocrOnnxConfig
from appliance.engines.ppocr_onnx.cuda_driver import driver_problem, read_driver_version
from appliance.engines.ppocr_onnx.session_server import SessionServerProcess, key_path

__all__ = [
    "SessionServerProcess",
    "key_path",
    "served_by",
    "serves_vlm",
    "wants_session_server",
    "would_run_on_cuda",
]

ONNX_ENGINE = "ppocr_onnx"
# The distribution that brings onnxruntime's CUDA provider (the CPU one is `onnxruntime`); both
# install the same module, so the module cannot tell them apart without being imported.
GPU_DISTRIBUTION = "onnxruntime-gpu"


def gpu_runtime_installed() -> bool:
    """Whether onnxruntime's CUDA build is the one installed."""
    try:
        importlib.metadata.version(GPU_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def driver_usable() -> bool:
    """Whether this box's NVIDIA driver can run the CUDA provider (cuda_driver.driver_problem)."""
    return driver_problem(read_driver_version()) is None


def would_run_on_cuda(engine: PpocrOnnxConfig) -> bool:
    """Whether the ONNX engine's sessions would run on the CUDA provider, asked without onnxruntime.

    `cuda` asks for it (and fails at load without it); `auto` takes it where the CUDA build is
    installed and the driver can run it, as sessions.py decides once onnxruntime is loaded.
    """
    if engine.provider == "cuda":
        return True
    return engine.provider == "auto" and gpu_runtime_installed() and driver_usable()


def wants_session_server(config: AppConfig) -> bool:
    """Whether the daemon runs a session server for its workers' ONNX models.

    `off`: never. `on`: whenever the reading engine is the ONNX engine (alone, or first of a pair
    with second readers). `auto`: only where it saves something, with more than one worker on
    CUDA, where each worker would otherwise hold a CUDA context and arena of its own; on the CPU
    the workers' sessions cost memory only, and one worker has nothing to share. A socket set by
    hand in engine.ppocr_onnx.session_server is a server the site runs itself: none is started.
    """
    jobs = config.jobs
    if jobs.session_server == "off" or config.engine.name != ONNX_ENGINE:
        return False
    if config.engine.ppocr_onnx.session_server is not None:
        return False
    if jobs.session_server == "on":
        return True
    return jobs.workers > 1 and would_run_on_cuda(config.engine.ppocr_onnx)


def serves_vlm(config: AppConfig) -> bool:
    """Whether the daemon's session server also holds the VLM for the workers (jobs.serve_vlm).

    Only where the session server runs at all. `auto`: where the VLM may use a GPU, where each
    worker's copy would cost a CUDA context of its own; on the CPU a worker's copy costs memory
    only, and reads beside its worker's other work without waiting for another process.
    """
    vlm = config.engine.vlm_gguf
    if vlm is None or config.jobs.serve_vlm == "off" or not wants_session_server(config):
        return False
    return config.jobs.serve_vlm == "on" or vlm.device != "cpu"


def served_by(config: AppConfig, socket_path: Path) -> AppConfig:
    """`config` with the ONNX engine opening its sessions in the session server at `socket_path`.

    And the VLM read there too where the server holds it (serves_vlm).
    """
    engine = config.engine
    update: dict[str, object] = {
        "ppocr_onnx": engine.ppocr_onnx.model_copy(update={"session_server": socket_path})
    }
    if engine.vlm_gguf is not None and serves_vlm(config):
        update["vlm_gguf"] = engine.vlm_gguf.model_copy(update={"session_server": socket_path})
    return config.model_copy(update={"engine": engine.model_copy(update=update)})
