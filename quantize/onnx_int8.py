"""Derive INT8 (static QDQ, per-channel) or FP16 variants of the PP-OCRv5 models, with a manifest.

Usage:
  python -m quantize.onnx_int8 --out DIR [--precision int8|fp16] [--roles det,cls,rec]
                               [--calib-pages N | --calib-dir PATH] [--val-pages N] [--seed S]
                               [--search] [--method static|dynamic] [--exclude ROLE:NODE ...]
                               [--calibrate minmax|percentile] [--float-stem SHARE]

INT8 steps, per model (why in each function): onnxruntime's basic graph level (BatchNorm and bias
folding, Identity removal) -> the learnable-affine folding of ppocr_onnx/graph.py -> opset 17 (per-
channel QDQ needs >= 13) -> unique node names -> onnxruntime's quant_pre_process (shape
inference) -> quantize_static with QDQ, per-channel weights, uint8 activations / int8 weights
(x86 fuses only U8S8 QDQ Conv into QLinearConv; S8S8 ran 3x slower here), MinMax calibration
on the engine's own inputs (quantize/calibration.py). Output probability Softmaxes are never
quantized: their values are the per-character confidences and the orientation probability, and
the stem (first 10% of nodes, STEM_SHARE says why) stays in float. Percentile calibration
(`--calibrate percentile`) gave the detector a smaller mask drift (0.046 against 0.065) but a
worse CER on 16 receipts (6.82% against 6.20%; FP32 6.29%), so MinMax is the default.
`--search` then measures, on validation pages of another seed, how far each model drifts from
FP32 with each candidate node group kept in float, and keeps a group only where it helps.

DIR gets ppocrv5_{role}_{precision}.onnx and manifest.json (sha256, method, calibration set,
excluded nodes and why, measured drift), which the engine checks like the FP32 manifest.

What pays on a 2-core AVX-512 VNNI CPU (measured; bench/README.md has the commands): the
detector, 3x faster with the stem in float and no measurable CER loss, which is what `make
models-int8` builds. Recognition does not: static INT8 changed 21-50% of characters against FP32
in every variant tried (whole model, Conv only, first/last Conv, stem and the SVTR attention kept
in float; MinMax or percentile), and with the stem quantized it ran slower than FP32 (0.6-0.8x),
the hard-swishes and affine Muls/Adds between the QLinearConvs costing a Quantize/Dequantize
pass each. Dynamic INT8 ran 4.7x slower (ConvInteger has no fast kernel). With the Latin head
(engine.ppocr_onnx.charset) even the fully quantized recogniser is only 1.17x FP32 on receipt
lines: its convolutions run 2.2x faster, but onnxruntime has no quantized hard-swish, so the 28
hard-swishes run in float between Dequantize/Quantize passes and cost more than the convolutions.
Written as x * Clip(x + 3, 0, 6) / 6 (graph.hard_swish_as_clip) the graph stays in uint8, 1.42x,
and still changes 37% of the characters (`python -m bench.rec_int8_ceiling`, bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import version_converter
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from appliance.engines.manifest import builtin_manifest_path, load_manifest, sha256_file, verify_models
from appliance.engines.ppocr_onnx.engine import BUILTIN_MANIFEST, default_model_dir
from appliance.engines.ppocr_onnx.graph import fold_affine_into_conv, name_nodes, optimize_basic
from appliance.engines.ppocr_onnx.recognition import dictionary
from quantize.calibration import Feeds, collect_feeds, folder_pages, rendered_pages
from quantize.evaluate import Drift, cpu_session, drift, run_all

ROLES = ("det", "cls", "rec")
OPSET = 17
# A node group is kept in float only if that removes at least this share of the model's drift:
# each excluded group adds a Dequantize/Quantize pair and float work back to every page.
MIN_GAIN = 0.25
# The stem: this share of the nodes, first in graph order (the full-resolution convolutions and
# their hard-swishes). Their activations span wide ranges (the detector's second convolution
# outputs -75..80 where most values are a few units), so one uint8 scale per tensor loses them:
# on the detector, quantizing only its first 4 nodes already moved the text mask by 0.34
# (1 - IoU), and keeping the first 10% in float brought the whole model from 0.35 to 0.065.
STEM_SHARE = 0.1
# Histogram calibration (percentile) needs tensors of one shape: inputs are cut into tiles of
# this size (height, width), zero-padded at the page edge.
TILES = {"det": (640, 640), "cls": (80, 160), "rec": (48, 320)}
MAX_TILES = 48
CALIBRATION_METHODS = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}


@dataclass
class Prepared:
    """A model ready for the quantizer and the facts the manifest records about it."""

    role: str
    path: Path
    folded: int


class _Reader(CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, name: str, tensors: list[np.ndarray]) -> None:
        self._items: Iterator[np.ndarray] = iter(tensors)
        self._name = name

    def get_next(self) -> dict[str, np.ndarray] | None:
        tensor = next(self._items, None)
        return None if tensor is None else {self._name: tensor}


def prepare(role: str, source: Path, work: Path) -> Prepared:
    """FP32 graph, simplified exactly: see the module docstring and ppocr_onnx/graph.py."""
    basic = work / f"{role}_basic.onnx"
    optimize_basic(source, basic)
    model = onnx.load(str(basic))
    model, folded = fold_affine_into_conv(model)
    model = version_converter.convert_version(model, OPSET)
    name_nodes(model)
    onnx.checker.check_model(model)
    folded_path = work / f"{role}_folded.onnx"
    onnx.save(model, str(folded_path))
    pre = (work / f"{role}_pre.onnx").resolve()
    folded_path = folded_path.resolve()
    # Symbolic shape inference writes its temporary model into the working directory and leaves
    # it there when it gives up: run it inside the work folder.
    with contextlib.chdir(work):
        try:
            quant_pre_process(str(folded_path), str(pre), skip_symbolic_shape=False)
        except Exception:  # symbolic inference gives up on some Paddle graphs (det); ONNX's own works
            quant_pre_process(str(folded_path), str(pre), skip_symbolic_shape=True)
    return Prepared(role, pre, folded)


def probability_softmaxes(model: onnx.ModelProto) -> list[str]:
    """Softmax nodes whose output is a graph output: confidences, never quantized."""
    outputs = {value.name for value in model.graph.output}
    return [node.name for node in model.graph.node if node.op_type == "Softmax" and node.output[0] in outputs]


def stem(model: onnx.ModelProto, share: float = STEM_SHARE) -> list[str]:
    """The first `share` of the nodes in graph order (see STEM_SHARE)."""
    nodes = list(model.graph.node)
    return [node.name for node in nodes[: int(len(nodes) * share)]]


def same_shape(role: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
    """The calibration tensors cut into equal tiles (histogram calibration stacks its batches)."""
    height, width = TILES[role]
    tiles = []
    for tensor in tensors:
        for top in range(0, max(1, tensor.shape[2] - height // 2), height):
            for left in range(0, max(1, tensor.shape[3] - width // 2), width):
                piece = tensor[:, :, top : top + height, left : left + width]
                tile = np.zeros((tensor.shape[0], tensor.shape[1], height, width), dtype=np.float32)
                tile[:, :, : piece.shape[2], : piece.shape[3]] = piece
                # One row per tile: batches of different sizes would not stack either.
                tiles.extend(np.split(tile, tile.shape[0]))
    # Evenly spaced, at most MAX_TILES: the calibrator keeps every activation of every tile.
    step = max(1, len(tiles) // MAX_TILES)
    return tiles[::step][:MAX_TILES]


def candidate_groups(role: str, model: onnx.ModelProto) -> dict[str, list[str]]:
    """Node groups whose quantization is commonly blamed for accuracy loss, to be measured."""
    nodes = list(model.graph.node)
    convs = [node.name for node in nodes if node.op_type in ("Conv", "ConvTranspose")]
    matmuls = [node.name for node in nodes if node.op_type in ("MatMul", "Gemm")]
    groups: dict[str, list[str]] = {"first_conv": convs[:1], "last_conv": convs[-1:], "stem": stem(model)}
    if role == "rec":
        # The SVTR neck: its attention MatMuls and Softmaxes, and the CTC head's MatMul.
        softmax_out = set(probability_softmaxes(model))
        attention = [n.name for n in nodes if n.op_type == "Softmax" and n.name not in softmax_out]
        groups["svtr_attention"] = matmuls[:-1] + attention
        groups["ctc_head"] = matmuls[-1:]
        groups["layernorm"] = [n.name for n in nodes if n.op_type in ("LayerNormalization", "ReduceMean")]
    elif role == "det":
        # The DB head: the two transposed convolutions and the probability map's last layers.
        groups["db_head"] = [n.name for n in nodes if n.op_type in ("ConvTranspose", "Sigmoid")]
        groups["fpn_resize"] = [n.name for n in nodes if n.op_type == "Resize"]
    else:
        groups["classifier_head"] = matmuls[-1:]
    return {name: members for name, members in groups.items() if members}


def quantize_int8(
    prepared: Prepared,
    feeds: list[np.ndarray],
    exclude: list[str],
    out: Path,
    *,
    method: str,
    calibrate: str = "minmax",
) -> None:
    if method == "dynamic":
        quantize_dynamic(
            str(prepared.path),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_exclude=exclude,
        )
        return
    name = onnx.load(str(prepared.path)).graph.input[0].name
    extra = {"CalibPercentile": 99.99} if calibrate == "percentile" else {}
    quantize_static(
        str(prepared.path),
        str(out),
        _Reader(name, same_shape(prepared.role, feeds) if calibrate != "minmax" else feeds),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=exclude,
        calibrate_method=CALIBRATION_METHODS[calibrate],
        extra_options=extra,
    )


def to_fp16(source: Path, out: Path) -> None:
    """FP16 weights and compute for the CUDA provider; inputs and outputs stay FP32 for the engine."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    # Resize's scales and the shape-computing ops must stay FP32 (onnxruntime's own default list).
    converted = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, str(out))


