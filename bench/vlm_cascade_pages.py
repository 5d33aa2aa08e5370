"""The line cascade page by page with a GGUF line reader: its cost a page, one line at a time or side by side.

Usage::

    python -m bench.vlm_cascade_pages --model-dir DIR DATA [--limit N] [--threads T]
        [--together 1 8 ...] [--keep auto second more_confident] [--min-confidence C] [--mode always]
        [--max-changes auto|none|N] [--device auto|cpu|gpu] [--json OUT]

DIR holds a `qwen2vl_line` GGUF model, its mmproj and manifest.json; DATA a page set with ground
truth (`gt/*.json`, as bench.ocr_bench reads). The appliance's ONNX engine reads each page once;
then the cascade (`unit: lines`, `mode: below_threshold`; `--mode always`: every line) sends that
read's unsure lines to the line reader, once per `--together` setting
(`engine.vlm_gguf.lines_together`; 1: one line at a time, drafted from the ONNX text) and `--keep`
rule (`cascade.keep`: which read a re-read line keeps), the settings taking turns page by page.
Each page's crops are
the ones the appliance cuts, and a page's lines are grouped only with each other, as in the
daemon. Reported per setting: the VLM's time a page (all of it, and its decoding) over the pages
that sent lines, lines sent, and the whole set's CER (bench.scoring, reading order by position)
against the ONNX read alone; the JSON lists every line the VLM's text replaced, beside the ONNX
text it replaced, the characters it changed and what that replacement alone changed in its
page's edits (`edits_change`), and prints them summed for replacements that changed at most
`cascade.max_changes: auto`'s 3 characters for a VLM and for the rest. Each setting's CER less the
ONNX read's comes with a 95% interval from a paired bootstrap over the pages (bench.page_bootstrap):
whether the cascade's gain or loss is more than the luck of which pages were drawn.
Pages are read as they are, without the appliance's preprocessing. Off the CPU, the card's memory
at most while the engines load and read (nvidia-smi every 250 ms, every process on the card).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, get_args

import cv2

from appliance.config import CascadeConfig, EngineConfig, VlmGgufConfig
from appliance.engines.factory import build_engine
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.pipeline.cascade import AUTO_MAX_CHANGES, Cascade, changed_characters, prepare_joint
from bench.gpu_memory import MemorySampler
from bench.ocr_bench import load_dataset
from bench.page_bootstrap import scores_difference
from bench.scoring import PageScore, TextLine, micro_average, score_page
from bench.vlm_lines import max_changes_option


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--together", type=int, nargs="+", default=[1, 8])
    keep_rules = get_args(CascadeConfig.model_fields["keep"].annotation)
    parser.add_argument("--keep", nargs="+", default=[CascadeConfig().keep], choices=keep_rules)
    parser.add_argument("--min-confidence", type=float, default=CascadeConfig().min_confidence)
    parser.add_argument(
        "--mode",
        choices=["below_threshold", "always"],
        default="below_threshold",
        help="cascade.mode: the lines read below --min-confidence, or every line",
    )
    parser.add_argument(
        "--max-changes",
        type=max_changes_option,
        default=CascadeConfig().max_changes,
        help="cascade.max_changes: auto (the default), none or a count",
    )
    parser.add_argument("--json", type=Path, dest="json_out")
    args = parser.parse_args()

    pages, case_insensitive = load_dataset(args.data, args.limit)
    sampler = MemorySampler(period=0.25) if args.device != "cpu" else None
    if sampler is not None:
        sampler.start()
    onnx = build_engine(EngineConfig())
    readers = {
        size: VlmGgufEngine(
            VlmGgufConfig.model_validate(
                {
                    "model_dir": args.model_dir,
                    "device": args.device,
                    "threads": args.threads,
                    "lines_together": size,
                }
            )
        )
        for size in args.together
    }
    # One cascade a setting: lines together x keep rule, named as the report names it.
    cascades = {
        f"{size}/{keep}": Cascade(
            reader,
            CascadeConfig(
                mode=args.mode,
                unit="lines",
                min_confidence=args.min_confidence,
                keep=keep,
                max_changes=args.max_changes,
            ),
        )
        for size, reader in readers.items()
        for keep in args.keep
    }
    if any(cascade.keep == "joint" for cascade in cascades.values()):
        # As the daemon does for `keep: joint`: the ONNX engine keeps its step evidence and each
        # reader scores its hints (a pass more on lines it reads otherwise, in every setting's time).
        for reader in readers.values():
            if not prepare_joint(onnx, reader):
                raise SystemExit("keep joint: the ONNX engine or the line reader keeps no scores")
    onnx_scores: list[PageScore] = []
    scores: dict[str, list[PageScore]] = {name: [] for name in cascades}
    vlm_ms: dict[str, list[float]] = {name: [] for name in cascades}
    decode_ms: dict[str, list[float]] = {name: [] for name in cascades}
    # Every line a setting's cascade took from the VLM, with the ONNX read it replaced.
    replaced: dict[str, list[dict[str, Any]]] = {name: [] for name in cascades}
    sent: list[int] = []
    for page in pages:
        image = cv2.imread(str(page.image), cv2.IMREAD_COLOR)
        if image is None:
            raise SystemExit(f"cannot read {page.image}")
        first = onnx.recognize(image)
        onnx_scores.append(score_page(page.lines, _text_lines(first.lines), case_insensitive))
        # The same lines for every setting: they depend on the first read and the threshold alone.
        sent.append(len(next(iter(cascades.values())).unsure_lines(first.lines)))
        for name, cascade in cascades.items():
            started = time.perf_counter()
            refined = cascade.refine(image, first)
            elapsed = (time.perf_counter() - started) * 1000
            scores[name].append(score_page(page.lines, _text_lines(refined.lines), case_insensitive))
            replaced[name].extend(
                {
                    "page": page.image.name,
                    "onnx": before.text,
                    "onnx_confidence": round(before.confidence, 3),
                    "vlm": after.text,
                    "vlm_confidence": round(after.confidence, 3),
                    "changed_characters": changed_characters(before.text, after.text),
                    "edits_change": _edits_change(
                        page.lines, first.lines, onnx_scores[-1], (index, after.text), case_insensitive
                    ),
                }
                for index, (before, after) in enumerate(zip(first.lines, refined.lines, strict=True))
                if after.engine != before.engine
            )
            if sent[-1]:
                vlm_ms[name].append(elapsed)
                decode_ms[name].append(float(refined.timings_ms.get("vlm_decode", 0.0)))
    gpu_peak = sampler.stop() if sampler is not None else None
    for reader in readers.values():
        reader.close()
    onnx.close()

    onnx_set = micro_average(onnx_scores)
    sending = sum(1 for count in sent if count)
    report: dict[str, Any] = {
        "pages": len(pages),
        "pages_sending": sending,
        "lines_sent": sum(sent),
        "onnx": {"cer": onnx_set.cer_geo, "cer_spaced": onnx_set.cer_geo_spaced},
        "gpu_memory_peak_mib": gpu_peak,
    }
    print(
        f"{len(pages)} pages, {sending} sent {sum(sent)} lines (up to {max(sent, default=0)} a page); "
        f"ONNX alone CER {onnx_set.cer_geo:.2%} / {onnx_set.cer_geo_spaced:.2%} spaced"
        + ("" if gpu_peak is None else f"; the card held {gpu_peak:,} MiB at most")
    )
    print("together/keep            VLM ms a sending page (mean)  of it decoding  CER      spaced")
    for name in cascades:
        figures = micro_average(scores[name])
        mean_ms = sum(vlm_ms[name]) / max(len(vlm_ms[name]), 1)
        mean_decode = sum(decode_ms[name]) / max(len(decode_ms[name]), 1)
        against = scores_difference(onnx_scores, scores[name])
        report[name] = {
            "vlm_ms_mean": mean_ms,
            "decode_ms_mean": mean_decode,
            "cer": figures.cer_geo,
            "cer_spaced": figures.cer_geo_spaced,
            "against_onnx": {label: asdict(difference) for label, difference in against.items()},
            "replaced": replaced[name],
            "by_change": _by_change(replaced[name]),
        }
        print(
            f"{name:<22}  {mean_ms:30.1f}  {mean_decode:14.1f}  {figures.cer_geo:6.2%}  "
            f"{figures.cer_geo_spaced:6.2%}"
        )
        for label, difference in against.items():
            print(f"  against the ONNX read alone, {label}: {difference.described(b='the cascade')}")
        for label, group in report[name]["by_change"].items():
            print(
                f"  replaced, changing {label.replace('_', ' ')} characters: {group['lines']} lines, "
                f"{group['better']} better ({group['edits_fewer']} edits fewer), "
                f"{group['worse']} worse ({group['edits_more']} more)"
            )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1), encoding="utf-8")


def _text_lines(lines: list[Any]) -> list[TextLine]:
    return [TextLine(line.text, line.box) for line in lines]


def _edits_change(
    truth: list[TextLine],
    lines: list[Any],
    onnx_score: PageScore,
    replacement: tuple[int, str],
    case_insensitive: bool,
) -> int:
    """The page's whitespace-free edits with only `replacement` (line index, text), less the ONNX read's.

    Negative: that one replacement alone made the page better. Shows which replacements cost a
    cascade its accuracy, where the set's CER only sums them.
    """
    index, text = replacement
    alone = _text_lines(lines)
    alone[index] = TextLine(text, alone[index].box)
    return score_page(truth, alone, case_insensitive).geo_errors - onnx_score.geo_errors


def _by_change(replaced: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Replacements changing at most AUTO_MAX_CHANGES characters, and more: better, worse, by how much.

    How many made their page better or worse, and by how many edits in all (corrections against
    rewrites).
    """
    groups: dict[str, dict[str, int]] = {}
    for label, small in ((f"at_most_{AUTO_MAX_CHANGES}", True), (f"over_{AUTO_MAX_CHANGES}", False)):
        rows = [row for row in replaced if (row["changed_characters"] <= AUTO_MAX_CHANGES) == small]
        changes = [row["edits_change"] for row in rows]
        groups[label] = {
            "lines": len(rows),
            "better": sum(change < 0 for change in changes),
            "edits_fewer": -sum(change for change in changes if change < 0),
            "worse": sum(change > 0 for change in changes),
            "edits_more": sum(change for change in changes if change > 0),
        }
    return groups


if __name__ == "__main__":
    main()
