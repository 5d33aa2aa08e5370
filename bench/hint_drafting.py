"""What drafting from the ONNX engine's real text would buy a VLM that reads every page right.

Usage: python -m bench.hint_drafting [--cache FILE] [--limit N] [--tokenizer GGUF] DATASET_DIR [...]

The GPU benchmark drafts from a synthetic script corrupted at the measured token rate; this
drafts from the ONNX engine's own reading of real pages. For every page the "VLM" writes the
ground truth (a perfect reader, tokenized with --tokenizer), and the engine's draft source for
text hints (`TextHintDraft`, the one the cascade uses) proposes from the ONNX text, both in the
geometric line order of bench.hint_rate. Each step verifies the proposal as greedy decoding does
(drafts kept up to the first wrong one, plus the token the model writes itself), so this counts
exactly the steps and batch sizes a decode of that page would take; no model runs.

Reported per set, for fixed draft lengths and for the engine's rule (draft_length.py): acceptance,
tokens per step, and the speed relative to no drafting under two cost models of a step over b
tokens: the H200's measured verification costs and this 2-core CPU's with the small random model
(bench/README.md), each plus the loop's own work per written token (0.2 and 0.07 of a one-token
step). --cache keeps the ONNX texts of the pages (derived from
the data: keep the file outside the repository) so later runs skip the OCR.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.engines.vlm_gguf.draft_length import DraftLength
from appliance.engines.vlm_gguf.drafts import DraftSource, TextHintDraft
from bench.hint_rate import DEFAULT_TOKENIZER, page_texts

# Verifying k drafts (k + 1 tokens) relative to one token, index k: Q8_0, 8 GB, on an H200, and on
# this 2-core CPU with the small random model (152k vocabulary, medians of three runs); both from
# bench/vlm_gpu_bench.py (bench/README.md). A real 1B model on a CPU verifies more cheaply per token
# than the small one (its weights, read once per batch, dominate): the CPU curve is pessimistic.
H200_VERIFY = (
    *(1.0, 1.08, 1.21, 1.28, 1.40, 1.50, 1.61, 1.70, 2.31),
    *(2.44, 2.55, 2.60, 2.63, 2.75, 2.80, 2.86, 3.15),
)
CPU_VERIFY = (
    *(1.0, 1.18, 1.64, 2.09, 2.86, 3.31, 3.95, 4.19, 4.93),
    *(5.18, 6.12, 6.25, 7.47, 7.71, 8.72, 8.78, 9.78),
)
COST_MODELS: dict[str, tuple[Callable[[int], float], float]] = {
    # name: (cost of a step over b tokens, the loop's own work per written token), in one-token
    # steps. The loop's work: on the H200 1 / decode rate less the one-token verify time (1.85 - 1.53
    # ms, bench/vlm_gpu_bench.py); here its probability and argmax (~0.1 ms, bench.probability_cost)
    # of the small model's 1.45 ms step
    "h200": (lambda batch: H200_VERIFY[min(batch, len(H200_VERIFY)) - 1], 0.2),
    "cpu": (lambda batch: CPU_VERIFY[min(batch, len(CPU_VERIFY)) - 1], 0.07),
}
FIXED_K = (1, 2, 4, 6, 8, 12, 16)


@dataclass
class Tally:
    """Steps and batch sizes of decoding the pages with one draft policy."""

    written: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    batches: list[int] = field(default_factory=list)  # tokens fed per step

    def add(self, other: Tally) -> None:
        self.written += other.written
        self.steps += other.steps
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.batches += other.batches


def decode_page(
    target: Sequence[int],
    draft: DraftSource,
    *,
    choose_k: Callable[[], int],
    observe: Callable[[int, int, int], None] | None = None,
) -> Tally:
    """Greedy decoding of `target` (what the model writes) with drafts from `draft`, step by step."""
    generated = list(target[:1])  # the first token comes with the prompt's logits
    tally = Tally(written=len(target))
    while len(generated) < len(target):
        k = min(choose_k(), len(target) - len(generated) - 1)
        proposal = draft.propose(generated, k) if k > 0 else []
        accepted = 0
        for proposed, actual in zip(proposal, target[len(generated) :], strict=False):
            if proposed != actual:
                break
            accepted += 1
        generated = list(target[: len(generated) + accepted + 1])
        tally.steps += 1
        tally.drafted += len(proposal)
        tally.accepted += accepted
        tally.batches.append(1 + len(proposal))
        if observe is not None:
            observe(len(proposal), accepted, 1 + len(proposal))
    return tally


def _always(k: int) -> Callable[[], int]:
    return lambda: k


def speed(tally: Tally, model: str) -> float:
    """Tokens per unit of time relative to decoding one token a step, under a cost model."""
    cost, per_token = COST_MODELS[model]
    drafted_time = sum(cost(batch) for batch in tally.batches) + per_token * tally.written
    plain_time = (cost(1) + per_token) * tally.written
    return plain_time / drafted_time if drafted_time else 1.0


def run_policies(
    pages: list[dict[str, str]],
    tokenize: Callable[[str], list[int]],
    make_draft: Callable[[str], DraftSource],
) -> dict[str, dict[str, Tally]]:
    """Every policy over every page: {policy: {cost model: tally}} (fixed k ignores the model)."""
    targets = [(tokenize(page["gt"]), page["hint"]) for page in pages]
    results: dict[str, dict[str, Tally]] = {}
    for k in FIXED_K:
        total = Tally()
        for target, hint in targets:
            total.add(decode_page(target, make_draft(hint), choose_k=_always(k)))
        results[f"k={k}"] = dict.fromkeys(COST_MODELS, total)
    results["rule"] = {}
    for model, (cost, _) in COST_MODELS.items():
        total = Tally()
        for target, hint in targets:
            total.add(_decode_with_rule(target, make_draft(hint), cost))
        results["rule"][model] = total
    return results


def _decode_with_rule(target: list[int], draft: DraftSource, cost: Callable[[int], float]) -> Tally:
    """One page with the engine's draft-length rule, learning acceptance anew as a page does."""
    lengths = DraftLength(4, 1, 16, batch_cost=cost)

    def observe(proposed: int, accepted: int, batch: int) -> None:
        lengths.observe(proposed, accepted, batch, cost(batch))

    return decode_page(target, draft, choose_k=lambda: lengths.k, observe=observe)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hint_drafting", description=__doc__.splitlines()[0]
    )
    parser.add_argument("datasets", nargs="*", type=Path)
    parser.add_argument(
        "--cache", type=Path, help="JSON of the pages' texts: read if it exists, else written"
    )
    parser.add_argument("--limit", type=int, help="only the first N pages of each set")
    parser.add_argument("--config", type=Path, help="appliance YAML config (default: built-in defaults)")
    parser.add_argument(
        "--tokenizer", type=Path, default=DEFAULT_TOKENIZER, help="GGUF whose vocabulary is used"
    )
    parser.add_argument("--json", type=Path, dest="json_out")
    # TextHintDraft's alignment, to compare settings (default: the engine's own).
    parser.add_argument("--tails", help="long tails looked up anywhere, bytes, e.g. 48,24,12,6")
    parser.add_argument("--near-tails", help="short tails looked up near the expected offset, e.g. 4,2,1")
    parser.add_argument("--near", type=int, help="how near, in bytes")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    for name in ("tails", "near_tails"):
        if getattr(args, name):
            options[name] = tuple(int(size) for size in getattr(args, name).split(","))
    if args.near is not None:
        options["near"] = args.near
    if args.cache and args.cache.exists():
        sets = json.loads(args.cache.read_text(encoding="utf-8"))
    else:
        if not args.datasets:
            parser.error("give DATASET_DIR(s), or a --cache written by an earlier run")
        sets = page_texts(args.datasets, args.limit, args.config)
        if args.cache:
            args.cache.write_text(json.dumps(sets, ensure_ascii=False) + "\n", encoding="utf-8")

    from appliance.engines.vlm_gguf.runtime import TextModel

    tokenizer = TextModel(args.tokenizer, n_gpu_layers=0, vocab_only=True)
    report: dict[str, Any] = {"tokenizer": str(args.tokenizer), "sets": {}}
    try:
        for name, pages in sets.items():
            results = run_policies(
                pages,
                tokenizer.tokenize,
                lambda hint: TextHintDraft(hint, tokenizer.piece, tokenizer.tokenize, **options),
            )
            rows = {}
            print(f"{name}: {len(pages)} pages")
            print(f"  {'policy':<6} {'accept':>7} {'tok/step':>8} {'H200 x':>7} {'CPU x':>6}")
            for policy, by_model in results.items():
                tally = by_model["h200"]
                acceptance = tally.accepted / tally.drafted if tally.drafted else 0.0
                row = {
                    "acceptance": round(acceptance, 4),
                    "tokens_per_step": round(tally.written / max(tally.steps, 1), 3),
                    "speedup_h200": round(speed(by_model["h200"], "h200"), 3),
                    "speedup_cpu": round(speed(by_model["cpu"], "cpu"), 3),
                }
                rows[policy] = row
                print(
                    f"  {policy:<6} {row['acceptance']:>7.3f} {row['tokens_per_step']:>8.2f}"
                    f" {row['speedup_h200']:>7.2f} {row['speedup_cpu']:>6.2f}"
                )
            report["sets"][name] = {"pages": len(pages), "policies": rows}
    finally:
        tokenizer.close()
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
