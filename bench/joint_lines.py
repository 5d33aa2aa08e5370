"""Both readers' scores on line crops: each reader, the read each `cascade.keep` rule keeps, the bound.

Usage::

    python -m bench.joint_lines --model-dir DIR --crops CROPS [--limit N] [--threads T]
        [--device auto|cpu|gpu] [--together 8 [32 ...]] [--unscored] [--onnx FILE] [--json OUT]
    python -m bench.joint_lines --crops CROPS --save-onnx FILE [--limit N]

CROPS is `train.make_crops` output (line crops cut from a page set's ground-truth boxes, with
their truths); DIR a `qwen2vl_line` GGUF model. The ONNX recogniser (`onnx_reader`, PP-OCRv6 small)
reads every crop keeping its step evidence; the VLM reads them `--together` at a time with the
ONNX text as each line's hint, scoring both texts (`score_hints`). Each keep rule then picks one
read per line as the cascade does (`takes_second`, `cascade.max_changes: auto`): `second`,
`more_confident` and `joint`; `either` is the better of the two reads for each line, which no
rule can know. Printed: CER whitespace-free and spaced, case aside (`train.eval_lines.cer`), and
on how many lines the read kept is not the ONNX text (`not_onnx`); for each `--together` size the
VLM's milliseconds a line (its reads and scoring, and of it decoding), read again without scoring
with `--unscored`, and the card's memory at most (nvidia-smi, on a GPU).

`--save-onnx` writes the ONNX reads with their evidence (npz) and `--onnx` reads them back, so a
GPU machine needs neither onnxruntime nor the ONNX models to measure the VLM.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import OnnxReaderConfig, VlmGgufConfig
from appliance.engines.details import ReadFigures
from appliance.engines.ppocr_onnx.step_evidence import StepEvidence
from appliance.engines.text_lines import make_line
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.lines import Line
from appliance.pipeline.cascade import JOINT_EVIDENCE_CLASSES, line_read_again, max_changes_for, takes_second
from bench.gpu_memory import MemorySampler
from train.eval_lines import cer, edit_count
from train.make_crops import read_crops

RULES = ("second", "more_confident", "joint")
_EVIDENCE = ("chars", "probabilities", "rest", "blank")


def onnx_lines(crops: list[tuple[str, np.ndarray, str]]) -> list[Line]:
    """Each crop's line as the ONNX recogniser reads it, its step evidence kept (an empty line if none)."""
    from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader  # not needed with --onnx

    reader = OnnxLineReader(OnnxReaderConfig(provider="cpu"))
    if not reader.keep_step_evidence(JOINT_EVIDENCE_CLASSES):
        raise SystemExit("the ONNX recogniser keeps no step evidence")
    lines = []
    for _, crop, _ in crops:
        read = reader.read(crop).lines
        height, width = crop.shape[:2]
        lines.append(
            read[0] if read else make_line("", [], (0.0, 0.0, float(width), float(height)), reader.name)
        )
    reader.close()
    return lines


def save_onnx(path: Path, lines: list[Line]) -> None:
    """The lines' texts, confidences and evidence, one array each over all lines, with their bounds."""
    evidence = [_evidence_of(line) for line in lines]
    steps = np.cumsum([0, *(len(e.blank) if e is not None else 0 for e in evidence)])
    chars = np.cumsum([0, *(len(line.char_confidences) for line in lines)])
    kept = [e for e in evidence if e is not None]
    arrays: dict[str, Any] = {
        "texts": np.array([line.text for line in lines]),
        "confidences": np.array([c for line in lines for c in line.char_confidences], dtype=np.float64),
        "char_bounds": chars,
        "step_bounds": steps,
        "has_evidence": np.array([e is not None for e in evidence]),
    }
    for name in _EVIDENCE:
        parts = [getattr(e, name) for e in kept]
        arrays[name] = np.concatenate(parts) if parts else np.zeros(0)
    np.savez_compressed(path, **arrays)


def load_onnx(path: Path, crops: list[tuple[str, np.ndarray, str]]) -> list[Line]:
    saved = np.load(path)
    if len(saved["texts"]) != len(crops):
        raise SystemExit(f"{path} holds {len(saved['texts'])} reads, the crops are {len(crops)}")
    lines = []
    for index, (_, crop, _) in enumerate(crops):
        height, width = crop.shape[:2]
        first, last = saved["char_bounds"][index : index + 2]
        confidences = saved["confidences"][first:last].tolist()
        line = make_line(
            str(saved["texts"][index]), confidences, (0.0, 0.0, float(width), float(height)), "onnx_reader"
        )
        if saved["has_evidence"][index]:
            start, end = saved["step_bounds"][index : index + 2]
            evidence = StepEvidence(*(saved[name][start:end] for name in _EVIDENCE))
            line.likelihood = evidence.log_likelihood
        lines.append(line)
    return lines


