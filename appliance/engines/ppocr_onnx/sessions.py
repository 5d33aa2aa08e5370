"""onnxruntime sessions with an explicit execution provider, and a check of the one actually used."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import onnxruntime as ort

from appliance.errors import ModelError, ProviderError

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"

ProviderChoice = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class SessionInfo:
    """The provider a session really runs on, and why it is not the one asked for if it is not."""

    provider: str
    requested: str
    fallback_reason: str | None = None


GraphLevel = Literal["basic", "extended", "all"]
_GRAPH_LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _session_options(
    intra_op_threads: int, inter_op_threads: int, allow_spinning: bool, graph_level: GraphLevel
) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = _GRAPH_LEVELS[graph_level]
    options.intra_op_num_threads = intra_op_threads  # 0 lets onnxruntime use every core
    options.inter_op_num_threads = inter_op_threads
    # Spinning threads busy-wait for the next operator; on a 2-core machine shared with the
    # rasterizer and other workers that steals the cores they wait for (one recognition batch:
    # 316 ms spinning, 221 ms not).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "1" if allow_spinning else "0")
    # Severity 3 = errors only: the PP-OCR graphs carry shape hints that onnxruntime warns about
    # on every load, which would bury real problems in the journal.
    options.log_severity_level = 3
    return options


def create_session(
    path: Path,
    provider: ProviderChoice,
    intra_op_threads: int = 0,
    inter_op_threads: int = 1,
    *,
    allow_spinning: bool = False,
    graph_level: GraphLevel = "all",
    model: bytes | None = None,
) -> tuple[ort.InferenceSession, SessionInfo]:
    """Open a model on the requested provider (`model`: the serialized graph to run instead of path's).

    onnxruntime silently drops to the CPU when the CUDA provider cannot load its libraries, so the
    provider list of the created session is checked: `cuda` then fails loudly, and `auto` records
    the fallback with its reason so the log and the status API tell the truth.
    """
    # onnxruntime builds may carry Microsoft's telemetry (1DS); an appliance that must never send
    # a byte off the box switches it off before the first session, whatever the build.
    ort.disable_telemetry_events()
    available = ort.get_available_providers()
    if provider == "cuda" and CUDA not in available:
        raise ProviderError(
            f"engine.ppocr_onnx.provider is 'cuda' but this onnxruntime build has no CUDA provider "
            f"(available: {', '.join(available)}); install onnxruntime-gpu (make install-gpu) or set "
            "provider: cpu"
        )
    wanted = [CUDA, CPU] if provider in ("cuda", "auto") and CUDA in available else [CPU]
    try:
        session = ort.InferenceSession(
            model if model is not None else str(path),
            sess_options=_session_options(intra_op_threads, inter_op_threads, allow_spinning, graph_level),
            providers=wanted,
        )
    except Exception as error:  # onnxruntime raises its own untyped errors for bad graphs
        raise ModelError(f"onnxruntime cannot load {path}: {error}") from None
    used = session.get_providers()[0]
    fallback_reason = None
    if wanted[0] == CUDA and used != CUDA:
        fallback_reason = "the CUDA provider is installed but could not start (driver or CUDA libraries)"
        if provider == "cuda":
            raise ProviderError(f"{path.name}: {fallback_reason}; set provider: cpu to run on the CPU")
        log.warning("%s runs on the CPU: %s", path.name, fallback_reason)
    elif provider == "auto" and CUDA not in available:
        fallback_reason = "this onnxruntime build has no CUDA provider"
    log.info("model %s runs on %s", path.name, used)
    return session, SessionInfo(provider=used, requested=provider, fallback_reason=fallback_reason)
