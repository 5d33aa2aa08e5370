"""Does drafting change what a quantized VLM writes? Token agreement and CER, drafted vs one token at a time.

On F32 models batched verification gives the same argmax as one-token decoding (the tests hold
this exactly). On quantized weights llama.cpp may round a batch differently from a single token
(llama.cpp issues #25618, #27407), so a drafted generation can part from the plain one. This
measures how often and how far, for each fixture family at Q8_0 and Q4_K_M (on the CPU, or with
`--device gpu` fully offloaded on a CUDA build, where batches take other kernels than one token):

    .venv/bin/python -m bench.vlm_agreement [--pages 20] [--tokens 64] [--device cpu|gpu] [--json OUT]

For each page: the plain greedy tokens; then the same page drafted from those very tokens (every
draft right: the longest verification batches) and from the family's draft model. Reported: pages
whose drafted output equals the plain one, the mean share of tokens before the first difference,
and the character error rate of the drafted text against the plain text.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz.distance import Levenshtein

from appliance.config import VlmGgufConfig
from appliance.engines.gguf_manifest import write_vlm_manifest
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from quantize.gguf import quantize_gguf

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vlm"
FAMILIES = ("qwen2vl", "smolvlm", "paddleocr_vl")
QUANTS = ("F32", "Q8_0", "Q4_K_M")


def _model_set(family: str, quant: str, work: Path) -> Path:
    """The family's fixture set with its text model and draft quantized (the mmproj stays F32)."""
    source = FIXTURES / family
    if quant == "F32":
        return source
    folder = work / f"{family}-{quant}"
    folder.mkdir()
    shutil.copy(source / "mmproj-f32.gguf", folder / "mmproj.gguf")
    quantize_gguf(source / "model-f32.gguf", folder / "model.gguf", quant)
    quantize_gguf(source / "draft-f32.gguf", folder / "draft.gguf", quant)
    write_vlm_manifest(
        folder / "manifest.json",
        name=f"{family}-{quant}",
        family=family,
        files={role: folder / f"{role}.gguf" for role in ("model", "mmproj", "draft")},
    )
    return folder


def _engine(folder: Path, source: str, tokens: int, device: str) -> VlmGgufEngine:
    return VlmGgufEngine(
        VlmGgufConfig.model_validate(
            {
                "model_dir": folder,
                "device": device,
                "threads": 1,
                "image_max_side": 128,
                "max_tokens_per_page": tokens,
                "repetition": {"min_span": 4 * tokens},  # measure whole generations, loops included
                "draft": {"source": source, "k_max": 16},
            }
        )
    )


def _prefix_share(first: list[int], second: list[int]) -> float:
    same = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        same += 1
    return same / max(len(first), 1)


def measure(
    family: str, quant: str, pages: int, tokens: int, work: Path, *, device: str = "cpu"
) -> dict[str, Any]:
    folder = _model_set(family, quant, work)
    plain_engine = _engine(folder, "none", tokens, device)
    hinted = _engine(folder, "ocr_hint", tokens, device)
    drafted = _engine(folder, "model", tokens, device)
    rows: dict[str, list[tuple[bool, float, float]]] = {"own_tokens": [], "draft_model": []}
    acceptance: dict[str, list[float]] = {"own_tokens": [], "draft_model": []}
    try:
        for seed in range(pages):
            page = np.random.default_rng(1000 + seed).integers(0, 256, (96, 128, 3), dtype=np.uint8)
            plain_engine.read(page)
            assert plain_engine.last_generation is not None
            plain = list(plain_engine.last_generation.tokens)
            plain_text = plain_engine.text_of(plain)
            for name, engine, hint_tokens in (("own_tokens", hinted, plain), ("draft_model", drafted, None)):
                result = engine.read(page, hint_tokens=hint_tokens)
                assert engine.last_generation is not None
                out = list(engine.last_generation.tokens)
                cer = Levenshtein.distance(engine.text_of(out), plain_text) / max(len(plain_text), 1)
                rows[name].append((out == plain, _prefix_share(plain, out), cer))
                rate = result.details["vlm_gguf"]["acceptance_rate"]
                if rate is not None:
                    acceptance[name].append(rate)
    finally:
        for engine in (plain_engine, hinted, drafted):
            engine.close()
    summary: dict[str, Any] = {
        "family": family,
        "quant": quant,
        "pages": pages,
        "tokens": tokens,
        "device": device,
    }
    for name, values in rows.items():
        summary[name] = {
            "identical_pages": sum(1 for same, _, _ in values if same),
            "mean_prefix_share": round(float(np.mean([share for _, share, _ in values])), 4),
            "cer_vs_plain": round(float(np.mean([cer for _, _, cer in values])), 4),
            "acceptance": round(float(np.mean(acceptance[name])), 4) if acceptance[name] else None,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="vlm-agreement-") as work:
        print(
            f"{'family':<13} {'quant':<7} {'draft':<12} {'identical':>9}"
            f" {'prefix':>7} {'CER':>7} {'accept':>7}"
        )
        for family in FAMILIES:
            for quant in QUANTS:
                summary = measure(family, quant, args.pages, args.tokens, Path(work), device=args.device)
                results.append(summary)
                for name in ("own_tokens", "draft_model"):
                    row = summary[name]
                    accept = "-" if row["acceptance"] is None else f"{row['acceptance']:.3f}"
                    print(
                        f"{family:<13} {quant:<7} {name:<12} {row['identical_pages']:>4}/{args.pages:<4}"
                        f" {row['mean_prefix_share']:>7.3f} {row['cer_vs_plain']:>7.4f} {accept:>7}"
                    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