def _evidence_of(line: Line) -> StepEvidence | None:
    """The StepEvidence behind a line's likelihood (the bound method's object), if it has one."""
    owner = getattr(line.likelihood, "__self__", None)
    return owner if isinstance(owner, StepEvidence) else None


def read_with_vlm(
    args: argparse.Namespace,
    crops: list[tuple[str, np.ndarray, str]],
    hints: list[str],
    together: int,
    scored: bool,
) -> tuple[list[Any], dict[str, float], VlmGgufEngine]:
    """The VLM's PageText of each crop, read `together` at a time, and its milliseconds a line."""
    engine = VlmGgufEngine(
        VlmGgufConfig.model_validate(
            {
                "model_dir": args.model_dir,
                "device": args.device,
                "threads": args.threads,
                "lines_together": together,
                "image_max_side": 0,
            }
        )
    )
    if not engine.score_hints(scored):
        raise SystemExit(f"{args.model_dir} is not a line reader: it scores no hints")
    started = time.perf_counter()
    pages = engine.read_lines([crop for _, crop, _ in crops], hints=hints)
    seconds = time.perf_counter() - started
    engine.close()
    decode = sum(float(page.details[engine.name]["decode_ms"]) for page in pages)
    return pages, {"ms_a_line": 1000 * seconds / len(crops), "decode_ms_a_line": decode / len(crops)}, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--crops", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--together", type=int, nargs="+", default=[8])
    parser.add_argument("--unscored", action="store_true", help="also time each size's reads without scoring")
    parser.add_argument("--save-onnx", type=Path, help="write the ONNX reads and their evidence here (npz)")
    parser.add_argument("--onnx", type=Path, help="ONNX reads written by --save-onnx: no ONNX run")
    parser.add_argument("--json", type=Path, dest="json_out")
    args = parser.parse_args()
    if args.model_dir is None and args.save_onnx is None:
        parser.error("--model-dir is needed, unless only saving the ONNX reads (--save-onnx)")

    crops = read_crops(args.crops, args.limit)
    firsts = load_onnx(args.onnx, crops) if args.onnx else onnx_lines(crops)
    if args.save_onnx:
        save_onnx(args.save_onnx, firsts)
    if args.model_dir is None:
        print(json.dumps({"crops": len(crops), "saved": str(args.save_onnx)}))
        return
    hints = [first.text for first in firsts]
    sampler = MemorySampler(period=0.5) if args.device != "cpu" else None
    if sampler is not None:
        sampler.start()
    timings: dict[str, dict[str, float]] = {}
    pages: list[Any] = []
    name, max_changes = "vlm_gguf", None
    for size in args.together:
        read, timings[f"{size} together"], engine = read_with_vlm(args, crops, hints, size, True)
        if not pages:
            pages, name, max_changes = read, engine.name, max_changes_for("auto", engine)
        if args.unscored:
            _, timings[f"{size} together, unscored"], _ = read_with_vlm(args, crops, hints, size, False)
    gpu_peak = sampler.stop() if sampler is not None else None

    truths = [truth for _, _, truth in crops]
    kept: dict[str, list[str]] = {"onnx": hints, "vlm": []}
    kept.update({rule: [] for rule in RULES})
    for first, page in zip(firsts, pages, strict=True):
        figures = ReadFigures.of(page.details, name)
        text = " ".join(line.text for line in page.lines).strip()
        kept["vlm"].append(text)
        usable = figures is not None and not figures.cut_short and bool(text)
        again = line_read_again(page.lines, first, name) if usable else None
        for rule in RULES:
            taken = again is not None and takes_second(first, again, rule, max_changes, figures)
            kept[rule].append(again.text if taken and again is not None else first.text)
    kept["either"] = [
        min(pair, key=lambda read: edit_count([(truth, read)]))
        for truth, pair in zip(truths, zip(kept["onnx"], kept["vlm"], strict=True), strict=True)
    ]
    report = {
        rule: {
            "cer": round(cer(list(zip(truths, texts, strict=True))), 5),
            "cer_spaced": round(cer(list(zip(truths, texts, strict=True)), spaced=True), 5),
            "not_onnx": sum(read != onnx_read for read, onnx_read in zip(texts, hints, strict=True)),
        }
        for rule, texts in kept.items()
    }
    timing = {key: {k: round(v, 2) for k, v in value.items()} for key, value in timings.items()}
    summary = {"crops": len(crops), "max_changes": max_changes, "reads": report, "vlm": timing}
    print(json.dumps({**summary, "gpu_memory_peak_mib": gpu_peak}, indent=1))
    if args.json_out:
        rows = [
            {"truth": truth, **{rule: texts[index] for rule, texts in kept.items()}}
            for index, truth in enumerate(truths)
        ]
        args.json_out.write_text(json.dumps({**summary, "lines": rows}, ensure_ascii=False), "utf-8")


if __name__ == "__main__":
    main()
