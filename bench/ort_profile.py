"""Where a page's time goes: engine stages, and onnxruntime's per-operator profile of each model.

Usage: python -m bench.ort_profile [--config FILE] [--variant SPEC] [--limit N] DATASET_DIR

Reads the first N pages of a set (default 8) with the configured engine (a `--variant` as in
bench.ocr_bench), after one warm-up page, and prints the median time per stage and, per model,
onnxruntime's kernel time by operator type (summed over the pages, with its share). The
sessions are re-opened with onnxruntime profiling on the same graph the engine runs (folded at
load or a derived INT8/FP16 file); the profile JSON files are written to a temporary folder
and deleted.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from appliance.config import AppConfig, load_config
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.sessions import _session_options
from appliance.variants import variant_engine_config
from bench.ocr_bench import load_dataset

ROLES = ("det", "cls", "rec")


def _profiled(
    engine: PpocrOnnxEngine, paths: dict[str, Path], folder: Path
) -> dict[str, ort.InferenceSession]:
    """Replace the engine's sessions by profiling ones on the same graphs and session options."""
    config = engine._config
    holders: dict[str, Any] = {"det": engine._detector, "rec": engine._recognizer, "cls": engine._orientation}
    sessions: dict[str, ort.InferenceSession] = {}
    for role, holder in holders.items():
        if holder is None:
            continue
        # As the engine runs them: lines side by side on single-threaded sessions (see its load).
        threads = 1 if role != "det" and engine._pool is not None else config.intra_op_threads
        options = _session_options(
            threads, config.inter_op_threads, config.allow_spinning, config.graph_optimization
        )
        options.enable_profiling = True
        options.profile_file_prefix = str(folder / role)
        model: bytes | str = engine.graph_at_load(role, paths[role]) or str(paths[role])
        sessions[role] = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        holder._session = sessions[role]
    return sessions


def read_page(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise SystemExit(f"cannot read {path}")
    return image


def op_times(profile: Path) -> tuple[float, dict[str, float]]:
    """Total model-run time and kernel time per operator type (ms) from an onnxruntime profile."""
    events = json.loads(profile.read_text(encoding="utf-8"))
    by_op: collections.Counter[str] = collections.Counter()
    runs = 0.0
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"] / 1000
        elif event.get("name") == "model_run":
            runs += event["dur"] / 1000
    return runs, dict(by_op)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.ort_profile", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="dataset folder (images/, gt/, scoring.json)")
    parser.add_argument("--config", type=Path, help="appliance YAML config (default: built-in defaults)")
    parser.add_argument("--variant", help="engine variant, as in bench.ocr_bench")
    parser.add_argument("--limit", type=int, default=8, help="pages to profile")
    parser.add_argument("--top", type=int, default=10, help="operator types listed per model")
    args = parser.parse_args(argv)
    config = load_config(args.config) if args.config else AppConfig()
    engine_config = variant_engine_config(config.engine, args.variant) if args.variant else config.engine
    engine = PpocrOnnxEngine(engine_config.ppocr_onnx.model_copy(update={"provider": "cpu"}))
    pages, _ = load_dataset(args.dataset, args.limit)
    images = [read_page(page.image) for page in pages]
    with tempfile.TemporaryDirectory(prefix="ort-profile-") as tmp:
        sessions = _profiled(engine, engine.model_paths, Path(tmp))
        engine.recognize(images[0])  # warm-up, counted in the operator profile but not the stages
        stages: dict[str, list[float]] = collections.defaultdict(list)
        for image in images:
            for stage, value in engine.recognize(image).timings_ms.items():
                stages[stage].append(value)
        print(f"{args.dataset.name}: {len(images)} pages, variant {args.variant or 'config'}")
        print(
            "median ms/page by stage: "
            + "  ".join(f"{k} {statistics.median(v):.0f}" for k, v in stages.items())
        )
        for role, session in sessions.items():
            runs, by_op = op_times(Path(session.end_profiling()))
            total = sum(by_op.values()) or 1.0
            print(
                f"\n{role}: {runs:.0f} ms in model runs over {len(images) + 1} pages (kernels {total:.0f} ms)"
            )
            for op, ms in sorted(by_op.items(), key=lambda item: -item[1])[: args.top]:
                print(f"  {op:<26} {ms:>9.0f} ms {ms / total:>6.1%}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
