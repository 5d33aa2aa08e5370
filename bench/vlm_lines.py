"""A GGUF line reader on line crops: prompt and decode cost, drafting from the ONNX text, CER.

Usage::

    python -m bench.vlm_lines --model-dir DIR --crops DIR [--limit N] [--threads T] [--json OUT]
        [--device auto|cpu|gpu] [--save-hints FILE | --hints FILE] [--min-confidence C]
        [--k-max N] [--extra-token-cost F] [--together N] [--unsure-only] [--max-changes auto|none|N]
    python -m bench.vlm_lines --crops DIR --save-hints FILE [--limit N]

DIR holds a GGUF model, its mmproj and manifest.json (`python -m quantize.gguf`); the crops folder
holds line crops and `labels.jsonl` (`train.make_crops` cuts them from a page set's
ground truth; evaluation only). Each crop goes to the engine as the appliance's cascade sends it; a
line reader's engine (`qwen2vl_line`) sizes it as the model was trained (height 28, white to a
multiple of 28 px: engines/vlm_gguf/line_image.py), and for any other family the crop is sized so
here first. The appliance's ONNX
recogniser reads every crop first; its text is the cascade's draft. Four variants take turns crop
by crop, so the machine's load falls on all of them alike:

- `plain`: no draft, the prompt's head computed again for every line;
- `head`: no draft, the text before the image kept in the cache (`reuse_prompt_head`);
- `hint`: the ONNX text as the draft, head kept;
- `hint_fresh`: the ONNX text as the draft, head computed again.

Per variant: median prompt ms (image encode + prefill), the image's part of it (its encode and
the feeding of its embeddings) and decode ms per line, prompt tokens and those reused, tokens per
forward pass, the share of drafted tokens accepted, whitespace-free and spaced CER against the
labels (case-insensitive), and on how many lines its text equals `plain`'s
(the JSON lists the first 50 that differ); the mean cost of a decoding pass and, with drafts, the
mean draft length. --k-max and --extra-token-cost set the drafting variants' `draft.k_max` and
`draft.extra_token_cost` (0: every pass costs alike, so each step drafts as far as k_max).

The cascade as `unit: lines` runs it: the lines whose ONNX confidence is below --min-confidence (the
cascade's default) take the VLM's text (`hint`; `keep: second`) as the cascade places it (single
spaced: `cascade.line_read_again`) where it changes no more than --max-changes characters, the rest
keep the ONNX text.
Reported: how many lines that is, the CER of the cascade against the ONNX text alone (all lines, and
the unsure ones), and over the unsure lines the decode time of `hint` against `head` (the drafting
speed-up: same kept head, same output). Then the cascade with `keep: more_confident`: an unsure line
takes the VLM's text only when the VLM's confidence in it (as the cascade computes it) is higher
than the ONNX line's (what `keep: auto`, the default, does with a VLM) and it changes no more
characters than --max-changes (`cascade.max_changes`; auto: a VLM's 3, none: any): how many lines
and the CER.

--together N adds `together`: the crops read N at a time side by side (`lines_together`,
`read_lines`: one pass writes a token of every line of the group, no drafts), each group right
after its crops were read one by one by the other variants; its prompt and decode ms are each
line's share of its group's, so their means, not medians, compare with `head`'s. And
`together_hint`, the same groups each line drafting from its ONNX text (`read_lines(...,
hints=...)`: every line's drafts checked in the group's passes), read right after `together`:
its decode against `together`'s is drafting's speed-up side by side (same groups, same output).
And the cascade's unsure lines read N at a time, without and with drafts, against their `head`
and `hint` decode time.

Off the CPU (--device gpu or auto) the card's memory is sampled every 0.5 s while the engines are
loaded and read (nvidia-smi's memory.used, bench/gpu_memory.py), its peak reported.

--unsure-only keeps only the lines below --min-confidence before any variant reads: the
cascade's own workload, from which the engines then learn their draft rates (without it those
lines come among the sure ones, whose drafts are mostly right).

--save-hints writes the ONNX reads (file, text and confidence per crop) to a file and --hints reads
them back by crop file, so a GPU box needs neither onnxruntime nor the ONNX models to measure the
VLM, on all the crops or a subset. Without --model-dir, --save-hints writes the ONNX reads and stops:
the drafts can be saved before any VLM exists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from appliance.config import CascadeConfig, OnnxReaderConfig, VlmGgufConfig
from appliance.engines.base import PageText
from appliance.engines.text_lines import make_line
from appliance.engines.vlm_gguf.decoding import DecodeStats
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.engines.vlm_gguf.line_image import prepare_line
from appliance.pipeline.cascade import line_read_again, max_changes_for, takes_second
from bench.gpu_memory import MemorySampler
from train.eval_lines import cer as line_cer
from train.make_crops import read_crops

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
    image_ms: list[float] = field(default_factory=list)  # of prompt_ms, the image's encode and feed
    decode_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    generated: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_lengths: list[int] = field(default_factory=list)  # k of every drafted step
    texts: list[str] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)  # each line's, as the cascade rates it
    placed: list[str] = field(default_factory=list)  # each line's text as the cascade places it


def engine_for(model_dir: Path, threads: int, device: str, settings: dict[str, Any]) -> VlmGgufEngine:
    config = VlmGgufConfig.model_validate(
        {"model_dir": model_dir, "device": device, "threads": threads, "image_max_side": 0, **settings}
    )
    return VlmGgufEngine(config)


def rows_below(reads: list[dict[str, Any]], min_confidence: float) -> list[int]:
    """The rows whose ONNX read the cascade would send to the VLM (below its confidence threshold)."""
    return [i for i, read in enumerate(reads) if read["confidence"] < min_confidence]


def onnx_reads(crops: list[tuple[Any, str]]) -> tuple[list[dict[str, Any]], float]:
    """The ONNX recogniser's text of each crop with its lowest line confidence, and the seconds it took."""
    from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader  # not needed with --hints

    reader = OnnxLineReader(OnnxReaderConfig(provider="cpu"))
    started = time.perf_counter()
    reads = []
    for image, _ in crops:
        lines = reader.read(image).lines
        confidence = min((line.confidence for line in lines), default=0.0)
        reads.append({"text": " ".join(line.text for line in lines), "confidence": confidence})
    seconds = time.perf_counter() - started
    reader.close()
    return reads, seconds


