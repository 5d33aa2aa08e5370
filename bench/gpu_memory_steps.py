"""Where one process's GPU memory goes: after each ONNX session the engine opens and each first run.

Usage (on a machine with an NVIDIA GPU and onnxruntime-gpu):
    python -m bench.gpu_memory_steps [--variant fp32+provider=cuda] [--pages N DATA_DIR ...]
        [--widths W,W] [--det-shares S,S] [--cublas-workspace :KiB:N|null]
    python -m bench.gpu_memory_steps --tiny N [--shared-arena] [--cuda-option KEY=VALUE ...]
        [--cublas-workspace :KiB:N|null]

The first form builds the engine as the daemon does, with every session it opens wrapped so that
the process's GPU memory (`nvidia-smi --query-compute-apps`, this process's row) is read after the
session is created and after its first run (the engine's warm-up), then after reading N pages of
the DATA_DIRs. The second opens N sessions of one small convolution and matrix product model, each
run once, which gives what a session costs on its own (its CUDA provider instance, with its cuDNN
and cuBLAS handles) apart from any model's weights or activations. Prints one JSON line: the steps
with the MiB after each and the growth since the step before.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine_options import add_engine_options, engine_settings
from bench.gpu_memory import process_gpu_mib

_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff"}


class Steps:
    """The GPU memory of this process, read by nvidia-smi at each named step."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def mark(self, step: str) -> None:
        used = process_gpu_mib(os.getpid())
        before = self.rows[-1]["mib"] if self.rows else 0
        grew = used - before if used is not None and before is not None else None
        self.rows.append({"step": step, "mib": used, "grew": grew})


def tiny_model() -> bytes:
    """A 3x3 convolution (cuDNN) and a matrix product (cuBLAS) on a 1x3x64x64 input."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    matrix = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "m")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("MatMul", ["c", "m"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 64, 16])],
        [weights, matrix],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return bytes(model.SerializeToString())


def tiny_sessions(
    count: int, provider: str, steps: Steps, cuda_options: dict[str, str], settings: dict[str, Any]
) -> None:
    """`settings`: engine_options' keys; the cuBLAS workspace is the one a tiny session takes."""
    from appliance.config import DEFAULT_CUBLAS_WORKSPACE
    from appliance.engines.ppocr_onnx.sessions import create_session

    model = tiny_model()
    kept = []  # every session stays open, as the engine's do
    for index in range(count):
        session, _ = create_session(
            Path("tiny.onnx"),
            provider,  # type: ignore[arg-type]
            model=model,
            cuda_options=cuda_options,
            shared_arena=settings["shared_arena"],
            cublas_workspace=settings.get("cublas_workspace_config", DEFAULT_CUBLAS_WORKSPACE),
        )
        steps.mark(f"tiny {index + 1} created")
        session.run(None, {"x": np.zeros((1, 3, 64, 64), dtype=np.float32)})
        steps.mark(f"tiny {index + 1} ran")
        kept.append(session)


def engine_sessions(variant: str, pages: list[Path], steps: Steps, settings: dict[str, Any]) -> None:
    from appliance.config import AppConfig
    from appliance.engines.factory import build_engine
    from appliance.engines.ppocr_onnx import engine as engine_module
    from appliance.variants import variant_engine_config

    opened = getattr(engine_module, "create_session")  # noqa: B009 (imported there, not exported)

    def create_session(path: Path, *args: Any, **kwargs: Any) -> Any:
        session, info = opened(path, *args, **kwargs)
        name = f"{len([row for row in steps.rows if row['step'].endswith('created')]) + 1} {path.name}"
        steps.mark(f"{name} created")
        run = session.run
        first = [True]

        def run_once_marked(*run_args: Any, **run_kwargs: Any) -> Any:
            result = run(*run_args, **run_kwargs)
            if first[0]:
                first[0] = False
                steps.mark(f"{name} first run")
            return result

        session.run = run_once_marked
        return session, info

    setattr(engine_module, "create_session", create_session)  # noqa: B010
    steps.mark("start")
    config = variant_engine_config(AppConfig().engine, variant)
    if settings:
        config = config.model_copy(update={"ppocr_onnx": config.ppocr_onnx.model_copy(update=settings)})
    engine = build_engine(config)
    steps.mark("engine loaded")
    import cv2

    for path in pages:
        image = cv2.imread(str(path))
        if image is not None:
            engine.recognize(image)
    if pages:
        steps.mark(f"{len(pages)} pages read")
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="*", help="folders of page images (or with images/)")
    parser.add_argument("--variant", default="fp32+provider=cuda")
    parser.add_argument("--pages", type=int, default=0, help="pages of the DATA_DIRs read after loading")
    parser.add_argument("--tiny", type=int, default=0, help="open this many small sessions instead")
    parser.add_argument("--provider", default="cuda", help="the small sessions' provider")
    parser.add_argument(
        "--cuda-option", action="append", default=[], help="the small sessions' CUDA provider KEY=VALUE"
    )
    parser.add_argument(
        "--shared-arena", action="store_true", help="the small sessions draw on one arena, as the engine's do"
    )
    add_engine_options(parser)
    args = parser.parse_args()
    steps = Steps()
    settings = engine_settings(args)
    if args.tiny:
        steps.mark("start")
        options = dict(item.split("=", 1) for item in args.cuda_option)
        tiny_sessions(
            args.tiny, args.provider, steps, options, {**settings, "shared_arena": args.shared_arena}
        )
    else:
        pages: list[Path] = []
        for folder in args.data:
            images = folder / "images" if (folder / "images").is_dir() else folder
            pages += sorted(path for path in images.iterdir() if path.suffix.lower() in _SUFFIXES)
        engine_sessions(args.variant, pages[: args.pages], steps, settings)
    report = {"variant": None if args.tiny else args.variant, "steps": steps.rows}
    report["settings"] = settings
    # What the process's sessions ran with: a variable set by hand wins over the setting.
    report["env"] = {key: os.environ.get(key) for key in ("CUBLAS_WORKSPACE_CONFIG", "CUDA_MODULE_LOADING")}
    if args.tiny:
        report["cuda_options"] = args.cuda_option
        report["shared_arena"] = args.shared_arena
    print(json.dumps(report))


if __name__ == "__main__":
    main()
