"""The ppocr_onnx engine on the CUDA provider: load and warm-up time, ms a page by stage, GPU memory.

Usage: python -m bench.onnx_gpu_shapes [--models SET] [--limit N] [--key KEY=VALUE ...] IMAGE_DIR

Reads the images with the engine alone (no rasterizer, layout or scoring), in this process, after
one untimed page, and prints one JSON line: the engine's load and warm-up ms, pages/s, mean ms of
each stage, and the GPU memory nvidia-smi reports for the card after the run. `--key` sets any
engine.ppocr_onnx key (`fixed_shapes=off`, `cudnn_conv_algo_search=EXHAUSTIVE`). `--cuda-option`
sets a CUDA provider option for every session (`cudnn_conv_use_max_workspace=0`). `--cuda-graph`
also times one recogniser shape through an IO binding with and without onnxruntime's CUDA graph.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine, sessions
from appliance.engines.ppocr_onnx.sessions import create_session
from appliance.variants import _option_value


def gpu_memory_mib() -> int | None:
    """memory.used of GPU 0 as nvidia-smi reports it (the whole card), or None without nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return int(out.split()[0])


def time_cuda_graph(path: Path, shape: tuple[int, ...], runs: int = 50) -> dict[str, float]:
    """Mean ms of one fixed-shape run through an IO binding, with and without the CUDA graph."""
    import onnxruntime as ort

    result = {}
    for graph in ("0", "1"):
        session, _ = create_session(path, "cuda", cuda_options={"enable_cuda_graph": graph})
        name = session.get_inputs()[0].name
        host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        device_input = ort.OrtValue.ortvalue_from_numpy(host, "cuda", 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input(name, device_input)
        binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
        session.run_with_iobinding(binding)  # the first run captures the graph
        started = time.perf_counter()
        for _ in range(runs):
            device_input.update_inplace(host)
            session.run_with_iobinding(binding)
            binding.copy_outputs_to_cpu()
        result[f"cuda_graph_{graph}_ms"] = (time.perf_counter() - started) * 1000 / runs
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", type=Path)
    parser.add_argument("--models", default="ppocrv6_small")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--key", action="append", default=[], help="engine.ppocr_onnx KEY=VALUE")
    parser.add_argument("--cuda-option", action="append", default=[], help="CUDA provider KEY=VALUE")
    parser.add_argument("--cuda-graph", action="store_true")
    args = parser.parse_args()
    for item in args.cuda_option:
        name, value = item.split("=", 1)
        sessions.CUDA_OPTIONS[name] = value  # every session this process opens takes it
    keys: dict[str, Any] = {"provider": "cuda", "models": args.models}
    for item in args.key:
        name, value = item.split("=", 1)
        keys[name] = _option_value(value)
    before = gpu_memory_mib()
    started = time.perf_counter()
    engine = PpocrOnnxEngine(PpocrOnnxConfig(**keys))
    load_ms = (time.perf_counter() - started) * 1000
    paths = sorted(p for p in args.images.iterdir() if p.suffix.lower() in (".jpg", ".png"))[: args.limit]
    pages: list[np.ndarray] = [
        image for p in paths if (image := cv2.imread(str(p), cv2.IMREAD_COLOR)) is not None
    ]
    engine.recognize(pages[0])  # untimed, as the OCR benchmark does
    stages: dict[str, list[float]] = {}
    started = time.perf_counter()
    for page in pages:
        for stage, ms in engine.recognize(page).timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    elapsed = time.perf_counter() - started
    report: dict[str, Any] = {
        "keys": keys,
        "cuda_options": args.cuda_option,
        "pages": len(pages),
        "load_ms": round(load_ms),
        "warm_up_ms": engine.describe().get("warm_up_ms"),
        "pages_per_s": round(len(pages) / elapsed, 2),
        "stage_mean_ms": {stage: round(statistics.fmean(v), 1) for stage, v in stages.items()},
        "gpu_mib_before": before,
        "gpu_mib_after": gpu_memory_mib(),
    }
    if args.cuda_graph:
        rec = engine.model_paths["rec"]
        engine.close()
        report.update(time_cuda_graph(rec, (16, 3, 48, 640)))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