def max_changes_option(value: str) -> Literal["auto"] | int | None:
    """`--max-changes` checked as the config checks `cascade.max_changes`: auto, none or a count."""
    if value == "none":
        return None
    try:
        setting = value if value == "auto" else int(value)
        return CascadeConfig.model_validate({"max_changes": setting}).max_changes
    except ValueError as error:  # pydantic's ValidationError is one
        raise argparse.ArgumentTypeError(f"auto, none or a count >= 0 (got {value})") from error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="the GGUF line reader (without it: --save-hints only)")
    parser.add_argument("--crops", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, dest="json_out")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--save-hints", type=Path, help="write the ONNX reads here (JSON)")
    parser.add_argument("--hints", type=Path, help="ONNX reads written by --save-hints: no ONNX run")
    parser.add_argument("--min-confidence", type=float, default=CascadeConfig().min_confidence)
    parser.add_argument(
        "--max-changes",
        type=max_changes_option,
        default=CascadeConfig().max_changes,
        help="cascade.max_changes for the more_confident rows: auto (the default), none or a count",
    )
    parser.add_argument("--k-max", type=int, help="the drafting variants' longest draft (draft.k_max)")
    parser.add_argument(
        "--extra-token-cost",
        type=float,
        help="the drafting variants' draft.extra_token_cost (0: a pass costs the same at any length)",
    )
    parser.add_argument("--together", type=int, default=0, help="also read N lines side by side (read_lines)")
    parser.add_argument(
        "--unsure-only",
        action="store_true",
        help="read only the lines below --min-confidence: the cascade's own workload",
    )
    args = parser.parse_args()
    if args.model_dir is None and (args.save_hints is None or args.hints is not None):
        parser.error("--model-dir is needed, unless only saving the ONNX reads (--save-hints)")

    named = read_crops(args.crops, args.limit)
    crops = [(crop, text) for _, crop, text in named]
    if args.hints:
        # Keyed by crop file: a box that carries a subset of the crops still gets each its own read.
        saved = {read["file"]: read for read in json.loads(args.hints.read_text(encoding="utf-8"))}
        missing = [name for name, _, _ in named if name not in saved]
        if missing:
            parser.error(f"--hints has no read for {len(missing)} crops (the first: {missing[0]})")
        reads, onnx_s = [saved[name] for name, _, _ in named], 0.0
    else:
        reads, onnx_s = onnx_reads(crops)
        for read, (name, _, _) in zip(reads, named, strict=True):
            read["file"] = name
    if args.save_hints:
        args.save_hints.write_text(json.dumps(reads, ensure_ascii=False), encoding="utf-8")
    saved_report: dict[str, Any] = {
        "crops": len(reads),
        "hints": str(args.save_hints),
        "onnx_seconds": round(onnx_s, 2),
    }
    if args.unsure_only:
        # The engines then learn their draft rates from these lines alone, as in the appliance,
        # where only the lines the ONNX reader was unsure of reach the VLM.
        kept = rows_below(reads, args.min_confidence)
        named, reads = [named[i] for i in kept], [reads[i] for i in kept]
        crops = [(crop, text) for _, crop, text in named]
        saved_report["unsure"] = len(kept)
    if args.model_dir is None:
        print(json.dumps(saved_report))
        return
    hints = [read["text"] for read in reads]
    draft_settings = {
        key: value
        for key, value in (("k_max", args.k_max), ("extra_token_cost", args.extra_token_cost))
        if value is not None
    }
    variants = {
        name: {**settings, "draft": {**settings["draft"], **draft_settings}}
        if settings["draft"]["source"] != "none"
        else settings
        for name, settings in VARIANTS.items()
    }
    # The card's memory while the engines are loaded and read (nvidia-smi; not sampled on the CPU).
    sampler = MemorySampler(period=0.5) if args.device != "cpu" else None
    if sampler is not None:
        sampler.start()
    engines = {
        name: engine_for(args.model_dir, args.threads, args.device, settings)
        for name, settings in variants.items()
    }
    runs = {name: VariantRun() for name in VARIANTS}
    sized_by_engine = engines["plain"].profile.line_input  # one model: every variant's profile
    together_settings = {"head": "together", "hint": "together_hint"}
    together = (
        {
            name: engine_for(
                args.model_dir,
                args.threads,
                args.device,
                {**variants[alone], "lines_together": args.together},
            )
            for alone, name in together_settings.items()
        }
        if args.together > 1
        else {}
    )
    if together and not sized_by_engine:
        parser.error("--together needs a line reader (family qwen2vl_line)")
    together_runs = {name: VariantRun() for name in together}
    together_passes = dict.fromkeys(together, 0)
    lines_in = [image if sized_by_engine else prepare_line(image) for image, _ in crops]  # BGR stays
    group = max(args.together, 1)
    for start in range(0, len(crops), group):
        for line, hint in zip(lines_in[start : start + group], hints[start : start + group], strict=True):
            for name, engine in engines.items():
                page = engine.read(line, hint=hint)
                assert engine.last_generation is not None
                _record(runs[name], page, engine.last_generation.stats, name)
        for name, engine in together.items():
            span = slice(start, start + group)
            group_read = engine.read_lines(lines_in[span], hints=hints[span])
            together_passes[name] += max(page.details["vlm_gguf"]["target_steps"] for page in group_read)
            for line_page in group_read:
                _record(together_runs[name], line_page, None, name)
    unsure = rows_below(reads, args.min_confidence)
    # The unsure lines read N at a time (across pages here; the cascade groups within a page).
    unsure_together_ms = dict.fromkeys(together, 0.0)
    for start in range(0, len(unsure), group):
        rows = unsure[start : start + group]
        for name, engine in together.items():
            rows_read = engine.read_lines([lines_in[i] for i in rows], hints=[hints[i] for i in rows])
            unsure_together_ms[name] += sum(page.details["vlm_gguf"]["decode_ms"] for page in rows_read)
    gpu_peak = sampler.stop() if sampler is not None else None
    for engine in [*engines.values(), *together.values()]:
        engine.close()

    truths = [text for _, text in crops]

    def cer(texts: list[str], spaced: bool) -> float:
        return line_cer(list(zip(truths, texts, strict=True)), spaced)

    report: dict[str, Any] = {
        "lines": len(crops),
        "onnx": {"cer": cer(hints, False), "cer_spaced": cer(hints, True), "seconds": onnx_s},
        "gpu_memory_peak_mib": gpu_peak,
    }
    print(
        f"{len(crops)} lines; ONNX reader (the drafts): CER {report['onnx']['cer']:.2%} / "
        f"{report['onnx']['cer_spaced']:.2%} spaced"
        + (f", {onnx_s / len(crops) * 1000:.1f} ms a line" if onnx_s else " (read earlier)")
    )
    if gpu_peak is not None:
        print(f"GPU memory used at most: {gpu_peak} MiB (the card's, every engine loaded)")
    print(
        "variant     prompt ms  image ms  decode ms  prompt tok  reused  tok/pass  ms/pass  mean k  "
        "accepted  CER     spaced  same"
    )
    for name, run in runs.items():
        lines = len(crops)
        same = sum(a == b for a, b in zip(run.texts, runs["plain"].texts, strict=True))
        figures = {
            "prompt_ms_median": statistics.median(run.prompt_ms),
            "image_ms_median": statistics.median(run.image_ms),
            "decode_ms_median": statistics.median(run.decode_ms),
            "prompt_tokens_per_line": run.prompt_tokens / lines,
            "reused_tokens_per_line": run.reused_tokens / lines,
            "tokens_per_pass": run.generated / max(run.passes, 1),
            "tokens_per_line": run.generated / lines,
            # Mean cost of a forward pass in decoding (all lines' decode over all their passes):
            # on a GPU a pass is mostly fixed cost, and a longer verification pass may cost more.
            "ms_per_pass": sum(run.decode_ms) / max(run.passes, 1),
            "mean_k": statistics.fmean(run.draft_lengths) if run.draft_lengths else None,
            "accepted_share": run.accepted / run.drafted if run.drafted else None,
            "cer": cer(run.texts, False),
            "cer_spaced": cer(run.texts, True),
            "same_as_plain": same,
            # Where drafting changed the text (batched kernels may round differently on a GPU).
            "differs": [
                {"file": named[i][0], "plain": runs["plain"].texts[i], "text": text}
                for i, text in enumerate(run.texts)
                if text != runs["plain"].texts[i]
            ][:50],
        }
        report[name] = figures
        accepted = "-" if figures["accepted_share"] is None else f"{figures['accepted_share']:.0%}"
        mean_k = "-" if figures["mean_k"] is None else f"{figures['mean_k']:.1f}"
        print(
            f"{name:<11} {figures['prompt_ms_median']:9.1f} {figures['image_ms_median']:9.1f} "
            f"{figures['decode_ms_median']:10.1f} "
            f"{figures['prompt_tokens_per_line']:11.1f} {figures['reused_tokens_per_line']:7.1f} "
            f"{figures['tokens_per_pass']:9.2f} {figures['ms_per_pass']:8.2f} {mean_k:>7} "
            f"{accepted:>9} {figures['cer']:6.2%} "
            f"{figures['cer_spaced']:7.2%}  {same}/{lines}"
        )
    for name, run in together_runs.items():
        report[name] = _together_report(
            name,
            run,
            runs,
            passes=together_passes[name],
            size=args.together,
            unsure=unsure,
            unsure_ms=unsure_together_ms,
            cer=cer,
        )
    if together:
        plain_ms = sum(together_runs["together"].decode_ms)
        drafted_ms = sum(together_runs["together_hint"].decode_ms)
        report["together_drafting_speedup"] = plain_ms / drafted_ms if drafted_ms else None
        print(
            f"drafting side by side ({args.together} a group): decode {plain_ms:.0f} ms without drafts, "
            f"{drafted_ms:.0f} ms drafted ({plain_ms / max(drafted_ms, 1e-9):.2f}x); against one by one "
            f"without drafts (head) {sum(runs['head'].decode_ms) / max(drafted_ms, 1e-9):.2f}x"
        )
    # As the cascade decides: an unsure line takes the VLM's text under `keep` (second: whatever its
    # confidence; more_confident: only when the VLM is surer of it) when it changes no more characters
    # than --max-changes allows (auto: a VLM's); every other line keeps the ONNX text.
    max_changes = max_changes_for(args.max_changes, engines["hint"])

    def taken(keep: str) -> set[int]:
        return {
            i
            for i in unsure
            if takes_second(
                replace(_PLACEHOLDER, text=hints[i], confidence=reads[i]["confidence"]),
                replace(_PLACEHOLDER, text=runs["hint"].placed[i], confidence=runs["hint"].confidences[i]),
                keep,
                max_changes,
            )
        }

    second, surer = taken("second"), taken("more_confident")
    cascade = [runs["hint"].placed[i] if i in second else hints[i] for i in range(len(crops))]
    cascade_surer = [runs["hint"].placed[i] if i in surer else hints[i] for i in range(len(crops))]

    def cer_of(rows: list[int], texts: list[str], spaced: bool) -> float:
        return line_cer([(truths[i], texts[i]) for i in rows], spaced) if rows else 0.0

    decode = {name: sum(run.decode_ms[i] for i in unsure) for name, run in runs.items()}
    report["cascade"] = {
        "min_confidence": args.min_confidence,
        "max_changes": max_changes,
        "unsure_lines": len(unsure),
        "replaced": len(second),
        "cer": cer(cascade, False),
        "cer_spaced": cer(cascade, True),
        "unsure_onnx_cer": cer_of(unsure, hints, False),
        "unsure_vlm_cer": cer_of(unsure, runs["hint"].texts, False),
        "more_confident": {
            "replaced": len(surer),
            "cer": cer(cascade_surer, False),
            "cer_spaced": cer(cascade_surer, True),
        },
        "unsure_decode_ms": decode,
        "drafting_speedup": decode["head"] / decode["hint"] if decode["hint"] else None,
    }
    figures = report["cascade"]
    speedup = "-" if figures["drafting_speedup"] is None else f"{figures['drafting_speedup']:.2f}x"
    print(
        f"cascade (lines below {args.min_confidence}: {len(unsure)} of {len(crops)}; keep: second, "
        f"max_changes {max_changes}: {len(second)} take the VLM's text): CER "
        f"{figures['cer']:.2%} / {figures['cer_spaced']:.2%} spaced against the ONNX text's "
        f"{report['onnx']['cer']:.2%} / {report['onnx']['cer_spaced']:.2%}; on those lines ONNX "
        f"{figures['unsure_onnx_cer']:.2%}, VLM {figures['unsure_vlm_cer']:.2%}; their decode "
        f"{decode['head']:.0f} ms plain, {decode['hint']:.0f} ms drafted ({speedup})"
    )
    surer_figures = figures["more_confident"]
    print(
        f"cascade with keep: more_confident: {len(surer)} of those lines take the VLM's text; CER "
        f"{surer_figures['cer']:.2%} / {surer_figures['cer_spaced']:.2%} spaced"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1), encoding="utf-8")


