"""The engine.ppocr_onnx options the GPU benchmarks share: fixed shapes' sizes and cuBLAS's workspace."""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--widths, --det-shares and --cublas-workspace, read back by engine_settings."""
    parser.add_argument("--widths", help="engine.ppocr_onnx.fixed_line_widths, e.g. 640,1280,3200")
    parser.add_argument("--det-shares", help="engine.ppocr_onnx.fixed_detector_shares, e.g. 0.5,1.0")
    parser.add_argument(
        "--cublas-workspace",
        help="engine.ppocr_onnx.cublas_workspace_config, e.g. :4096:8; null: cuBLAS's default "
        "(unset: the appliance's default)",
    )


def engine_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The engine.ppocr_onnx keys the options above set; the ones left out keep their defaults."""
    settings: dict[str, Any] = {}
    if args.widths:
        settings["fixed_line_widths"] = tuple(int(width) for width in args.widths.split(","))
    if args.det_shares:
        settings["fixed_detector_shares"] = tuple(float(share) for share in args.det_shares.split(","))
    if args.cublas_workspace is not None:
        value = args.cublas_workspace
        settings["cublas_workspace_config"] = None if value.lower() == "null" else value
    return settings
