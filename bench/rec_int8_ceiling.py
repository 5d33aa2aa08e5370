"""How fast the recogniser can run in INT8 on onnxruntime's CPU kernels, and where its time goes.

Usage: python -m bench.rec_int8_ceiling [--pages N] [--charset NAME] [--batch B] DATASET_DIR

Records the recogniser's inputs on the first N pages of a set (the FP32 detector's lines, as
quantize.calibration records them) and runs them through the FP32 graph the engine runs (affine
pairs folded, the charset's head) and two INT8 graphs made from it, every node but the output
Softmax quantized (static QDQ, per-channel weights, MinMax calibrated on these very lines: the
most favourable calibration there is, so the printed drift is a lower bound):

- `hard-swish`: the hard-swishes fused into HardSwish nodes first (graph.fuse_hard_swish);
- `clip form`: each written as x * Clip(x + 3, 0, 6) / 6 (graph.hard_swish_as_clip), whose
  operators all have integer forms in onnxruntime (the FP32 clip form is timed too).

All run single-threaded, as the engine's line sessions do; the figures are the best of three
passes over every line, then onnxruntime's kernel time per operator type for each graph. Last,
the ways ONNX offers to apply hard-swish to a uint8 activation are timed on one tensor.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
from appliance.engines.ppocr_onnx.charset import charset_classes, load_charset
from appliance.engines.ppocr_onnx.engine import BUILTIN_MANIFEST, default_model_dir
from appliance.engines.ppocr_onnx.graph import fuse_hard_swish, hard_swish_as_clip, restrict_output_classes
from appliance.engines.ppocr_onnx.recognition import read_keys
from bench.ort_profile import op_times
from quantize.calibration import collect_feeds, folder_pages
from quantize.evaluate import cpu_session, drift, run_all
from quantize.onnx_int8 import ROLES, _Reader, prepare, probability_softmaxes

PASSES = 3


def best_time(session: ort.InferenceSession, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    outputs, _ = run_all(session, inputs[:4])  # warm-up: first-run allocations are not line time
    times = []
    for _ in range(PASSES):
        outputs, seconds = run_all(session, inputs)
        times.append(seconds)
    return outputs, min(times)


def profile(path: Path, inputs: list[np.ndarray], folder: Path) -> dict[str, float]:
    session = cpu_session(path, profile_prefix=folder / path.stem)
    run_all(session, inputs)
    return op_times(Path(session.end_profiling()))[1]


def hard_swish_on_uint8(shape: list[int], repeats: int = 50) -> dict[str, float]:
    """Milliseconds per call of each ONNX route from a uint8 activation to the next uint8 input.

    The float route is what a QDQ graph runs around every hard-swish (onnxruntime has no
    quantized hard-swish); a 256-entry lookup (Cast + Gather) is the only all-integer one.
    """
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(128, np.uint8), "zero")
    table = numpy_helper.from_array(np.arange(256, dtype=np.uint8), "table")
    routes = {
        "DequantizeLinear, HardSwish, QuantizeLinear": [
            helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["f"]),
            helper.make_node("HardSwish", ["f"], ["h"]),
            helper.make_node("QuantizeLinear", ["h", "scale", "zero"], ["y"]),
        ],
        "Cast to int32, Gather from a 256-entry table": [
            helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
            helper.make_node("Gather", ["table", "i"], ["y"]),
        ],
    }
    tensor = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    timings = {}
    for name, nodes in routes.items():
        graph = helper.make_graph(
            nodes,
            "route",
            [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
            [helper.make_tensor_value_info("y", TensorProto.UINT8, shape)],
            [scale, zero, table],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        session = cpu_session(model.SerializeToString())
        for _ in range(3):
            session.run(None, {"x": tensor})
        started = time.perf_counter()
        for _ in range(repeats):
            session.run(None, {"x": tensor})
        timings[name] = (time.perf_counter() - started) / repeats * 1000
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.rec_int8_ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="dataset folder (its images/) or a folder of page images")
    parser.add_argument("--pages", type=int, default=12, help="pages whose lines are recognised")
    parser.add_argument("--charset", help="cut the head as engine.ppocr_onnx.charset does (e.g. latin)")
    parser.add_argument("--batch", type=int, default=1, help="lines per run (the engine's rec_batch_size)")
    parser.add_argument("--json", type=Path, dest="json_out", help="write the figures to this file")
    args = parser.parse_args(argv)

    manifest = load_manifest(builtin_manifest_path(BUILTIN_MANIFEST))
    paths = verify_models(manifest, default_model_dir())
    images = args.dataset / "images" if (args.dataset / "images").is_dir() else args.dataset
    fp32_sessions = {role: cpu_session(paths[role]) for role in ROLES}
    feeds = collect_feeds(
        folder_pages(images, args.pages), fp32_sessions, paths["keys"], rec_batch_size=args.batch
    )
    lines = feeds.by_role["rec"]
    print(f"{feeds.pages} pages, {feeds.lines} lines (+ turned copies), {len(lines)} recogniser runs")
    report: dict[str, object] = {"pages": feeds.pages, "runs": len(lines), "charset": args.charset}
    with tempfile.TemporaryDirectory(prefix="rec-int8-") as tmp:
        work = Path(tmp)
        model = onnx.load(str(prepare("rec", paths["rec"], work).path))
        if args.charset:
            keys = read_keys(paths["keys"])
            kept = charset_classes(keys, load_charset(args.charset))
            model = onnx.load_from_string(restrict_output_classes(model.SerializeToString(), kept, len(keys)))
        graphs = {"FP32": work / "fp32.onnx"}
        onnx.save(model, str(graphs["FP32"]))
        fused, count = fuse_hard_swish(onnx.load_from_string(model.SerializeToString()))
        clipped, _ = hard_swish_as_clip(onnx.load_from_string(fused.SerializeToString()))
        print(f"hard-swishes: {count}")
        graphs["FP32 clip form"] = work / "fp32_clip_form.onnx"  # exact: its drift shows it is
        onnx.save(clipped, str(graphs["FP32 clip form"]))
        for name, float_graph in (("INT8 hard-swish", fused), ("INT8 clip form", clipped)):
            stem = name.replace(" ", "_")
            source, graphs[name] = work / f"{stem}_float.onnx", work / f"{stem}_int8.onnx"
            onnx.save(float_graph, str(source))
            quantize_static(
                str(source),
                str(graphs[name]),
                _Reader(float_graph.graph.input[0].name, lines),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=probability_softmaxes(float_graph),
                calibrate_method=CalibrationMethod.MinMax,
            )
        reference, fp32_s = best_time(cpu_session(graphs["FP32"]), lines)
        print(f"FP32 (the engine's graph): {fp32_s:.2f} s")
        report["fp32_s"] = fp32_s
        for name, path in graphs.items():
            if name != "FP32":
                candidate, seconds = best_time(cpu_session(path), lines)
                changed = drift("rec", reference, candidate, seconds).loss
                print(
                    f"{name}: {seconds:.2f} s, {fp32_s / seconds:.2f}x, {changed:.1%} of characters changed"
                )
                report[name] = {"seconds": seconds, "changed_chars": changed}
        for name, path in graphs.items():
            by_op = profile(path, lines, work)
            total = sum(by_op.values())
            print(f"\n{name} kernel time by operator ({total:.0f} ms):")
            for op, ms in sorted(by_op.items(), key=lambda item: -item[1])[:10]:
                print(f"  {op:<26} {ms:8.0f} ms {ms / total:6.1%}")
            report[f"{name} ops_ms"] = by_op
    # One activation of the backbone's widest stage: 64 channels at a quarter of a 48x960 line.
    shape = [1, 64, 12, 240]
    routes = hard_swish_on_uint8(shape)
    print(f"\nhard-swish on a uint8 tensor of {int(np.prod(shape))} elements, ms per call:")
    for name, ms in routes.items():
        print(f"  {name:<46} {ms:7.3f}")
    report["hard_swish_routes_ms"] = routes
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
