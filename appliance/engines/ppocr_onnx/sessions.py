"""onnxruntime sessions with an explicit execution provider, and a check of the one actually used."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import onnxruntime as ort

from appliance.config import DEFAULT_CUBLAS_WORKSPACE
from appliance.engines.ppocr_onnx.cuda_driver import driver_problem, read_driver_version
from appliance.errors import ModelError, ProviderError

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"

ProviderChoice = Literal["auto", "cpu", "cuda"]

# Each CUDA session's arena cap (onnxruntime's gpu_mem_limit is per session, not per process); the
# engine passes engine.ppocr_onnx.gpu_mem_limit_mb. kSameAsRequested grows the arena by what is
# asked, not by doubling, so one extension cannot jump far past the need. The CUDA context and the
# per-thread cuDNN and cuBLAS workspaces lie outside the arenas.
SESSION_GPU_MEM_LIMIT_MB = 4096
CUDA_OPTIONS: dict[str, str] = {
    "device_id": "0",
    "arena_extend_strategy": "kSameAsRequested",
    # Page and line-batch shapes change with every page; an exhaustive cuDNN search would benchmark
    # every convolution again for each new shape.
    "cudnn_conv_algo_search": "HEURISTIC",
}


@dataclass(frozen=True)
class SessionInfo:
    """The provider a session really runs on, and why it is not the one asked for if it is not."""

    provider: str
    requested: str
    fallback_reason: str | None = None
    shared_arena: bool = False  # its CUDA memory comes from the process's one arena


class ModelSession(Protocol):
    """What the engine asks of a session: onnxruntime's InferenceSession, or a RemoteSession in a server."""

    def get_inputs(self) -> Sequence[Any]: ...

    def get_outputs(self) -> Sequence[Any]: ...

    def get_providers(self) -> Sequence[str]: ...

    def run(self, output_names: Any, input_feed: dict[str, Any], /) -> Sequence[Any]: ...


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


