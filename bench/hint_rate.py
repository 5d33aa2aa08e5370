"""How often the ONNX engine's text disagrees with the ground truth, per token and per character.

Usage: python -m bench.hint_rate [--config FILE] [--limit N] [--json OUT] DATASET_DIR [...]

The VLM benchmark (bench/vlm_gpu_bench.py) drafts from the ONNX engine's text; a hint helps only
where it says what the VLM writes, so the rate at which the hint disagrees with a correct reading
sets how much of it a perfect VLM would accept. Per page, the engine's lines and the GT lines are
both put in the same geometric order (bench.scoring.geo_order), joined with newlines (case-folded
where the set is scored case-insensitively) and aligned by Levenshtein distance:

- per token: with a byte-level BPE tokenizer read from a GGUF (default: the qwen2vl test
  fixture's 1,024-token vocabulary, shorter pieces than a real 151k Qwen vocabulary, so this
  overstates the rate a real tokenizer would see), distance / GT tokens;
- per character (whitespace kept, as a model writes it): distance / GT characters.

Rates are micro-averaged over all pages. The data is read in place and never copied.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rapidfuzz.distance import Levenshtein

from appliance.config import AppConfig, load_config
from appliance.engines.factory import build_engine
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from bench.ocr_bench import load_dataset, run_ours
from bench.scoring import TextLine, geo_order

DEFAULT_TOKENIZER = Path("tests/fixtures/vlm/qwen2vl/model-f32.gguf")


def page_text(lines: list[TextLine], case_insensitive: bool) -> str:
    text = "\n".join(line.text for line in geo_order(lines))
    return text.casefold() if case_insensitive else text


def page_texts(
    datasets: list[Path], limit: int | None = None, config_path: Path | None = None
) -> dict[str, list[dict[str, str]]]:
    """Each set's pages as {"gt": its text, "hint": the ONNX engine's text}, both in geometric order."""
    config = load_config(config_path) if config_path else AppConfig()
    engine = build_engine(config.engine)
    processor = DocumentProcessor(engine, Rasterizer(config.rasterize))
    sets: dict[str, list[dict[str, str]]] = {}
    try:
        for folder in datasets:
            pages, case_insensitive = load_dataset(folder, limit)
            sets[folder.name] = []
            for page in pages:
                lines, _ = run_ours(processor, page.image)
                gt, hint = page_text(page.lines, case_insensitive), page_text(lines, case_insensitive)
                sets[folder.name].append({"gt": gt, "hint": hint})
    finally:
        engine.close()
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hint_rate", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--config", type=Path, help="appliance YAML config (default: built-in defaults)")
    parser.add_argument("--limit", type=int, help="only the first N pages of each set")
    parser.add_argument(
        "--tokenizer", type=Path, default=DEFAULT_TOKENIZER, help="GGUF whose vocabulary is used"
    )
    parser.add_argument("--json", type=Path, dest="json_out", help="write the rates to this file")
    args = parser.parse_args(argv)

    sets = page_texts(args.datasets, args.limit, args.config)
    # llama_cpp loads only here: the ONNX path of the appliance does not need it.
    from appliance.engines.vlm_gguf.runtime import TextModel

    tokenizer = TextModel(args.tokenizer, n_gpu_layers=0, vocab_only=True)
    report: dict[str, Any] = {"tokenizer": str(args.tokenizer), "datasets": {}}
    totals = {"token_errors": 0, "gt_tokens": 0, "char_errors": 0, "gt_chars": 0}
    for name, pages in sets.items():
        counts = dict.fromkeys(totals, 0)
        for page in pages:
            gt, hint = page["gt"], page["hint"]
            gt_tokens, hint_tokens = tokenizer.tokenize(gt), tokenizer.tokenize(hint)
            counts["token_errors"] += Levenshtein.distance(gt_tokens, hint_tokens)
            counts["gt_tokens"] += len(gt_tokens)
            counts["char_errors"] += Levenshtein.distance(gt, hint)
            counts["gt_chars"] += len(gt)
        for key, value in counts.items():
            totals[key] += value
        report["datasets"][name] = {
            "pages": len(pages),
            **counts,
            "token_rate": counts["token_errors"] / max(counts["gt_tokens"], 1),
            "char_rate": counts["char_errors"] / max(counts["gt_chars"], 1),
        }
        print(f"{name}: {json.dumps(report['datasets'][name])}", flush=True)
    tokenizer.close()
    report["all"] = {
        **totals,
        "token_rate": totals["token_errors"] / max(totals["gt_tokens"], 1),
        "char_rate": totals["char_errors"] / max(totals["gt_chars"], 1),
    }
    print(f"all: {json.dumps(report['all'])}")
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
