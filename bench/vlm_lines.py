"""A GGUF line reader on line crops: prompt and decode cost, drafting from the ONNX text, CER.

Usage::

    python -m bench.vlm_lines --model-dir DIR --crops DIR [--limit N] [--threads T] [--json OUT]

DIR holds a GGUF model, its mmproj and manifest.json (`python -m quantize.gguf`); the crops folder
holds line crops and `labels.jsonl` (`train.make_crops` cuts them from a page set's
ground truth; evaluation only). Each crop is given to the model as the recipe trained it
(`train.render.prepare_line`: height 28, white to a multiple of 28 px). The appliance's ONNX
recogniser reads every crop first; its text is the cascade's draft. Four variants take turns crop
by crop, so the machine's load falls on all of them alike:

- `plain`: no draft, the prompt's head computed again for every line;
- `head`: no draft, the text before the image kept in the cache (`reuse_prompt_head`);
- `hint`: the ONNX text as the draft, head kept;
- `hint_fresh`: the ONNX text as the draft, head computed again.

Per variant: median prompt ms (image encode + prefill) and decode ms per line, prompt tokens and
those reused, tokens per forward pass, the share of drafted tokens accepted, whitespace-free and
spaced CER against the labels (case-insensitive), and on how many lines its text equals `plain`'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import OnnxReaderConfig, VlmGgufConfig
from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from train.eval_lines import cer as line_cer
from train.make_crops import read_crops
from train.render import prepare_line

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {"draft": {"source": "none"}, "reuse_prompt_head": False},
    "head": {"draft": {"source": "none"}, "reuse_prompt_head": True},
    "hint": {"draft": {"source": "ocr_hint"}, "reuse_prompt_head": True},
    "hint_fresh": {"draft": {"source": "ocr_hint"}, "reuse_prompt_head": False},
}


@dataclass
class VariantRun:
    """What one variant did over the crops."""

    prompt_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    generated: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    texts: list[str] = field(default_factory=list)


def engine_for(model_dir: Path, threads: int, settings: dict[str, Any]) -> VlmGgufEngine:
    config = VlmGgufConfig.model_validate(
        {"model_dir": model_dir, "device": "auto", "threads": threads, "image_max_side": 0, **settings}
    )
    return VlmGgufEngine(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--crops", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, dest="json_out")
    args = parser.parse_args()

    crops = [(crop, text) for _, crop, text in read_crops(args.crops, args.limit)]
    reader = OnnxLineReader(OnnxReaderConfig(provider="cpu"))
    started = time.perf_counter()
    hints = [" ".join(line.text for line in reader.read(image).lines) for image, _ in crops]
    onnx_s = time.perf_counter() - started
    reader.close()
    engines = {
        name: engine_for(args.model_dir, args.threads, settings) for name, settings in VARIANTS.items()
    }
    runs = {name: VariantRun() for name in VARIANTS}
    for (image, _), hint in zip(crops, hints, strict=True):
        line = prepare_line(image)  # resized and padded with white: the crop's BGR order stays
        for name, engine in engines.items():
            page = engine.read(line, hint=hint)
            details = page.details["vlm_gguf"]
            run = runs[name]
            run.prompt_ms.append(details["prompt_ms"])
            run.decode_ms.append(details["decode_ms"])
            run.prompt_tokens += details["prompt_tokens"]
            run.reused_tokens += details["prompt_tokens_reused"]
            assert engine.last_generation is not None
            stats = engine.last_generation.stats
            run.generated += stats.generated
            run.passes += stats.steps
            run.drafted += stats.drafted
            run.accepted += stats.accepted
            run.texts.append(" ".join(text_line.text for text_line in page.lines))
    for engine in engines.values():
        engine.close()

    truths = [text for _, text in crops]

    def cer(texts: list[str], spaced: bool) -> float:
        return line_cer(list(zip(truths, texts, strict=True)), spaced)

    report: dict[str, Any] = {
        "lines": len(crops),
        "onnx": {"cer": cer(hints, False), "cer_spaced": cer(hints, True), "seconds": onnx_s},
    }
    print(
        f"{len(crops)} lines; ONNX reader (the drafts): CER {report['onnx']['cer']:.2%} / "
        f"{report['onnx']['cer_spaced']:.2%} spaced, {onnx_s / len(crops) * 1000:.1f} ms a line"
    )
    print("variant     prompt ms  decode ms  prompt tok  reused  tok/pass  accepted  CER     spaced  same")
    for name, run in runs.items():
        lines = len(crops)
        same = sum(a == b for a, b in zip(run.texts, runs["plain"].texts, strict=True))
        figures = {
            "prompt_ms_median": statistics.median(run.prompt_ms),
            "decode_ms_median": statistics.median(run.decode_ms),
            "prompt_tokens_per_line": run.prompt_tokens / lines,
            "reused_tokens_per_line": run.reused_tokens / lines,
            "tokens_per_pass": run.generated / max(run.passes, 1),
            "accepted_share": run.accepted / run.drafted if run.drafted else None,
            "cer": cer(run.texts, False),
            "cer_spaced": cer(run.texts, True),
            "same_as_plain": same,
        }
        report[name] = figures
        accepted = "-" if figures["accepted_share"] is None else f"{figures['accepted_share']:.0%}"
        print(
            f"{name:<11} {figures['prompt_ms_median']:9.1f} {figures['decode_ms_median']:10.1f} "
            f"{figures['prompt_tokens_per_line']:11.1f} {figures['reused_tokens_per_line']:7.1f} "
            f"{figures['tokens_per_pass']:9.2f} {accepted:>9} {figures['cer']:6.2%} "
            f"{figures['cer_spaced']:7.2%}  {same}/{lines}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