def cuda_provider_options(
    gpu_mem_limit_mb: int = SESSION_GPU_MEM_LIMIT_MB, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """CUDA_OPTIONS with the arena capped at `gpu_mem_limit_mb` and `extra` over both."""
    return {**CUDA_OPTIONS, "gpu_mem_limit": str(gpu_mem_limit_mb * 1024 * 1024), **(extra or {})}


@functools.cache
def prepare_cuda() -> str | None:
    """Check the driver and load pip's CUDA and cuDNN libraries once; why CUDA cannot run, or None.

    onnxruntime-gpu[cuda,cudnn] installs CUDA 13 and cuDNN 9 as Python packages under site-packages,
    where the dynamic loader does not look; preload_dlls() loads them by path (and registers a CUDA
    provider built as a plugin again) so a box with only the NVIDIA driver needs no CUDA toolkit.
    """
    problem = driver_problem(read_driver_version())
    if problem is not None:
        return problem
    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu 1.21 and newer
    if preload is None:
        return None
    printed = io.StringIO()
    try:
        # It reports libraries it cannot load with print(); stdout may be a command's JSON output.
        with contextlib.redirect_stdout(printed):
            preload()
    except Exception as error:  # onnxruntime raises its own untyped errors
        log.warning("onnxruntime.preload_dlls failed: %s", error)
    for line in printed.getvalue().splitlines():
        if line.strip():
            log.warning("onnxruntime.preload_dlls: %s", line.strip())
    return None


# cuBLAS takes its workspace setting from the environment, and the CUDA provider gives each session
# cuBLAS handles of its own: PpocrOnnxConfig.cublas_workspace_config says why it is set. It is set
# before the CUDA libraries load, so it holds whether cuBLAS reads it at load or at each handle.
CUBLAS_WORKSPACE_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"


def apply_cublas_workspace(value: str | None, environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Set cuBLAS's workspace setting unless the environment has one; return the one in effect."""
    if value is not None and CUBLAS_WORKSPACE_VARIABLE not in environ:
        environ[CUBLAS_WORKSPACE_VARIABLE] = value
    return environ.get(CUBLAS_WORKSPACE_VARIABLE)


# The cap in MiB of the process's one CUDA arena, under "mb" once registered with onnxruntime.
_shared_arena: dict[str, int] = {}
_shared_arena_lock = threading.Lock()
# OrtArenaCfg's arena_extend_strategy: 1 is kSameAsRequested, as CUDA_OPTIONS asks of a session's own.
_SAME_AS_REQUESTED = 1


def register_shared_cuda_arena(limit_mb: int) -> bool:
    """Register one CUDA arena of at most `limit_mb` for every session that asks for it; True if it is there.

    Each CUDA session otherwise grows an arena of its own to its own peak, and under fixed shapes
    the engine holds 14 sessions (bench/README.md, "The ONNX engine on the GPU"). Sessions run one
    at a time on the engine's thread, so one arena sized for the largest run serves them all. The
    first registration's cap holds for the process (onnxruntime registers an allocator once).
    """
    with _shared_arena_lock:
        registered = _shared_arena.get("mb")
        if registered is not None:
            if registered != limit_mb:
                log.warning(
                    "the shared CUDA arena keeps its cap of %d MiB; %d MiB asked later",
                    registered,
                    limit_mb,
                )
            return True
        memory = ort.OrtMemoryInfo(
            "Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        arena = ort.OrtArenaCfg(
            {"max_mem": limit_mb * 1024 * 1024, "arena_extend_strategy": _SAME_AS_REQUESTED}
        )
        try:
            ort.create_and_register_allocator_v2(
                CUDA, memory, {"device_id": CUDA_OPTIONS["device_id"]}, arena
            )
        except Exception as error:  # onnxruntime raises its own untyped errors
            log.warning("no shared CUDA arena (each session keeps its own): %s", error)
            return False
        _shared_arena["mb"] = limit_mb
        log.info("one CUDA arena of at most %d MiB serves every session", limit_mb)
        return True


def cuda_usable() -> bool:
    """Whether this onnxruntime build offers the CUDA provider (a session still checks it starts)."""
    return CUDA in ort.get_available_providers()


def create_session(
    path: Path,
    provider: ProviderChoice,
    intra_op_threads: int = 0,
    inter_op_threads: int = 1,
    *,
    allow_spinning: bool = False,
    graph_level: GraphLevel = "all",
    model: bytes | None = None,
    gpu_mem_limit_mb: int = SESSION_GPU_MEM_LIMIT_MB,
    cuda_options: Mapping[str, str] | None = None,
    shared_arena: bool = False,
    cublas_workspace: str | None = DEFAULT_CUBLAS_WORKSPACE,
) -> tuple[ort.InferenceSession, SessionInfo]:
    """Open a model on the requested provider (`model`: the serialized graph to run instead of path's).

    `cuda_options`: CUDA provider options over CUDA_OPTIONS (e.g. cudnn_conv_algo_search).
    `shared_arena`: on CUDA, take memory from the process's one arena (register_shared_cuda_arena,
    capped at `gpu_mem_limit_mb`) instead of an arena of the session's own.
    `cublas_workspace`: on CUDA, cuBLAS's workspace setting (apply_cublas_workspace); None: its default.

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
    if wanted[0] == CUDA:
        # Before prepare_cuda loads the CUDA libraries, cuBLAS among them.
        log.debug(
            "cuBLAS workspace setting: %s", apply_cublas_workspace(cublas_workspace) or "cuBLAS's default"
        )
    cuda_problem = prepare_cuda() if wanted[0] == CUDA else None
    if cuda_problem is not None:
        if provider == "cuda":
            raise ProviderError(f"{path.name}: {cuda_problem}")
        wanted = [CPU]
    providers: list[str | tuple[str, dict[str, str]]] = [
        (CUDA, cuda_provider_options(gpu_mem_limit_mb, cuda_options)) if name == CUDA else name
        for name in wanted
    ]
    options = _session_options(intra_op_threads, inter_op_threads, allow_spinning, graph_level)
    shared = wanted[0] == CUDA and shared_arena and register_shared_cuda_arena(gpu_mem_limit_mb)
    if shared:
        options.add_session_config_entry("session.use_env_allocators", "1")
    try:
        session = ort.InferenceSession(
            model if model is not None else str(path), sess_options=options, providers=providers
        )
    except Exception as error:  # onnxruntime raises its own untyped errors for bad graphs
        raise ModelError(f"onnxruntime cannot load {path}: {error}") from None
    used = session.get_providers()[0]
    fallback_reason = None
    if cuda_problem is not None:
        fallback_reason = cuda_problem
        log.warning("%s runs on the CPU: %s", path.name, fallback_reason)
    elif wanted[0] == CUDA and used != CUDA:
        fallback_reason = "the CUDA provider is installed but could not start (driver or CUDA libraries)"
        if provider == "cuda":
            raise ProviderError(f"{path.name}: {fallback_reason}; set provider: cpu to run on the CPU")
        log.warning("%s runs on the CPU: %s", path.name, fallback_reason)
    elif provider == "auto" and CUDA not in available:
        fallback_reason = "this onnxruntime build has no CUDA provider"
    log.info("model %s runs on %s", path.name, used)
    info = SessionInfo(
        provider=used,
        requested=provider,
        fallback_reason=fallback_reason,
        shared_arena=shared and used == CUDA,
    )
    return session, info


# Tensor element types the PP-OCR graphs take, as numpy dtypes for a probe's zero inputs.
_INPUT_DTYPES: dict[str, type[np.generic]] = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def tiny_inputs(session: ModelSession) -> dict[str, np.ndarray]:
    """Zero inputs of a small shape the model takes: fixed sizes kept, 1 for a free batch, 32 otherwise."""
    feeds = {}
    for node in session.get_inputs():
        shape = [
            dim if isinstance(dim, int) and dim > 0 else (1 if axis == 0 else 32)
            for axis, dim in enumerate(node.shape)
        ]
        feeds[node.name] = np.zeros(shape, dtype=_INPUT_DTYPES.get(node.type, np.float32))
    return feeds


@dataclass(frozen=True)
class ProviderProbe:
    """One inference on a provider: the provider that ran it, how long it took, or what went wrong."""

    requested: str
    provider: str | None
    inference_ms: float | None
    error: str | None = None


def probe_provider(path: Path, provider: ProviderChoice) -> ProviderProbe:
    """Open `path` on `provider` and run one inference on zeros: proof that the provider really executes.

    A CUDA session can be created and still fail at its first run (a driver too old for the kernels,
    cuDNN missing), so creating it proves less than running it.
    """
    try:
        session, info = create_session(path, provider, 1, 1)
        started = time.perf_counter()
        session.run(None, tiny_inputs(session))
        elapsed_ms = (time.perf_counter() - started) * 1000.0
    except ModelError as error:
        return ProviderProbe(requested=provider, provider=None, inference_ms=None, error=str(error))
    except Exception as error:  # onnxruntime raises its own untyped errors at run time
        return ProviderProbe(
            requested=provider,
            provider=None,
            inference_ms=None,
            error=f"{path.name}: inference failed: {error}",
        )
    return ProviderProbe(
        requested=provider, provider=info.provider, inference_ms=elapsed_ms, error=info.fallback_reason
    )