# The box a read's text is placed in to rate it as the cascade does (line_read_again): only its box is taken.
_PLACEHOLDER = make_line("", [], (0.0, 0.0, 1.0, 1.0), "onnx")


def _record(run: VariantRun, page: PageText, stats: DecodeStats | None, name: str) -> None:
    """One line's read into its variant's run; `stats` None: the read's details give them (together)."""
    details = page.details["vlm_gguf"]
    run.prompt_ms.append(details["prompt_ms"])
    run.image_ms.append(details["image_ms"])
    run.decode_ms.append(details["decode_ms"])
    run.prompt_tokens += details["prompt_tokens"]
    run.reused_tokens += details["prompt_tokens_reused"]
    if stats is not None:
        run.generated += stats.generated
        run.passes += stats.steps
        run.drafted += stats.drafted
        run.accepted += stats.accepted
        run.draft_lengths.extend(stats.k_history)
    else:
        run.generated += details["generated_tokens"]
        run.drafted += details["drafted_tokens"]
        run.accepted += details["accepted_tokens"]
    run.texts.append(" ".join(text_line.text for text_line in page.lines))
    again = line_read_again(page.lines, _PLACEHOLDER, name)
    run.confidences.append(again.confidence)
    run.placed.append(again.text)


def _together_report(
    name: str,
    run: VariantRun,
    runs: dict[str, VariantRun],
    *,
    passes: int,
    size: int,
    unsure: list[int],
    unsure_ms: dict[str, float],
    cer: Any,
) -> dict[str, Any]:
    """Lines read side by side against `head` (one by one, head kept, no drafts): ms a line, passes, CER."""
    head = runs["head"]
    lines = len(run.texts)
    figures = {
        "lines_together": size,
        "accepted_share": run.accepted / run.drafted if run.drafted else None,
        "prompt_ms_mean": statistics.fmean(run.prompt_ms),
        "decode_ms_mean": statistics.fmean(run.decode_ms),
        "head_prompt_ms_mean": statistics.fmean(head.prompt_ms),
        "head_decode_ms_mean": statistics.fmean(head.decode_ms),
        "passes": passes,
        "head_passes": head.passes,
        "ms_per_pass": sum(run.decode_ms) / max(passes, 1),
        "tokens_per_line": run.generated / lines,
        "same_as_plain": sum(a == b for a, b in zip(run.texts, runs["plain"].texts, strict=True)),
        "cer": cer(run.texts, False),
        "cer_spaced": cer(run.texts, True),
        "unsure_decode_ms": {
            name: unsure_ms[name],
            "head": sum(head.decode_ms[i] for i in unsure),
            "hint": sum(runs["hint"].decode_ms[i] for i in unsure),
        },
    }
    speedup = figures["head_decode_ms_mean"] / figures["decode_ms_mean"] if figures["decode_ms_mean"] else 0.0
    unsure_figures = figures["unsure_decode_ms"]
    accepted = "" if run.drafted == 0 else f", {figures['accepted_share']:.0%} of drafts accepted"
    print(
        f"{name} ({size} a group): mean a line prompt {figures['prompt_ms_mean']:.1f} ms, decode "
        f"{figures['decode_ms_mean']:.1f} ms against head's {figures['head_prompt_ms_mean']:.1f} / "
        f"{figures['head_decode_ms_mean']:.1f} ({speedup:.2f}x decode); {passes} passes against "
        f"{head.passes}, {figures['ms_per_pass']:.2f} ms a pass{accepted}; CER {figures['cer']:.2%} / "
        f"{figures['cer_spaced']:.2%}; same text as plain {figures['same_as_plain']}/{lines}; the "
        f"unsure lines' decode {unsure_figures[name]:.0f} ms {name}, {unsure_figures['head']:.0f} "
        f"head, {unsure_figures['hint']:.0f} drafted"
    )
    return figures


if __name__ == "__main__":
    main()