def measure(role: str, path: Path, inputs: list[np.ndarray], reference: list[np.ndarray]) -> Drift:
    outputs, seconds = run_all(cpu_session(path), inputs)
    return drift(role, reference, outputs, seconds)


def search_exclusions(
    prepared: Prepared,
    calibration: list[np.ndarray],
    validation: list[np.ndarray],
    reference: list[np.ndarray],
    *,
    base_exclude: list[str],
    work: Path,
    calibrate: str,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Measure the drift with every candidate group kept in float; keep the groups that help."""
    role = prepared.role
    model = onnx.load(str(prepared.path))
    trial = work / f"{role}_trial.onnx"
    quantize_int8(prepared, calibration, base_exclude, trial, method="static", calibrate=calibrate)
    base = measure(role, trial, validation, reference)
    report: list[dict[str, Any]] = [{"group": "none", "loss": base.loss, "seconds": base.seconds}]
    print(
        f"  {role}: all quantized: drift {base.loss:.4f} ({base.detail}) {base.seconds:.2f}s", file=sys.stderr
    )
    kept: list[str] = []
    for group, members in candidate_groups(role, model).items():
        quantize_int8(
            prepared, calibration, base_exclude + members, trial, method="static", calibrate=calibrate
        )
        result = measure(role, trial, validation, reference)
        gain = (base.loss - result.loss) / base.loss if base.loss > 0 else 0.0
        keep = gain >= MIN_GAIN
        print(
            f"  {role}: float {group} ({len(members)} nodes): drift {result.loss:.4f} "
            f"gain {gain:+.0%} {result.seconds:.2f}s{' -> kept in float' if keep else ''}",
            file=sys.stderr,
        )
        report.append(
            {
                "group": group,
                "nodes": members,
                "loss": result.loss,
                "gain": gain,
                "seconds": result.seconds,
                "kept": keep,
            }
        )
        if keep:
            kept.extend(members)
    return kept, report


def _calibration_description(args: argparse.Namespace, feeds: Feeds) -> str:
    source = (
        f"folder {args.calib_dir} (first {args.calib_pages} images)"
        if args.calib_dir
        else f"{feeds.pages} rendered pages (quantize/calibration.py, seed {args.seed})"
    )
    return f"{source}: {feeds.lines} lines, " + ", ".join(
        f"{role} {len(tensors)} batches" for role, tensors in feeds.by_role.items()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantize.onnx_int8", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the models and manifest.json")
    parser.add_argument("--precision", choices=("int8", "fp16"), default="int8")
    parser.add_argument("--method", choices=("static", "dynamic"), default="static")
    parser.add_argument("--roles", default="det,cls,rec", help="comma-separated subset of det,cls,rec")
    parser.add_argument("--calib-dir", type=Path, help="calibrate on the page images of this folder")
    parser.add_argument("--calib-pages", type=int, default=24, help="pages to calibrate on")
    parser.add_argument(
        "--val-pages", type=int, default=8, help="rendered validation pages (--search, drift)"
    )
    parser.add_argument("--seed", type=int, default=2026, help="seed of the rendered calibration pages")
    parser.add_argument(
        "--search", action="store_true", help="measure candidate node groups to keep in float"
    )
    parser.add_argument("--exclude", action="append", default=[], help="ROLE:NODE to keep in float")
    parser.add_argument(
        "--calibrate", choices=tuple(CALIBRATION_METHODS), default="minmax", help="activation ranges"
    )
    parser.add_argument(
        "--float-stem",
        type=float,
        default=STEM_SHARE,
        help="share of the first nodes kept in float (0 quantizes the stem too)",
    )
    parser.add_argument("--model-dir", type=Path, help="FP32 files (default: each model's package)")
    parser.add_argument(
        "--set",
        dest="model_set",
        default=BUILTIN_MANIFEST,
        choices=("ppocrv5_mobile", "ppocrv6_small"),
        help="the built-in model set to derive from (engine.ppocr_onnx.models)",
    )
    args = parser.parse_args(argv)
    roles = [role for role in args.roles.split(",") if role]
    if unknown := set(roles) - set(ROLES):
        parser.error(f"unknown roles: {', '.join(sorted(unknown))}")

    manifest = load_manifest(builtin_manifest_path(args.model_set))
    paths = verify_models(manifest, args.model_dir)  # never derive anything from an unverified file
    # The rendered pages draw their CJK text from PP-OCRv5's dictionary file (any set's would do);
    # the recogniser is fed through its own dictionary, a file or the model's metadata.
    alphabet = default_model_dir() / "ppocr_keys_v5.txt"
    keys = dictionary(paths)
    prefix = "ppocrv5" if args.model_set == BUILTIN_MANIFEST else args.model_set
    args.out.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="quantize-") as tmp:
        work = Path(tmp)
        fp32 = {role: cpu_session(paths[role]) for role in ROLES}
        calibration = feeds = validation = None
        if args.precision == "int8":
            pages = (
                folder_pages(args.calib_dir, args.calib_pages)
                if args.calib_dir
                else rendered_pages(args.calib_pages, args.seed, alphabet)
            )
            feeds = collect_feeds(pages, fp32, keys)
            calibration = feeds.by_role
            val_pages = rendered_pages(args.val_pages, args.seed + 1, alphabet)
            validation = collect_feeds(val_pages, fp32, keys).by_role
        for role in roles:
            entry = manifest.entry(role)
            out = args.out / f"{prefix}_{role}_{args.precision}.onnx"
            record: dict[str, Any] = {
                "role": role,
                "name": f"{entry.name}_{args.precision}",
                "file": out.name,
                "licence": entry.licence,
                "source_package": entry.source_package,
                "precision": args.precision,
                "derived_from": {"file": entry.file, "sha256": entry.sha256},
            }
            prepared = prepare(role, paths[role], work)
            record["graph_rewrites"] = {"affine_folded_into_conv": prepared.folded, "opset": OPSET}
            if args.precision == "fp16":
                to_fp16(prepared.path, out)
                record["method"] = "fp16 (onnxruntime.transformers.float16, FP32 inputs and outputs)"
            else:
                assert calibration is not None and validation is not None and feeds is not None
                model = onnx.load(str(prepared.path))
                exclude = probability_softmaxes(model)
                reasons = dict.fromkeys(exclude, "output probabilities (confidences) stay FP32")
                for item in args.exclude:
                    wanted_role, _, node = item.partition(":")
                    if wanted_role == role:
                        exclude.append(node)
                        reasons[node] = "--exclude"
                if args.method == "static" and args.float_stem > 0:
                    for node in stem(model, args.float_stem):
                        if node not in reasons:
                            exclude.append(node)
                            reasons[node] = f"stem (first {args.float_stem:.0%} of nodes): see STEM_SHARE"
                reference, _ = run_all(fp32[role], validation[role])
                search_report: list[dict[str, Any]] = []
                if args.search and args.method == "static":
                    kept, search_report = search_exclusions(
                        prepared,
                        calibration[role],
                        validation[role],
                        reference,
                        base_exclude=exclude,
                        work=work,
                        calibrate=args.calibrate,
                    )
                    for node in kept:
                        reasons[node] = "kept in float by --search (see exclusion_search)"
                    exclude += kept
                quantize_int8(
                    prepared, calibration[role], exclude, out, method=args.method, calibrate=args.calibrate
                )
                result = measure(role, out, validation[role], reference)
                record["method"] = (
                    f"static QDQ, per-channel int8 weights, uint8 activations, {args.calibrate} ranges"
                    if args.method == "static"
                    else "dynamic (QOperator), per-channel int8 weights"
                )
                record["calibration"] = _calibration_description(args, feeds)
                record["excluded_nodes"] = [{"node": node, "why": reasons[node]} for node in exclude]
                record["validation"] = {
                    "pages": f"{args.val_pages} rendered pages, seed {args.seed + 1}",
                    **result.detail,
                }
                if search_report:
                    record["exclusion_search"] = search_report
                print(f"{role}: drift vs FP32 {result.detail}", file=sys.stderr)
            record["sha256"] = sha256_file(out)
            entries.append(record)
    written = {
        "name": f"{args.model_set.replace('_', '-')}-{args.precision}",
        "description": f"{manifest.name} models, {args.precision}, derived by quantize.onnx_int8 "
        f"with onnxruntime {ort.__version__} and onnx {onnx.__version__}",
        "models": entries,
    }
    (args.out / "manifest.json").write_text(
        json.dumps(written, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(
        f"wrote {len(entries)} model(s) and manifest.json to {args.out} "
        f"in {time.perf_counter() - started:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
