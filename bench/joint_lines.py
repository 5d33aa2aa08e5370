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
rule can know, and `either_by_stretch` the best text made of the two reads' shared stretches and,
where they differ, either read's stretch (the bound of a rule that merged reads instead of
choosing one). For each rule, `lost` says where it falls short of `either`: lines where it kept
the ONNX text and the VLM's was better (`kept_first`), and where it took the VLM's and the ONNX
text was better (`took_second`), with the edits each cost. Printed: CER whitespace-free and
spaced, case aside (`train.eval_lines.cer`), and on how many lines the read kept is not the ONNX
text (`not_onnx`); for each `--together` size the
VLM's milliseconds a line (its reads and scoring, and of it decoding), read again without scoring
with `--unscored`, and the card's memory at most (nvidia-smi, on a GPU).

`--save-onnx` writes the ONNX reads with their evidence (a pickle) and `--onnx` reads them back, so a
GPU machine needs neither onnxruntime nor the ONNX models to measure the VLM.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import OnnxReaderConfig, VlmGgufConfig
from appliance.engines.base import PageText
from appliance.engines.details import ReadFigures
from appliance.engines.text_lines import make_line
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.lines import Line
from appliance.pipeline.cascade import JOINT_EVIDENCE_CLASSES, line_read_again, max_changes_for, takes_second
from bench.gpu_memory import MemorySampler
from train.eval_lines import cer, edit_count
from train.make_crops import read_crops

RULES = ("second", "more_confident", "joint")
VLM = VlmGgufEngine.name


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
    """The lines' texts, confidences and likelihoods (bound methods of their StepEvidence: picklable)."""
    path.write_bytes(pickle.dumps([(line.text, line.char_confidences, line.likelihood) for line in lines]))


def load_onnx(path: Path, crops: list[tuple[str, np.ndarray, str]]) -> list[Line]:
    """The lines `save_onnx` wrote (a file this bench wrote itself: pickle runs what it holds)."""
    saved = pickle.loads(path.read_bytes())
    if len(saved) != len(crops):
        raise SystemExit(f"{path} holds {len(saved)} reads, the crops are {len(crops)}")
    lines = []
    for (text, confidences, likelihood), (_, crop, _) in zip(saved, crops, strict=True):
        height, width = crop.shape[:2]
        line = make_line(text, confidences, (0.0, 0.0, float(width), float(height)), "onnx_reader")
        line.likelihood = likelihood
        lines.append(line)
    return lines


def stretch_merges(first: str, second: str, most: int = 8) -> list[str]:
    """Every text of the two reads' shared stretches and either read's stretch where they differ.

    Where they differ in more than `most` stretches, only the two reads themselves (2**most texts
    at most).
    """
    opcodes = difflib.SequenceMatcher(None, first, second, autojunk=False).get_opcodes()
    differing = [opcode for opcode in opcodes if opcode[0] != "equal"]
    if len(differing) > most:
        return [first, second]
    merges = []
    for picks in itertools.product((False, True), repeat=len(differing)):
        chosen = iter(picks)
        merges.append(
            "".join(
                first[i1:i2] if tag == "equal" or not next(chosen) else second[j1:j2]
                for tag, i1, i2, j1, j2 in opcodes
            )
        )
    return merges


def losses(truths: list[str], firsts: list[str], seconds: list[str], kept: list[str]) -> dict[str, list[int]]:
    """Lines and edits a rule's choice lost against the better read: kept the first, took the second."""
    lost = {"kept_first": [0, 0], "took_second": [0, 0]}
    for truth, first, second, chosen in zip(truths, firsts, seconds, kept, strict=True):
        edits = edit_count([(truth, chosen)]) - min(
            edit_count([(truth, first)]), edit_count([(truth, second)])
        )
        if edits > 0:
            side = lost["kept_first" if chosen == first else "took_second"]
            side[0], side[1] = side[0] + 1, side[1] + edits
    return lost


def read_with_vlm(
    args: argparse.Namespace,
    crops: list[tuple[str, np.ndarray, str]],
    hints: list[str],
    together: int,
    scored: bool,
) -> tuple[list[PageText], dict[str, float]]:
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
    decode = sum(float(page.details[VLM]["decode_ms"]) for page in pages)
    return pages, {"ms_a_line": 1000 * seconds / len(crops), "decode_ms_a_line": decode / len(crops)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--crops", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--together", type=int, nargs="+", default=[8])
    parser.add_argument("--unscored", action="store_true", help="also time each size's reads without scoring")
    parser.add_argument("--save-onnx", type=Path, help="write the ONNX reads and their evidence here")
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
    pages: list[PageText] = []
    for size in args.together:
        read, timings[f"{size} together"] = read_with_vlm(args, crops, hints, size, True)
        pages = pages or read  # the rules are applied to the first size's reads
        if args.unscored:
            _, timings[f"{size} together, unscored"] = read_with_vlm(args, crops, hints, size, False)
    max_changes = max_changes_for("auto", VlmGgufEngine)
    gpu_peak = sampler.stop() if sampler is not None else None

    truths = [truth for _, _, truth in crops]
    kept: dict[str, list[str]] = {"onnx": hints, "vlm": []}
    kept.update({rule: [] for rule in RULES})
    for first, page in zip(firsts, pages, strict=True):
        figures = ReadFigures.of(page.details, VLM)
        text = " ".join(line.text for line in page.lines).strip()
        kept["vlm"].append(text)
        usable = figures is not None and not figures.cut_short and bool(text)
        again = line_read_again(page.lines, first, VLM) if usable else None
        for rule in RULES:
            taken = again is not None and takes_second(first, again, rule, max_changes, figures)
            kept[rule].append(again.text if taken and again is not None else first.text)
    kept["either"] = [
        min(pair, key=lambda read: edit_count([(truth, read)]))
        for truth, pair in zip(truths, zip(kept["onnx"], kept["vlm"], strict=True), strict=True)
    ]
    kept["either_by_stretch"] = [
        min(stretch_merges(first, second), key=lambda read: edit_count([(truth, read)]))
        for truth, first, second in zip(truths, kept["onnx"], kept["vlm"], strict=True)
    ]
    report: dict[str, dict[str, Any]] = {
        rule: {
            "cer": round(cer(list(zip(truths, texts, strict=True))), 5),
            "cer_spaced": round(cer(list(zip(truths, texts, strict=True)), spaced=True), 5),
            "not_onnx": sum(read != onnx_read for read, onnx_read in zip(texts, hints, strict=True)),
        }
        for rule, texts in kept.items()
    }
    for rule in RULES:
        lines_and_edits = losses(truths, kept["onnx"], kept["vlm"], kept[rule])
        report[rule]["lost"] = {side: {"lines": n, "edits": e} for side, (n, e) in lines_and_edits.items()}
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
