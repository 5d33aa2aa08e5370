"""Both readers' scores on line crops: each reader, the read each `cascade.keep` rule keeps, the bound.

Usage::

    python -m bench.joint_lines --model-dir DIR --crops CROPS [--limit N] [--threads T]
        [--device auto|cpu|gpu] [--together 8] [--json OUT]

CROPS is `train.make_crops` output (line crops cut from a page set's ground-truth boxes, with
their truths); DIR a `qwen2vl_line` GGUF model. The ONNX recogniser (`onnx_reader`, PP-OCRv6 small)
reads every crop keeping its step evidence; the VLM reads them `--together` at a time with the
ONNX text as each line's hint, scoring both texts (`score_hints`). Each keep rule then picks one
read per line as the cascade does (`takes_second`, `cascade.max_changes: auto`): `second`,
`more_confident` and `joint`; `either` is the better of the two reads for each line, which no
rule can know. Printed: CER whitespace-free and spaced, case aside (`train.eval_lines.cer`), and
on how many lines the read kept is not the ONNX text (`not_onnx`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from appliance.config import OnnxReaderConfig, VlmGgufConfig
from appliance.engines.details import ReadFigures
from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader
from appliance.engines.text_lines import make_line
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.lines import Line
from appliance.pipeline.cascade import JOINT_EVIDENCE_CLASSES, line_read_again, max_changes_for, takes_second
from train.eval_lines import cer, edit_count
from train.make_crops import read_crops

RULES = ("second", "more_confident", "joint")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--crops", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--together", type=int, default=8)
    parser.add_argument("--json", type=Path, dest="json_out")
    args = parser.parse_args()

    crops = read_crops(args.crops, args.limit)
    onnx = OnnxLineReader(OnnxReaderConfig(provider="cpu"))
    if not onnx.keep_step_evidence(JOINT_EVIDENCE_CLASSES):
        raise SystemExit("the ONNX recogniser keeps no step evidence")
    firsts: list[Line] = []
    for _, crop, _ in crops:
        lines = onnx.read(crop).lines
        height, width = crop.shape[:2]
        firsts.append(
            lines[0] if lines else make_line("", [], (0.0, 0.0, float(width), float(height)), onnx.name)
        )
    onnx.close()

    vlm = VlmGgufEngine(
        VlmGgufConfig.model_validate(
            {
                "model_dir": args.model_dir,
                "device": args.device,
                "threads": args.threads,
                "lines_together": args.together,
                "image_max_side": 0,
            }
        )
    )
    if not vlm.score_hints(True):
        raise SystemExit(f"{args.model_dir} is not a line reader: it scores no hints")
    max_changes = max_changes_for("auto", vlm)
    pages = vlm.read_lines([crop for _, crop, _ in crops], hints=[first.text for first in firsts])
    vlm.close()

    truths = [truth for _, _, truth in crops]
    kept: dict[str, list[str]] = {"onnx": [first.text for first in firsts], "vlm": []}
    kept.update({rule: [] for rule in RULES})
    for first, page in zip(firsts, pages, strict=True):
        figures = ReadFigures.of(page.details, vlm.name)
        text = " ".join(line.text for line in page.lines).strip()
        kept["vlm"].append(text)
        usable = figures is not None and not figures.cut_short and bool(text)
        again = line_read_again(page.lines, first, vlm.name) if usable else None
        for rule in RULES:
            taken = again is not None and takes_second(first, again, rule, max_changes, figures)
            kept[rule].append(again.text if taken and again is not None else first.text)
    kept["either"] = [
        min(pair, key=lambda read: edit_count([(truth, read)]))
        for truth, pair in zip(truths, zip(kept["onnx"], kept["vlm"], strict=True), strict=True)
    ]
    report = {
        name: {
            "cer": round(cer(list(zip(truths, texts, strict=True))), 5),
            "cer_spaced": round(cer(list(zip(truths, texts, strict=True)), spaced=True), 5),
            "not_onnx": sum(read != onnx_read for read, onnx_read in zip(texts, kept["onnx"], strict=True)),
        }
        for name, texts in kept.items()
    }
    print(json.dumps({"crops": len(crops), "max_changes": max_changes, "reads": report}, indent=1))
    if args.json_out:
        rows = [
            {"truth": truth, **{name: texts[index] for name, texts in kept.items()}}
            for index, truth in enumerate(truths)
        ]
        args.json_out.write_text(json.dumps({"report": report, "lines": rows}, ensure_ascii=False), "utf-8")


if __name__ == "__main__":
    main()
